"""The report's "Inside the steps" section: phase breakdown, ranks of a distributed run and
served requests, as tables, plus two charts on the report's shared time axis (time per step
in each phase; step time of each rank) drawn by the page's own uPlot script."""

from __future__ import annotations

import math
from collections.abc import Sequence

from computewatch.analysis.downsample import MAX_BUCKETS
from computewatch.analysis.steps import StepAnatomy, step_anatomy
from computewatch.analysis.summary_types import PhaseStats, RankStats, RequestStats, RunSummary
from computewatch.store import RunRow, Store
from computewatch.units import MISSING, format_percent, format_seconds
from computewatch.views.html.page import (
    ChartData,
    ChartSeries,
    ChartSpec,
    chart_figure,
    escape,
    grid_table,
    kv_table,
)
from computewatch.views.summary_rows import figure_text, format_value, range_text

MAX_PHASE_SERIES = 8  # the rest of the phases are summed into "other phases"


def _secs(v: float | None) -> str:
    return format_seconds(v, clock=False)


# -- tables -----------------------------------------------------------------------------------


def phases_table(ph: PhaseStats) -> str:
    """One row per phase: share of step time (self time), inclusive and self seconds, per-step
    distribution, accelerator seconds and the phase it ran within."""
    rows = []
    for name, p in ph["by_name"].items():
        dist = p["per_step_seconds"]
        rows.append(
            [
                escape(name),
                escape(format_percent(p.get("share"))),
                escape(_secs(p.get("seconds"))),
                escape(_secs(p.get("self_seconds"))),
                escape(str(p.get("steps"))),
                escape(_secs(dist.get("mean"))),
                escape(_secs(dist.get("p50"))),
                escape(_secs(dist.get("p90"))),
                escape(_secs(p.get("accel_seconds"))),
                escape(p.get("within") or MISSING),
            ]
        )
    un = ph["unaccounted"]
    rows.append(
        [
            "<em>unaccounted</em>",
            escape(format_percent(un.get("share"))),
            escape(_secs(un.get("seconds"))),
        ]
        + [MISSING] * 7
    )
    head = (
        "phase", "share", "seconds", "self seconds", "steps", "mean/step", "p50/step",
        "p90/step", "accelerator", "within",
    )  # fmt: skip
    return (
        f"<p>{escape(ph.get('steps'))} timed steps, {escape(_secs(ph.get('step_seconds')))} of "
        "step time. A share is a phase's self time (nested phases, such as communication inside "
        "the backward pass, are taken out of their parent), so the shares and the unaccounted "
        "time add up to 100%.</p>" + grid_table(head, rows)
    )


def ranks_table(rk: RankStats) -> str:
    """The distributed run's figures, then one row per rank."""
    head_rows = [
        ("ranks", escape(rk.get("count"))),
        ("world size", escape(format_value(rk.get("world_size")))),
        ("slowest rank", escape(rk.get("slowest_rank"))),
        ("load imbalance", escape(format_percent(rk.get("load_imbalance")))),
        ("communication share", escape(format_percent(rk.get("comm_share")))),
    ]
    rows = []
    for r in rk["ranks"]:
        st = r["step_time_seconds"]
        label = escape(r["rank"])
        if r["rank"] == rk.get("slowest_rank"):
            label += ' <span class="badge">slowest</span>'
        rows.append(
            [
                label,
                escape(", ".join(str(p) for p in r.get("pids") or [])),
                escape(r.get("steps")),
                escape(_secs(st.get("mean"))),
                escape(_secs(st.get("p50"))),
                escape(_secs(st.get("p90"))),
                escape(_secs(r.get("compute_seconds_per_step"))),
                escape(_secs(r.get("comm_seconds"))),
                escape(format_percent(r.get("comm_share"))),
            ]
        )
    head = (
        "rank", "pids", "steps", "step mean", "step p50", "step p90", "compute/step",
        "comm", "comm share",
    )  # fmt: skip
    return kv_table(head_rows) + grid_table(head, rows)


def requests_table(rq: RequestStats) -> str:
    """Counts, latency, rates and tokens, then energy and cost per request and per 1M tokens
    with their method and how they were allocated."""
    lat = rq["latency_seconds"]
    rows = [
        ("requests", escape(rq.get("count"))),
        ("errors", escape(rq.get("errors"))),
        (
            "latency",
            escape(
                f"mean {_secs(lat.get('mean'))}, p50 {_secs(lat.get('p50'))}, "
                f"p90 {_secs(lat.get('p90'))}, latency p99 {_secs(lat.get('p99'))}, "
                f"max {_secs(lat.get('max'))}"
            ),
        ),
        ("requests per second", escape(format_value(rq.get("requests_per_second")))),
        ("mean concurrency", escape(format_value(rq.get("concurrency_mean")))),
        ("tokens in", escape(format_value(rq.get("tokens_in_total")))),
        ("tokens out", escape(format_value(rq.get("tokens_out_total")))),
        ("tokens out per second", escape(format_value(rq.get("tokens_per_second")))),
    ]
    figs = []
    for f, label in (
        (rq.get("energy_per_request"), "energy per request"),
        (rq.get("energy_per_1m_tokens"), "energy per 1M tokens"),
        (rq.get("cost_per_request"), "cost per request"),
        (rq.get("cost_per_1m_tokens"), "cost per 1M tokens"),
    ):
        if f is not None and f["value"] is not None:
            figs.append(
                [
                    escape(label),
                    escape(figure_text(f)),
                    escape(f.get("method") or ""),
                    escape(range_text(f)),
                    escape("; ".join(f.get("assumptions") or [])),
                ]
            )
    out = kv_table(rows)
    if figs:
        out += grid_table(("quantity", "value", "method", "range (low–high)", "assumptions"), figs)
    by = rq.get("by_name") or {}
    if by:
        out += grid_table(
            ("request", "count", "errors", "p50", "p90", "p99"),
            (
                [
                    escape(n or "(unnamed)"),
                    escape(v.get("count")),
                    escape(v.get("errors")),
                    escape(_secs(v["latency_seconds"]["p50"])),
                    escape(_secs(v["latency_seconds"]["p90"])),
                    escape(_secs(v["latency_seconds"]["p99"])),
                ]
                for n, v in by.items()
            ),
        )
    return out


# -- charts -----------------------------------------------------------------------------------


def _bins(
    points: Sequence[tuple[float, float]], start: float, width: float, count: int
) -> tuple[list[float | None], list[float | None], list[float | None]]:
    """Mean, min and max of the values whose time falls in each of ``count`` buckets."""
    acc: list[list[float]] = [[] for _ in range(count)]
    for t, v in points:
        i = min(int((t - start) / width), count - 1) if width > 0 else 0
        acc[max(i, 0)].append(v)
    mean = [sum(a) / len(a) if a else None for a in acc]
    return mean, [min(a) if a else None for a in acc], [max(a) if a else None for a in acc]


def _series(
    label: str, points: Sequence[tuple[float, float]], start: float, width: float, count: int
) -> ChartSeries:
    mean, lo, hi = _bins(points, start, width, count)
    s: ChartSeries = {"label": label, "mean": [_r(v) for v in mean]}
    if any(a is not None and b is not None and a != b for a, b in zip(lo, hi, strict=True)):
        s["lo"], s["hi"] = [_r(v) for v in lo], [_r(v) for v in hi]
    return s


def _r(v: float | None) -> float | None:
    return None if v is None or not math.isfinite(v) else round(v, 9)


def step_charts(
    store: Store, run: RunRow, summary: RunSummary, max_buckets: int = MAX_BUCKETS
) -> tuple[dict[str, list[float]], list[ChartSpec]]:
    """Grids and chart specs (the shape ``report.js`` draws) for phase time per step and, in a
    distributed run, each rank's step time; bucketed on wall-clock time."""
    if run.samples_deleted_at is not None or not (summary.get("phases") or summary.get("ranks")):
        return {}, []
    steps = store.steps(run.key)
    writers = store.writers(run.key)
    anatomy, _ = step_anatomy(steps, store.phases(run.key), {p: t for p, (t, _) in writers.items()})
    wall = {(s.pid, s.mono): s.wall for s in steps}
    timed: list[tuple[float, StepAnatomy]] = sorted(
        ((wall[(a.pid, a.end)], a) for a in anatomy if (a.pid, a.end) in wall),
        key=lambda x: x[0],
    )
    if not timed:
        return {}, []
    t0, t1 = timed[0][0], timed[-1][0]
    grids: dict[str, list[float]] = {}
    charts: list[ChartSpec] = []
    ph = summary.get("phases")
    if ph and ph.get("by_name"):
        procs = len({a.pid for _, a in timed})  # a bucket per step of one process: ranks meet
        count = max(1, min(max_buckets, math.ceil(len(timed) / procs)))
        width = (t1 - t0) / count if t1 > t0 else 0.0
        grids["phases"] = [round(t0 + i * width, 3) for i in range(count)]
        names = list(ph["by_name"])
        shown, rest = names[:MAX_PHASE_SERIES], names[MAX_PHASE_SERIES:]
        series = [
            _series(n, [(t, a.self_time.get(n, 0.0)) for t, a in timed], t0, width, count)
            for n in shown
        ]
        if rest:
            pts = [(t, sum(a.self_time.get(n, 0.0) for n in rest)) for t, a in timed]
            series.append(_series("other phases", pts, t0, width, count))
        pts = [(t, max(a.seconds - a.covered, 0.0)) for t, a in timed]
        series.append(_series("unaccounted", pts, t0, width, count))
        charts.append(
            {
                "id": "phase_time",
                "title": "Time per step in each phase",
                "subtitle": "self time of each phase per step (nested phases taken out of "
                "their parent), mean of the steps ending in each bucket",
                "unit": "seconds",
                "grid": "phases",
                "per_bucket": math.ceil(len(timed) / count),
                "series": series,
            }
        )
    rk = summary.get("ranks")
    if rk and rk.get("ranks"):
        rank_of = {p: m["rank"] for p, (_, m) in writers.items() if isinstance(m.get("rank"), int)}
        per_rank: dict[int, list[tuple[float, float]]] = {}
        for t, a in timed:
            if a.pid in rank_of:
                per_rank.setdefault(rank_of[a.pid], []).append((t, a.seconds))
        most = max((len(v) for v in per_rank.values()), default=0)
        if most:
            count = max(1, min(max_buckets, most))
            width = (t1 - t0) / count if t1 > t0 else 0.0
            grids["ranks"] = [round(t0 + i * width, 3) for i in range(count)]
            charts.append(
                {
                    "id": "rank_step_time",
                    "title": "Step time by rank",
                    "subtitle": "time between consecutive steps of each rank, mean per bucket",
                    "unit": "seconds",
                    "grid": "ranks",
                    "per_bucket": math.ceil(most / count),
                    "series": [
                        _series(f"rank {r}", per_rank[r], t0, width, count)
                        for r in sorted(per_rank)
                    ],
                }
            )
    return grids, charts


# -- the section --------------------------------------------------------------------------------


def steps_section(
    store: Store,
    run: RunRow,
    summary: RunSummary,
    data: ChartData,
    max_buckets: int = MAX_BUCKETS,
) -> str:
    """The section's HTML ("" when the run had no phases, ranks or requests); its charts are
    added to the page's chart ``data`` (grids and specs) so the page's script draws them."""
    ph, rk, rq = summary.get("phases"), summary.get("ranks"), summary.get("requests")
    if not (ph or rk or rq):
        return ""
    grids, charts = step_charts(store, run, summary, max_buckets)
    data["grids"].update(grids)
    data["charts"].extend(charts)
    out = ['<section id="section-steps"><h2>Inside the steps</h2>']
    if charts:
        out.append('<div class="charts">')
        out += [chart_figure(c["id"], c["title"], c["subtitle"]) for c in charts]
        out.append("</div>")
    if ph:
        out += ["<h3>Phases</h3>", phases_table(ph)]
    if rk:
        out += ["<h3>Ranks</h3>", ranks_table(rk)]
    if rq:
        out += ["<h3>Requests</h3>", requests_table(rq)]
    out.append("</section>")
    return "".join(out)
