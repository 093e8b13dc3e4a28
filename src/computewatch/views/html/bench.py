"""HTML pages of the benchmarks: a variant comparison (a bar chart per figure and a Pareto
chart of accuracy, or latency, against energy per query) and a scaling sweep (throughput,
latency, memory and energy per sample against the first parameter, one line per combination
of the others; uPlot, the report's own copy, inline)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from computewatch.bench.records import CompareResult, SweepPoint, SweepResult
from computewatch.units import (
    MISSING,
    format_bytes,
    format_energy,
    format_percent,
    format_seconds,
)
from computewatch.views.bench import format_qps
from computewatch.views.html.page import (
    asset,
    escape,
    grid_table,
    json_for_script,
    kv_table,
    notes_section,
    page_head,
    script_safe,
)

__all__ = ["bench_section", "compare_page", "sweep_from_dict", "sweep_page"]

_PALETTE = ("#0969da", "#cf222e", "#1a7f37", "#8250df", "#bc4c00", "#0598bc", "#bf3989")
_STYLE = ".bars text{font:12px sans-serif}.cw-sweep{width:100%;max-width:900px}"


def _bars(
    title: str, items: Sequence[tuple[str, float | None]], fmt: Callable[[float], str]
) -> str:
    """A horizontal bar chart as inline SVG (no script needed)."""
    known = [v for _, v in items if v is not None]
    top = max(known) if known else 1.0
    top = top or 1.0
    row_h, label_w, bar_w = 24, 140, 360
    h = row_h * len(items) + 10
    parts = [f'<figure class="chart"><figcaption><strong>{escape(title)}</strong></figcaption>',
             f'<svg class="bars" width="{label_w + bar_w + 120}" height="{h}" role="img" '
             f'aria-label="{escape(title)}">']  # fmt: skip
    for i, (name, v) in enumerate(items):
        y = i * row_h + 5
        parts.append(f'<text x="0" y="{y + 15}">{escape(name)}</text>')
        if v is None:
            parts.append(f'<text x="{label_w}" y="{y + 15}">{MISSING}</text>')
            continue
        w = max(1.0, bar_w * v / top)
        color = _PALETTE[i % len(_PALETTE)]
        parts.append(
            f'<rect x="{label_w}" y="{y + 3}" width="{w:.1f}" height="16" fill="{color}"/>'
            f'<text x="{label_w + w + 6:.1f}" y="{y + 15}">{escape(fmt(v))}</text>'
        )
    parts.append("</svg></figure>")
    return "".join(parts)


def _scatter(
    title: str,
    points: Sequence[tuple[str, float | None, float | None, bool]],
    x_fmt: Callable[[float], str],
    y_fmt: Callable[[float], str],
    x_label: str,
    y_label: str,
) -> str:
    """The Pareto chart: one dot per variant, the front's dots ringed and joined."""
    known = [(n, x, y, f) for n, x, y, f in points if x is not None and y is not None]
    w, h, pad = 520, 320, 60
    parts = [f'<figure class="chart"><figcaption><strong>{escape(title)}</strong></figcaption>',
             f'<svg class="bars" width="{w}" height="{h}" role="img" aria-label="{escape(title)}">',
             f'<line x1="{pad}" y1="{h - pad}" x2="{w - 10}" y2="{h - pad}" stroke="#888"/>',
             f'<line x1="{pad}" y1="10" x2="{pad}" y2="{h - pad}" stroke="#888"/>',
             f'<text x="{w / 2:.0f}" y="{h - 15}">{escape(x_label)}</text>',
             f'<text x="5" y="20">{escape(y_label)}</text>']  # fmt: skip
    if known:
        xs = [p[1] for p in known]
        ys = [p[2] for p in known]
        x0, x1 = min(0.0, *xs), max(xs) or 1.0
        y0, y1 = min(ys), max(ys)
        if y1 == y0:
            y0, y1 = y0 - 1, y1 + 1

        def sx(v: float) -> float:
            return pad + (w - pad - 110) * (v - x0) / ((x1 - x0) or 1.0)

        def sy(v: float) -> float:
            return h - pad - (h - pad - 30) * (v - y0) / (y1 - y0)

        front = sorted((p for p in known if p[3]), key=lambda p: p[1])
        if len(front) > 1:
            path = " ".join(f"{sx(p[1]):.1f},{sy(p[2]):.1f}" for p in front)
            parts.append(f'<polyline points="{path}" fill="none" stroke="#1a7f37"/>')
        for i, (name, x, y, on) in enumerate(known):
            cx, cy = sx(x), sy(y)
            color = _PALETTE[i % len(_PALETTE)]
            ring = ' stroke="#1a7f37" stroke-width="3"' if on else ""
            parts.append(
                f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="6" fill="{color}"{ring}>'
                f"<title>{escape(name)}: {escape(x_fmt(x))}, {escape(y_fmt(y))}</title></circle>"
                f'<text x="{cx + 9:.1f}" y="{cy + 4:.1f}">{escape(name)}</text>'
            )
    parts.append("</svg></figure>")
    return "".join(parts)


def compare_page(c: CompareResult) -> str:
    """The comparison as one self-contained page."""
    v = c.variants
    table = grid_table(
        ["variant", "status", "p50", "p90", "throughput", "energy/query", "peak RSS", "model",
         "accuracy", "Pareto"],
        [[escape(x.name), escape(x.status), format_seconds(x.latency_p50_seconds),
          format_seconds(x.latency_p90_seconds),
          escape(format_qps(x.samples_per_second)),
          format_energy(x.energy_per_query_joules), format_bytes(x.peak_rss_bytes),
          format_bytes(x.model_bytes), format_percent(x.accuracy), "yes" if x.pareto else ""]
         for x in v],
    )  # fmt: skip
    charts = [
        _bars("latency p50", [(x.name, x.latency_p50_seconds) for x in v], format_seconds),
        _bars("throughput", [(x.name, x.samples_per_second) for x in v], format_qps),
        _bars("energy per query", [(x.name, x.energy_per_query_joules) for x in v], format_energy),
        _bars("peak memory (RSS)", [(x.name, _float(x.peak_rss_bytes)) for x in v], format_bytes),
        _bars("model size", [(x.name, _float(x.model_bytes)) for x in v], format_bytes),
    ]
    y_name = c.pareto_axes[1]
    if y_name == "accuracy":
        charts.append(_bars("accuracy", [(x.name, x.accuracy) for x in v], format_percent))
        pts = [(x.name, x.energy_per_query_joules, x.accuracy, x.pareto) for x in v]
        y_fmt: Callable[[float], str] = format_percent
        y_label = "accuracy (higher is better)"
    else:
        pts = [(x.name, x.energy_per_query_joules, x.latency_p50_seconds, x.pareto) for x in v]
        y_fmt = format_seconds
        y_label = "latency p50 (lower is better)"
    charts.append(
        _scatter("Pareto: " + y_label.split(" (")[0] + " against energy per query", pts,
                 format_energy, y_fmt, "energy per query (lower is better)", y_label)
    )  # fmt: skip
    notes = [f"{x.name}: failed: {x.error}" for x in v if x.error]
    notes += sorted({f"energy: {x.energy_method}" for x in v if x.energy_method})
    title = f"Benchmark: {' vs '.join(x.name for x in v)}"
    return "\n".join(
        [
            page_head(title, _STYLE),
            f"<h1>{escape(title)}</h1>",
            f"<p>{escape(c.scenario)} scenario on MLCommons LoadGen, {c.repetitions} interleaved "
            "repetition(s) per variant, medians.</p>",
            table,
            *charts,
            notes_section(notes),
            "</body></html>",
        ]
    )


def _float(v: int | None) -> float | None:
    return None if v is None else float(v)


_SWEEP_JS = """
window.addEventListener("load", function () {
  var d = JSON.parse(document.getElementById("cw-sweep").textContent);
  var P = ["#0969da", "#cf222e", "#1a7f37", "#8250df", "#bc4c00", "#0598bc", "#bf3989"];
  d.charts.forEach(function (c) {
    var el = document.getElementById("sweep-" + c.id);
    var series = [{label: d.x}];
    c.lines.forEach(function (l, i) {
      series.push({label: l.label, stroke: P[i % P.length], width: 2, points: {show: true}});
    });
    var data = [d.xs].concat(c.lines.map(function (l) { return l.ys; }));
    new uPlot({width: Math.min(880, el.clientWidth || 880), height: 260, series: series,
      scales: {x: {time: false}}, axes: [{label: d.x}, {label: c.unit}]}, data, el);
  });
});
"""


def _sweep_body(s: SweepResult) -> list[str]:
    """The sweep's summary line, table, charts, notes and their data and script (uPlot must be
    on the page: the script draws once the page has loaded)."""
    names = list(s.params)
    first, rest = names[0], names[1:]
    xs = [float(x) for x in s.params[first] if isinstance(x, int | float)]
    if len(xs) != len(s.params[first]):
        xs = [float(i) for i in range(len(s.params[first]))]
    groups: dict[str, dict[object, dict[str, float | None]]] = {}
    for p in s.points:
        label = ", ".join(f"{k}={p.params[k]}" for k in rest) or "all points"
        groups.setdefault(label, {})[p.params[first]] = {
            "throughput": p.samples_per_second,
            "latency": p.step_time_p50_seconds,
            "memory": None if p.peak_rss_bytes is None else p.peak_rss_bytes / 2**20,
            "energy": p.energy_per_sample_joules,
        }
    specs = [("throughput", "samples/s"), ("latency", "step time p50 (s)"),
             ("memory", "peak RSS (MiB)"), ("energy", "energy per sample (J)")]  # fmt: skip
    data = {
        "x": first,
        "xs": xs,
        "charts": [
            {
                "id": k,
                "unit": u,
                "lines": [
                    {"label": label, "ys": [g.get(x, {}).get(k) for x in s.params[first]]}
                    for label, g in groups.items()
                ],
            }
            for k, u in specs
        ],
    }
    rows = [
        [*(escape(p.params.get(n)) for n in names), escape(p.status),
         escape(format_qps(p.samples_per_second)),
         format_seconds(p.step_time_p50_seconds), format_bytes(p.peak_rss_bytes),
         format_energy(p.energy_per_sample_joules)]
        for p in s.points
    ]  # fmt: skip
    notes = [f"{', '.join(f'{k}={v}' for k, v in p.params.items())}: {p.status}: {p.error}"
             for p in s.points if p.error]  # fmt: skip
    knee = "; ".join(", ".join(f"{k}={v}" for k, v in p.items()) for p in s.knee) or "none"
    oom = "; ".join(", ".join(f"{k}={v}" for k, v in p.items()) for p in s.out_of_memory_at)
    limit = format_bytes(s.memory_limit_bytes) if s.memory_limit_bytes else "none"
    return [
        f"<p>Knee (no later point gains {s.knee_gain:.0%} throughput): {escape(knee)}. "
        f"Out of memory from: {escape(oom or 'none')}. Memory limit: {escape(limit)}.</p>",
        grid_table([*names, "status", "throughput", "step p50", "peak RSS", "energy/sample"], rows),
        *(
            f'<figure class="chart"><figcaption><strong>{escape(u)}</strong></figcaption>'
            f'<div class="cw-sweep" id="sweep-{k}"></div></figure>'
            for k, u in specs
        ),
        *([notes_section(notes)] if notes else []),
        f'<script type="application/json" id="cw-sweep">{json_for_script(data)}</script>',
        f"<script>{script_safe(_SWEEP_JS)}</script>",
    ]


def sweep_page(s: SweepResult) -> str:
    """The sweep as one self-contained page: a table and four charts."""
    title = f"Sweep: {s.target}"
    return "\n".join(
        [
            page_head(title, _STYLE),
            f"<h1>{escape(title)}</h1>",
            f"<script>{script_safe(asset('uPlot.iife.min.js'))}</script>",
            *_sweep_body(s),
            "</body></html>",
        ]
    )


def sweep_from_dict(d: Mapping[str, Any]) -> SweepResult:
    """A :class:`SweepResult` back from its JSON document."""
    return SweepResult(
        target=d["target"],
        params={k: list(v) for k, v in d["params"].items()},
        memory_limit_bytes=d.get("memory_limit_bytes"),
        points=[SweepPoint(**p) for p in d["points"]],
        knee=list(d.get("knee") or []),
        out_of_memory_at=list(d.get("out_of_memory_at") or []),
        knee_gain=float(d.get("knee_gain", 0.1)),
    )


def bench_section(doc: object) -> str:
    """The report's "Benchmark" section for a run with a ``bench`` document ("" without one):
    LoadGen's results for an inference run, and the whole sweep's charts for a sweep point's
    run. The run page already carries uPlot."""
    if not isinstance(doc, Mapping):
        return ""
    parts = ['<section id="section-bench"><h2>Benchmark</h2>']
    lg = doc.get("loadgen")
    if isinstance(lg, Mapping):
        lat = lg.get("latency_seconds") or {}
        res = doc.get("resources") or {}
        rows = [
            ("scenario", escape(f"{doc.get('scenario')} (MLCommons LoadGen)")),
            ("target", escape(doc.get("target"))),
            ("validity", escape(lg.get("validity"))),
            ("LoadGen QPS", escape(lg.get("qps"))),
            ("latency", escape(" · ".join(
                f"{k} {format_seconds(lat.get(k))}" for k in ("p50", "p90", "p99", "max")))),
            ("energy per query", escape(format_energy(res.get("energy_per_query_joules")))),
        ]  # fmt: skip
        parts.append(kv_table(rows))
    sweep = doc.get("sweep")
    if isinstance(sweep, Mapping):
        try:
            parts += _sweep_body(sweep_from_dict(sweep))
        except (KeyError, TypeError, ValueError):
            parts.append("<p>The sweep's document could not be read.</p>")
    parts.append("</section>")
    return "\n".join(parts)
