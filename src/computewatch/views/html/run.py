"""The HTML report of one run: a single self-contained file, readable with no network.

Everything the page needs is inside it: the vendored uPlot (``assets/``), our own script and
style, and the run's data as JSON. Tables are plain HTML, so they read (and print) without
JavaScript; the charts need it. Every value that comes from the run (its name, command, tags,
notes) is escaped: a run name is user input.
"""

from __future__ import annotations

import math
import os
import re
import statistics
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeGuard

from computewatch import jsonout
from computewatch._version import __version__
from computewatch.analysis.downsample import (
    MAX_BUCKETS,
    bucket_size,
    counter_rates,
    envelope,
    event_rate,
    grid_band,
    grid_times,
)
from computewatch.analysis.repro import with_repro
from computewatch.analysis.summary import build_summary, iso
from computewatch.analysis.summary_types import (
    AccountedSection,
    GpuStats,
    RunSummary,
    stored_summary,
)
from computewatch.goodput.json import report_json
from computewatch.goodput.local import local_goodput
from computewatch.profiling.artifacts import Artifact, artifacts_of
from computewatch.records import Figure
from computewatch.store import RUNNING, RunRow, SeriesRow, StepRow, Store
from computewatch.units import (
    MISSING,
    format_bytes,
    format_duration,
    format_energy,
    format_percent,
    format_seconds,
    format_watts,
)
from computewatch.views.diagnosis import diagnosis_html
from computewatch.views.goodput import goodput_html
from computewatch.views.html.bench import bench_section
from computewatch.views.html.page import (
    UPLOT_VERSION,
    ChartData,
    ChartSeries,
    ChartSpec,
    chart_figure,
    escape,
    grid_table,
    kv_table,
    notes_section,
    page_end,
    page_head,
    write_page,
)
from computewatch.views.html.steps import steps_section
from computewatch.views.repro import repro_lines
from computewatch.views.summary_rows import (
    Row,
    command_text,
    figure_text,
    format_value,
    range_text,
    run_rows,
    samples_row,
    usage_rows,
)

ACCOUNTING_SECTIONS = ("energy", "carbon", "cost", "flops", "forecast")
"""Summary sections shown as tables when present (filled in by the accounting readers)."""

_FIGURE_KEYS = frozenset({"value", "unit", "method", "assumptions", "low", "high", "source"})
_MAX_FINE_BUCKETS = 200_000  # throughput is counted in at most this many buckets first
_CHART_ORDER = (
    "cpu", "memory", "gpu_util", "gpu_sm", "gpu_memory", "gpu_power", "throughput_steps",
    "throughput_samples", "throughput_tokens", "step_time", "disk", "network",
)  # fmt: skip


def _goodput_section(store: Store, declared: object) -> str:
    """The goodput of the model the run declared, across its runs in this store (empty
    without a declared model; a note if it cannot be computed: the report is still written)."""
    model = declared.get("model") if isinstance(declared, dict) else None
    if not isinstance(model, str) or not model:
        return ""
    try:
        body = goodput_html(report_json(local_goodput(store, model=model)), "Across its runs")
    except Exception as e:  # a store that cannot be read further
        return f'<p class="warn">Goodput could not be computed: {escape(type(e).__name__)}</p>'
    return f'<section id="section-goodput"><h2>Goodput</h2>{body}</section>' if body else ""


def summary_of(store: Store, run: RunRow) -> RunSummary:
    """The summary stored when the run ended, else one computed now (a running run)."""
    if run.summary is not None and run.status != RUNNING:
        return stored_summary(run.summary)
    return build_summary(store, run)


# -- the data behind the charts ---------------------------------------------------------------


def _num(v: float | None) -> float | None:
    """Four significant digits are plenty on a chart, and keep the page small."""
    if v is None or not math.isfinite(v):
        return None
    return float(f"{v:.4g}")


def _nums(values: Sequence[float | None]) -> list[float | None]:
    return [_num(v) for v in values]


def _has_data(values: Sequence[float | None]) -> bool:
    return any(v is not None for v in values)


class _TickData:
    """A run's samples on its tick grid: positions, rates and envelopes per bucket."""

    def __init__(self, store: Store, run: RunRow, max_buckets: int) -> None:
        ticks = store.ticks(run.key)
        self.n = len(ticks)
        self.pos = {seq: i for i, (seq, _, _) in enumerate(ticks)}
        self.mono = [m for _, m, _ in ticks]
        self.wall = [w for _, _, w in ticks]
        self.k = bucket_size(self.n, max_buckets)
        self.x = [round(t, 3) for t in grid_times(self.wall, self.k)]
        self.series = store.series(run.key)
        self._points: dict[int, list[tuple[int, float]]] = {}
        self._store = store
        self._run_key = run.key

    def load(self, wanted: Iterable[SeriesRow]) -> None:
        """Read the samples of every series the charts need, in one pass."""
        idx = sorted({s.idx for s in wanted} - set(self._points))
        pos = self.pos
        # The sampler numbers ticks 0, 1, 2, ...: then a tick's seq is its grid position.
        seqs_are_positions = all(pos.get(i) == i for i in (0, self.n - 1))
        for sid, pts in self._store.points_of(self._run_key, idx).items():
            if seqs_are_positions and (not pts or 0 <= pts[0][0] <= pts[-1][0] < self.n):
                self._points[sid] = pts
            else:
                self._points[sid] = [(pos[seq], v) for seq, v in pts if seq in pos]

    def gauge(self, s: SeriesRow) -> list[tuple[int, float]]:
        return self._points.get(s.idx, [])

    def rate(self, s: SeriesRow) -> list[tuple[int, float]]:
        pts = self._points.get(s.idx, [])
        mono = self.mono
        rates = counter_rates([mono[p] for p, _ in pts], [v for _, v in pts])
        return [(p, r) for (p, _), r in zip(pts, rates, strict=True) if r is not None]

    def band(self, label: str, points: list[tuple[int, float]], scale: float = 1.0) -> ChartSeries:
        if scale != 1.0:
            points = [(p, v * scale) for p, v in points]
        b = grid_band(self.n, self.k, points)
        out: ChartSeries = {"label": label, "mean": _nums(b.mean)}
        if self.k > 1:
            out["lo"] = _nums(b.lo)
            out["hi"] = _nums(b.hi)
        return out


def _summed(lists: Iterable[list[tuple[int, float]]]) -> list[tuple[int, float]]:
    """Several series on one grid added up position by position (disks, interfaces)."""
    many = list(lists)
    if len(many) == 1:
        return many[0]
    acc: dict[int, float] = {}
    for pts in many:
        for p, v in pts:
            acc[p] = acc.get(p, 0.0) + v
    return sorted(acc.items())


def _gpu_labels(run: RunRow, summary: RunSummary) -> dict[str, tuple[str, bool]]:
    """GPU uuid → (chart label, simulated), for the GPUs the summary reports on."""
    devices = {d.get("uuid"): d for d in run.host.get("gpus") or [] if isinstance(d, dict)}
    out: dict[str, tuple[str, bool]] = {}
    for g in summary.get("gpus") or []:
        uuid = g.get("uuid")
        if not isinstance(uuid, str):
            continue
        d = devices.get(uuid, {})
        index = g.get("index", d.get("index"))
        kind = "TPU" if str(g.get("model") or "").startswith("TPU-") else "GPU"
        label = f"{kind} {index}" if index is not None else uuid[:16]
        if g.get("mig_parent_uuid") or d.get("mig_parent_uuid"):
            label += " (MIG)"
        out[uuid] = (label, bool(g.get("simulated") or d.get("simulated")))
    return out


def _tick_charts(
    store: Store, run: RunRow, summary: RunSummary, max_buckets: int
) -> tuple[list[float], list[ChartSpec]]:
    td = _TickData(store, run, max_buckets)
    if td.n == 0:
        return [], []
    by_name: dict[str, list[SeriesRow]] = {}
    for s in td.series:
        if s.name.startswith("host_network_") and s.labels.get("interface") == "lo":
            continue
        by_name.setdefault(s.name, []).append(s)
    gpus = _gpu_labels(run, summary)
    gpu_names = (
        "gpu_utilization_ratio",
        "gpu_sm_active_ratio",
        "gpu_memory_used_bytes",
        "gpu_power_watts",
        "tpu_hbm_bandwidth_utilization_ratio",
    )
    wanted = [
        s
        for name in (
            "tree_cpu_seconds_total",
            "tree_resident_memory_bytes",
            "host_memory_used_bytes",
            "host_disk_read_bytes_total",
            "host_disk_written_bytes_total",
            "tree_read_bytes_total",
            "tree_written_bytes_total",
            "host_network_receive_bytes_total",
            "host_network_transmit_bytes_total",
        )
        for s in by_name.get(name, [])[: None if name.startswith("host_") else 1]
    ]
    wanted += [s for n in gpu_names for s in by_name.get(n, []) if s.labels.get("gpu") in gpus]
    td.load(wanted)

    def first(name: str) -> SeriesRow | None:
        found = by_name.get(name)
        return found[0] if found else None

    def chart(cid: str, title: str, sub: str, unit: str, series: list[ChartSeries]) -> None:
        series = [s for s in series if _has_data(s["mean"])]
        if series:
            charts.append(
                ChartSpec(
                    id=cid,
                    title=title,
                    subtitle=sub,
                    unit=unit,
                    grid="ticks",
                    per_bucket=td.k,
                    series=series,
                )
            )

    charts: list[ChartSpec] = []
    allowed = float(run.host.get("allowed_cores") or run.host.get("logical_cpus") or 1.0)
    cpu = first("tree_cpu_seconds_total")
    if cpu is not None:
        chart(
            "cpu",
            "CPU utilization",
            f"the run's process tree, share of {allowed:g} allowed cores",
            "ratio",
            [td.band("process tree", td.rate(cpu), 1.0 / allowed)],
        )
    mem = []
    for name, label in (
        ("tree_resident_memory_bytes", "process tree RSS"),
        ("host_memory_used_bytes", "host used"),
    ):
        row = first(name)
        if row is not None:
            mem.append(td.band(label, td.gauge(row)))
    chart("memory", "Memory", "resident memory of the run; memory in use on the host", "bytes", mem)

    simulated = any(sim for _, sim in gpus.values())
    gpu_sub = " · simulated devices" if simulated else ""
    tpus = bool(gpus) and all(label.startswith("TPU") for label, _ in gpus.values())
    device_charts = (
        (  # a Google TPU chip's own readings (docs/tpu.md)
            ("gpu_util", "gpu_utilization_ratio", "TPU utilization", "TensorCore duty cycle",
             "ratio"),
            ("gpu_memory", "gpu_memory_used_bytes", "TPU memory", "HBM in use", "bytes"),
            ("tpu_hbm", "tpu_hbm_bandwidth_utilization_ratio", "TPU HBM bandwidth",
             "share of the chip's peak HBM bandwidth", "ratio"),
        )
        if tpus
        else (
            ("gpu_util", "gpu_utilization_ratio", "GPU utilization", "time a kernel ran", "ratio"),
            ("gpu_sm", "gpu_sm_active_ratio", "GPU SM active", "GPM SM activity", "ratio"),
            ("gpu_memory", "gpu_memory_used_bytes", "GPU memory", "used on the device", "bytes"),
            ("gpu_power", "gpu_power_watts", "GPU power", "board power draw", "watts"),
        )
    )  # fmt: skip
    for cid, name, title, sub, unit in device_charts:
        per_gpu: dict[str, list[list[tuple[int, float]]]] = {}
        for s in by_name.get(name, []):
            uuid = s.labels.get("gpu")
            if uuid in gpus:
                per_gpu.setdefault(uuid, []).append(td.gauge(s))
        chart(
            cid,
            title,
            sub + gpu_sub,
            unit,
            [td.band(gpus[u][0], _summed(lists)) for u, lists in per_gpu.items()],
        )

    disk = []
    for name, label in (
        ("host_disk_read_bytes_total", "host read"),
        ("host_disk_written_bytes_total", "host write"),
        ("tree_read_bytes_total", "run read"),
        ("tree_written_bytes_total", "run write"),
    ):
        found = by_name.get(name, [])[: None if name.startswith("host_") else 1]
        if found:
            disk.append(td.band(label, _summed(td.rate(s) for s in found)))
    chart(
        "disk",
        "Disk I/O",
        "host: every whole disk; run: storage-layer bytes of its processes",
        "bytes_per_second",
        disk,
    )
    net = []
    for name, label in (
        ("host_network_receive_bytes_total", "received"),
        ("host_network_transmit_bytes_total", "sent"),
    ):
        found = by_name.get(name, [])
        if found:
            net.append(td.band(label, _summed(td.rate(s) for s in found)))
    chart("network", "Network", "whole host, every interface but lo", "bytes_per_second", net)
    return td.x, charts


def _step_durations(steps: list[StepRow], starts: dict[int, float]) -> list[tuple[float, float]]:
    """(wall time, seconds since the same process's previous step), as ``summary.step_stats``
    times them: a process's first step from its ``track()`` start when known."""
    out: list[tuple[float, float]] = []
    prev_pid: int | None = None
    prev = math.nan
    for s in steps:  # ordered by pid, then time
        if s.pid != prev_pid:
            start = starts.get(s.pid)
            prev = start if start is not None and start <= s.mono else math.nan
            prev_pid = s.pid
        if not math.isnan(prev):
            out.append((s.wall, s.mono - prev))
        prev = s.mono
    out.sort()
    return out


def _step_charts(
    store: Store, run: RunRow, max_buckets: int
) -> tuple[dict[str, list[float]], list[ChartSpec]]:
    steps = store.steps(run.key)
    if not steps:
        return {}, []
    grids: dict[str, list[float]] = {}
    charts: list[ChartSpec] = []
    starts = {pid: t for pid, (t, _) in store.writers(run.key).items()}
    durations = _step_durations(steps, starts)
    procs = len({s.pid for s in steps})
    who = f"{procs} processes" if procs > 1 else "one process"
    if durations:
        env = envelope([t for t, _ in durations], [d for _, d in durations], max_buckets)
        grids["steps"] = [round(t, 3) for t in env.t]
        series: ChartSeries = {"label": "step time", "mean": _nums(env.mean)}
        if env.per_bucket > 1:
            series["lo"], series["hi"] = _nums(env.lo), _nums(env.hi)
        charts.append(
            ChartSpec(
                id="step_time",
                title="Step time",
                subtitle=f"time between consecutive steps of {who}",
                unit="seconds",
                grid="steps",
                per_bucket=env.per_bucket,
                series=[series],
            )
        )
    walls = sorted(s.wall for s in steps)
    span = walls[-1] - walls[0]
    if span > 0 and len(walls) > 1:
        typical = statistics.median(d for _, d in durations) if durations else 0.0
        width = max(run.interval_seconds, 5 * typical, span / _MAX_FINE_BUCKETS)
        count = max(1, round(span / width))
        width = span / count  # whole buckets from the first step to the last: none partial
        starts_at = [walls[0] + i * width for i in range(count)]
        by_wall = sorted(steps, key=lambda s: s.wall)
        wall_times = [s.wall for s in by_wall]
        rate_series: list[tuple[str, str, list[float]]] = [
            ("steps", "steps per second", event_rate(wall_times, None, walls[0], width, count))
        ]
        for attr in ("samples", "tokens"):
            weights = [getattr(s, attr) for s in by_wall]
            if any(w is not None for w in weights):
                w = [float(x) if x is not None else 0.0 for x in weights]
                rate_series.append(
                    (attr, f"{attr} per second", event_rate(wall_times, w, walls[0], width, count))
                )
        k = bucket_size(count, max_buckets)
        grids["throughput"] = [round(t, 3) for t in grid_times(starts_at, k)]
        for key, label, rates in rate_series:
            env = envelope(starts_at, rates, max_buckets)
            s_json: ChartSeries = {"label": label, "mean": _nums(env.mean)}
            if env.per_bucket > 1:
                s_json["lo"], s_json["hi"] = _nums(env.lo), _nums(env.hi)
            title = "Throughput" if key == "steps" else f"Throughput: {key}"
            charts.append(
                ChartSpec(
                    id=f"throughput_{key}",
                    title=title,
                    subtitle=f"{key} per second of {who}, counted in {width:.3g} s buckets",
                    unit="per_second",
                    grid="throughput",
                    per_bucket=k,
                    series=[s_json],
                )
            )
    return grids, charts


def chart_data(
    store: Store, run: RunRow, summary: RunSummary, *, max_buckets: int = MAX_BUCKETS
) -> ChartData:
    """The charts' data: shared x grids (wall-clock seconds) and, per chart, each series'
    bucket means with min/max envelopes when the series was downsampled."""
    if run.samples_deleted_at is not None:
        return {"grids": {}, "charts": []}
    x, tick_charts = _tick_charts(store, run, summary, max_buckets)
    grids, step_charts = _step_charts(store, run, max_buckets)
    if tick_charts:
        grids["ticks"] = x
    charts = sorted(
        tick_charts + step_charts,
        key=lambda c: _CHART_ORDER.index(c["id"]) if c["id"] in _CHART_ORDER else len(_CHART_ORDER),
    )
    return {"grids": grids, "charts": charts}


# -- formatting ---------------------------------------------------------------------------------


def _plain(v: object) -> str:
    """Any JSON value as short text (already escaped)."""
    if v is None:
        return f'<span class="na">{MISSING}</span>'
    if isinstance(v, bool | int | float):
        return escape(format_value(v))
    if isinstance(v, str):
        return escape(v)
    if isinstance(v, list) and all(isinstance(x, str) for x in v) and len(v) > 1:
        return "<ul>" + "".join(f"<li>{escape(x)}</li>" for x in v) + "</ul>"
    if isinstance(v, list) and all(isinstance(x, str | int | float) for x in v):
        return escape(", ".join(format_value(x) for x in v))
    return f"<code>{escape(jsonout.dumps(v, sort_keys=True))}</code>"


def row_html(row: Row) -> str:
    """A summary row's value as HTML: escaped, a missing one greyed, a command as code, tags
    as chips."""
    if row.missing:
        return f'<span class="na">{escape(row.text)}</span>'
    if row.kind == "code":
        return f"<code>{escape(row.text)}</code>"
    if row.kind == "tags":
        return " ".join(f'<span class="tag">{escape(t)}</span>' for t in row.items)
    return escape(row.text)


# -- the page's sections ------------------------------------------------------------------------


def _cards(s: RunSummary) -> str:
    cards: list[tuple[str, str, str]] = []
    status = str(s.get("status"))
    if s.get("exit_code") not in (None, 0):
        status += f" (exit {s['exit_code']})"
    cards.append(("status", status, s.get("started_at") or ""))
    cards.append(("duration", format_duration(s.get("duration_seconds")), ""))
    cpu = s["cpu"]
    cards.append(
        (
            "CPU mean",
            format_percent(cpu.get("utilization_mean")),
            f"max {format_percent(cpu.get('utilization_max'))} "
            f"of {format_value(cpu.get('allowed_cores'))} cores",
        )
    )
    mem = s["memory"]
    cards.append(
        (
            "peak RSS",
            format_bytes(mem.get("peak_rss_bytes")),
            f"host peak {format_bytes(mem.get('peak_host_used_bytes'))} of "
            f"{format_bytes(mem.get('host_total_bytes'))}",
        )
    )
    gpus = [g for g in s.get("gpus") or [] if isinstance(g, dict)]
    if gpus:
        utils = [u for g in gpus if (u := g.get("utilization_mean")) is not None]
        joules = [j for g in gpus if (j := g.get("energy_joules")) is not None]
        sim = " (simulated)" if any(g.get("simulated") for g in gpus) else ""
        # a Google TPU chip is a TPU (docs/tpu.md)
        tpu = all(str(g.get("model") or "").startswith("TPU-") for g in gpus)
        kind = "TPU" if tpu else "GPU"
        cards.append(
            (
                f"{kind} util{sim}",
                format_percent(sum(utils) / len(utils) if utils else None),
                f"mean over {len(gpus)} {kind}{'s' if len(gpus) > 1 else ''}",
            )
        )
        if joules:
            cards.append((f"{kind} energy", format_energy(sum(joules)), f"{len(joules)} {kind}(s)"))
    steps = s.get("steps") or {}
    if steps.get("count"):
        rate = steps.get("steps_per_second")
        cards.append(
            (
                "steps",
                format_value(steps["count"]),
                f"{format_value(rate)} steps/s" if rate is not None else "",
            )
        )
    for section, which, head in _headlines(s):
        if head.get("value") is not None:
            sub = ", ".join(str(x) for x in (which, head.get("method")) if x)
            cards.append((section, figure_text(head), sub))
    return cards_section(cards)


def cards_section(cards: Iterable[tuple[str, str, str]]) -> str:
    """The row of key-figure cards: each a label, a value (its unit set smaller) and a note."""
    return (
        '<section class="cards" aria-label="key figures">'
        + "".join(
            f'<div class="card"><div class="label">{escape(k)}</div>'
            f'<div class="value" title="{escape(v)}">{card_value(v)}</div>'
            f'<div class="sub">{escape(sub)}</div></div>'
            for k, v, sub in cards
        )
        + "</section>"
    )


_NUMBER_AND_UNIT = re.compile(r"([-+]?[\d.,]+(?:e[-+]?\d+)?) (\S+(?: CO2e)?)")


def card_value(text: str) -> str:
    """``0.0008282 kWh`` (or ``0.00669 g CO2e``) with the unit set smaller and kept whole, so
    long numbers fit their card; the card may wrap the unit below the number, never cut it."""
    m = _NUMBER_AND_UNIT.fullmatch(text)
    if m is None:
        return escape(text)
    return f'{escape(m[1])} <span class="unit">{escape(m[2])}</span>'


def _run_table(s: RunSummary, run: RunRow) -> str:
    by = {r.label: row_html(r) for r in run_rows(s)}
    rows = [
        ("id", f"<code>{escape(s.get('id'))}</code>"),
        ("name", _plain(s.get("name"))),
        ("tags", by["tags"]),
        ("command", by["command"]),
        ("working directory", _plain(s.get("cwd"))),
        ("mode", escape(run.mode)),
        ("status", by["status"]),
        ("started", by["started"]),
        ("ended", _plain(s.get("ended_at"))),
        ("duration", by["duration"]),
        ("data until", _plain(s["samples"].get("data_until"))),
        ("samples", row_html(samples_row(s))),
    ]
    if run.samples_deleted_at is not None:
        rows.append(
            (
                "samples deleted",
                escape(f"{iso(run.samples_deleted_at)} by gc: summary only, no charts"),
            )
        )
    return kv_table(rows)


_HOST_ORDER = (
    "hostname", "cpu_model", "logical_cpus", "allowed_cpus", "allowed_cores", "memory_bytes",
    "os", "python", "cgroup_path", "cgroup_cpu_limit_cores", "cgroup_memory_max_bytes",
    "gpu_backend", "gpus_used", "cpu_energy",
)  # fmt: skip


def _host_table(host: Mapping[str, object]) -> str:
    keys = [k for k in _HOST_ORDER if k in host]
    keys += sorted(k for k in host if k not in _HOST_ORDER and k not in ("gpus", "gpu_all"))
    rows = []
    for k in keys:
        v = host[k]
        if k.endswith("_bytes") and isinstance(v, int | float):
            text = escape(format_bytes(v))
        elif isinstance(v, list) and k == "allowed_cpus":
            text = escape(_cpu_list(v))
        else:
            text = _plain(v)
        rows.append((k.replace("_", " "), text))
    return kv_table(rows)


def _cpu_list(cpus: list[Any]) -> str:
    """[0, 1, 2, 5] → 0-2,5"""
    nums = sorted(int(c) for c in cpus if isinstance(c, int))
    parts: list[str] = []
    i = 0
    while i < len(nums):
        j = i
        while j + 1 < len(nums) and nums[j + 1] == nums[j] + 1:
            j += 1
        parts.append(str(nums[i]) if i == j else f"{nums[i]}-{nums[j]}")
        i = j + 1
    return ",".join(parts) or str(cpus)


def _usage_table(s: RunSummary) -> str:
    return kv_table((r.label, row_html(r)) for r in usage_rows(s))


def _gpu_table(gpus: list[GpuStats]) -> str:
    head = (
        "#", "GPU", "scope", "utilization", "SM active", "tensor active", "memory peak",
        "run's memory peak", "power mean", "energy", "throttled",
    )  # fmt: skip
    body: list[list[str]] = []
    for g in gpus:
        name = escape(g.get("name") or MISSING)
        if g.get("simulated"):
            name += ' <span class="badge">simulated</span>'
        if g.get("mig_parent_uuid"):
            name += f" <small>MIG of {escape(str(g['mig_parent_uuid'])[:16])}</small>"
        name += f'<br><small class="uuid">{escape(g.get("uuid") or "")}</small>'
        mem = format_bytes(g.get("memory_peak_bytes"))
        if g.get("memory_total_bytes") is not None:
            mem += f" of {format_bytes(g['memory_total_bytes'])}"
        power = g.get("power_mean_watts")
        energy = format_energy(g.get("energy_joules"))
        if g.get("energy_method"):
            energy += f" ({g['energy_method']})"
        throttled = {k: v for k, v in (g.get("throttle_seconds") or {}).items() if v}
        cells = [
            escape(format_value(g.get("index"))),
            name,
            escape(g.get("scope") or ""),
            escape(format_percent(g.get("utilization_mean"))),
            escape(format_percent(g.get("sm_active_mean"))),
            escape(format_percent(g.get("tensor_active_mean"))),
            escape(mem),
            escape(format_bytes(g.get("process_memory_peak_bytes"))),
            escape(format_watts(power if isinstance(power, int | float) else None)),
            escape(energy),
            escape(", ".join(f"{k} {format_seconds(v)}" for k, v in throttled.items()) or "no"),
        ]
        body.append(cells)
    return grid_table(head, body)


# -- accounting sections: written for any shape ----------------------------------------------


def _accounting(s: RunSummary) -> list[tuple[str, AccountedSection]]:
    """The accounting sections the summary has, in the order of ACCOUNTING_SECTIONS."""
    found: list[tuple[str, AccountedSection | None]] = [
        ("energy", s.get("energy")),
        ("carbon", s.get("carbon")),
        ("cost", s.get("cost")),
        ("flops", s.get("flops")),
        ("forecast", s.get("forecast")),
    ]
    return [(name, section) for name, section in found if section is not None]


def _headlines(s: RunSummary) -> list[tuple[str, str, Mapping[str, object]]]:
    """The figure that sums up each accounting section the summary has, with where it is in
    the section: the facility energy, the total carbon and cost, the FLOPs themselves (the
    forecast has none). A stored summary of another shape gives no card rather than a wrong one."""
    found: list[tuple[str, str, object]] = []
    if (energy := s.get("energy")) is not None:
        found.append(("energy", "facility", energy.get("facility")))
    if (carbon := s.get("carbon")) is not None:
        found.append(("carbon", "total", carbon.get("total")))
    if (cost := s.get("cost")) is not None:
        found.append(("cost", "total", cost.get("total")))
    if (flops := s.get("flops")) is not None:
        found.append(("flops", "", flops))
    return [(name, where, f) for name, where, f in found if _is_figure(f)]


def _is_figure(v: object) -> TypeGuard[Mapping[str, object]]:
    """A figure with its provenance: ``{value, unit, method, assumptions, low, high, source}``,
    a number (or null) ``value`` and at least one of the others; other keys may ride along."""
    return (
        isinstance(v, dict)
        and "value" in v
        and (v["value"] is None or isinstance(v["value"], int | float))
        and len(set(v) & _FIGURE_KEYS) > 1
    )


def _flatten(
    prefix: str,
    v: object,
    figures: list[tuple[str, Mapping[str, object]]],
    other: list[tuple[str, object]],
) -> None:
    if _is_figure(v):
        figures.append((prefix, {k: x for k, x in v.items() if k in _FIGURE_KEYS}))
        for k, sub in v.items():  # what rides along: devices, thresholds, ...
            if k not in _FIGURE_KEYS:
                _flatten(f"{prefix}.{k}" if prefix else str(k), sub, figures, other)
    elif isinstance(v, dict) and v:
        for k, sub in v.items():
            _flatten(f"{prefix}.{k}" if prefix else str(k), sub, figures, other)
    elif isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
        for i, sub in enumerate(v):
            _flatten(f"{prefix}[{i}]", sub, figures, other)
    else:
        other.append((prefix or "value", v))


def _assumptions(v: object) -> str:
    if v is None:
        return ""
    if isinstance(v, list):
        return "<ul>" + "".join(f"<li>{_plain(x)}</li>" for x in v) + "</ul>"
    if isinstance(v, dict):
        return (
            "<ul>" + "".join(f"<li>{escape(k)}: {_plain(x)}</li>" for k, x in v.items()) + "</ul>"
        )
    return _plain(v)


def accounting_section(name: str, data: AccountedSection | Mapping[str, Figure]) -> str:
    """One accounting section (energy, carbon, cost, flops, forecast) as tables: figures with
    value and unit, method, low–high range and assumptions; anything else as key/value rows.
    Walks the section's JSON, so a stored section with keys added since renders too."""
    figures: list[tuple[str, Mapping[str, object]]] = []
    other: list[tuple[str, object]] = []
    _flatten("", data, figures, other)
    out = [
        f'<section class="accounting" id="section-{escape(name)}">'
        f"<h2>{escape(name.capitalize())}</h2>"
    ]
    if figures:
        rows = []
        for label, f in figures:
            has_range = f.get("low") is not None or f.get("high") is not None
            rng = range_text(f) if has_range else ""
            notes = _assumptions(f.get("assumptions"))
            extra = f.get("note") or f.get("notes")
            if extra:
                notes += _assumptions(extra)
            source = _plain(f.get("source")) if f.get("source") is not None else ""
            rows.append(
                "<tr>"
                f"<th scope=row>{escape(label or name)}</th>"
                f'<td class="num">{escape(figure_text(f))}</td>'
                f"<td>{_plain(f.get('method')) if f.get('method') is not None else ''}</td>"
                f'<td class="num">{escape(rng)}</td>'
                f"<td>{notes}</td>"
                f"<td>{source}</td>"
                "</tr>"
            )
        out.append(
            '<div class="scroll"><table class="grid"><thead><tr><th scope=col>quantity</th>'
            "<th scope=col>value</th><th scope=col>method</th><th scope=col>range (low–high)</th>"
            "<th scope=col>assumptions</th><th scope=col>source</th></tr></thead><tbody>"
            + "".join(rows)
            + "</tbody></table></div>"
        )
    if other:
        out.append(
            kv_table(
                (_KNOWN_LABELS.get(k, k), _device_hours(v) if k in _KNOWN_LABELS else _plain(v))
                for k, v in other
                if not (k in _KNOWN_LABELS and not v)  # no TPU-hours row for a GPU run
            )
        )
    out.append("</section>")
    return "".join(out)


_KNOWN_LABELS = {"device_hours.gpu_hours": "GPU-hours", "device_hours.tpu_hours": "TPU-hours"}
"""Rows of the energy section shown under the name a reader knows (the JSON keys stay)."""


def _device_hours(v: object) -> str:
    return escape(f"{v:.4g} h") if isinstance(v, int | float) else _plain(v)


# -- the page ---------------------------------------------------------------------------------


def build_html(store: Store, run: RunRow, *, max_buckets: int = MAX_BUCKETS) -> str:
    """The whole report page of ``run`` as one string."""
    summary = summary_of(store, run)
    data = chart_data(store, run, summary, max_buckets=max_buckets)
    data["run"] = {"id": run.id, "name": run.name, "started_at": run.started_at}
    title = f"computewatch · run {run.id}" + (f" · {run.name}" if run.name else "")
    generated = iso(time.time())
    parts = [
        page_head(title),
        "<header>",
        f'<p class="eyebrow">computewatch report · run <code>{escape(run.id)}</code></p>',
        f"<h1>{escape(run.name or 'run ' + run.id)}</h1>",
        f'<p class="command"><code>{escape(command_text(summary))}</code></p>',
        "</header><main>",
        _cards(summary),
    ]
    parts.append(notes_section(summary.get("notes") or []))
    charts = data["charts"]
    if charts:
        parts.append('<section id="section-charts"><h2>Over time</h2>')
        parts.append(
            '<p class="hint">Drag across a chart to zoom (all charts follow); double-click to '
            "zoom out. Lines are bucket means; a shaded band spans each bucket's minimum and "
            "maximum where the series was downsampled. Times are in your local time zone.</p>"
        )
        parts.append(
            '<noscript><p class="warn">The charts need JavaScript; the tables below do '
            "not.</p></noscript>"
        )
        parts.append('<div class="charts">')
        for c in charts:
            per = c["per_bucket"]
            detail = f"{per} points per bucket" if per > 1 else "every point"
            parts.append(chart_figure(c["id"], c["title"], f"{c['subtitle']} · {detail}"))
        parts.append("</div></section>")
    elif run.samples_deleted_at is not None:
        parts.append(
            '<p class="warn">This run\'s samples were deleted by <code>computewatch gc</code>; '
            "only its summary remains, so there are no charts.</p>"
        )
    parts += [
        '<section id="section-run"><h2>Run</h2>',
        _run_table(summary, run),
        "</section>",
        '<section id="section-usage"><h2>What it used</h2>',
        _usage_table(summary),
        "</section>",
    ]
    gpus = [g for g in summary.get("gpus") or [] if isinstance(g, dict)]
    if gpus:
        parts += ['<section id="section-gpus"><h2>GPUs</h2>', _gpu_table(gpus), "</section>"]
    parts.append(steps_section(store, run, summary, data, max_buckets))  # phases, ranks
    for name, section in _accounting(summary):
        parts.append(accounting_section(name, section))
    parts.append(diagnosis_html(summary))  # findings, when the run was diagnosed
    meta = store.meta(run.key)
    parts.append(_goodput_section(store, meta.get("governance")))  # its model's runs
    parts.append(bench_section(meta.get("bench")))  # a benchmark's results, a sweep's charts
    repro = repro_lines(with_repro(summary, meta))  # views/repro.py
    if repro:
        rows = ((k, escape(v)) for k, v in repro)
        parts += [
            '<section id="section-repro"><h2>Reproducibility</h2>',
            kv_table(rows),
            "</section>",
        ]
    parts.append(_profiles_section(artifacts_of(store, run.key)))  # profiles and traces
    parts += [
        '<section id="section-host"><h2>Host</h2>',
        _host_table(dict(summary.get("host") or run.host)),
        "</section>",
        "</main><footer>",
        f"<p>Made by computewatch {escape(__version__)} at {escape(generated)} from "
        f"<code>{escape(store.path.name)}</code>. Charts drawn with uPlot {UPLOT_VERSION} "
        "(MIT licence, © Leon Sorokin), included in this file.</p>",
        "</footer>",
        page_end(data),
    ]
    return "\n".join(parts) + "\n"


def _profiles_section(artifacts: list[Artifact]) -> str:
    """The run's profiles and traces (py-spy, the PyTorch Profiler, cProfile, Nsight Systems),
    each file linked by its path; empty without any."""
    if not artifacts:
        return ""
    rows = []
    for a in artifacts:
        files = "<br>".join(
            f'{escape(kind)}: <a href="{escape(Path(p).as_uri())}">{escape(p)}</a>'
            for kind, p in sorted(a["files"].items())
            if Path(p).is_absolute()
        )
        what = f"{a['tool']} ({a['trigger']})"
        note = a.get("note") or ""
        rows.append(f"<tr><td>{escape(what)}</td><td>{escape(note)}</td><td>{files}</td></tr>")
    return (
        '<section id="section-profiles"><h2>Profiles and traces</h2><table>'
        "<tr><th>profiler</th><th>note</th><th>files</th></tr>" + "".join(rows) + "</table>"
        "</section>"
    )


def default_filename(run: RunRow) -> str:
    return f"computewatch-{run.id}.html"


def write_report(
    store: Store,
    run: RunRow,
    path: str | os.PathLike[str],
    *,
    max_buckets: int = MAX_BUCKETS,
) -> Path:
    """Build the page, then write it to ``path`` (a failed write leaves no half page behind).
    Raises ``OSError`` when it cannot be written."""
    return write_page(build_html(store, run, max_buckets=max_buckets), path)
