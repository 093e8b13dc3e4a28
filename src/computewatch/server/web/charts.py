"""Chart data for the dashboard from the series runs uploaded (downsampled ``[t, min, mean,
max]`` buckets, :class:`computewatch.upload.protocol.SeriesUpload`), drawn by ``dashboard.js``
with uPlot: a run's charts (one per series name, a line per label set, the min-max band of each
bucket shaded) and the overlaid charts of a comparison (one line per run, on the time elapsed
since each run started)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NotRequired, TypedDict

__all__ = [
    "COMPARED",
    "ChartLine",
    "ChartSpec",
    "SeriesData",
    "compare_charts",
    "run_charts",
    "title_of",
    "unit_of",
    "unit_text",
]

MAX_CHARTS = 16
MAX_LINES = 8

_FIRST = (
    "gpu_utilization_ratio", "gpu_sm_active_ratio", "gpu_tensor_active_ratio", "gpu_power_watts",
    "gpu_memory_used_bytes", "tree_cpu_seconds_total", "tree_resident_memory_bytes",
    "host_memory_used_bytes", "gpu_temperature_celsius",
)  # fmt: skip
"""Series shown first on a run's page, in this order; the others follow by name."""

COMPARED = (
    "gpu_utilization_ratio", "gpu_power_watts", "gpu_memory_used_bytes",
    "tree_cpu_seconds_total", "tree_resident_memory_bytes",
)  # fmt: skip
"""Series a comparison overlays (each run's devices added up, ratios averaged)."""

_TITLES = {
    "gpu_utilization_ratio": "GPU utilization",
    "gpu_sm_active_ratio": "GPU SM active",
    "gpu_tensor_active_ratio": "GPU tensor active",
    "gpu_power_watts": "GPU power",
    "gpu_memory_used_bytes": "GPU memory",
    "tree_cpu_seconds_total": "CPU (process tree)",
    "tree_resident_memory_bytes": "Memory (process tree RSS)",
    "host_memory_used_bytes": "Host memory used",
    "gpu_temperature_celsius": "GPU temperature",
    "host_cpu_seconds_total": "CPU (host)",
    "host_disk_read_bytes_total": "Disk read (host)",
    "host_disk_written_bytes_total": "Disk written (host)",
    "host_disk_reads_total": "Disk reads (host)",
    "host_disk_writes_total": "Disk writes (host)",
    "host_network_receive_bytes_total": "Network received (host)",
    "host_network_transmit_bytes_total": "Network sent (host)",
    "tree_read_bytes_total": "Read (process tree)",
    "tree_written_bytes_total": "Written (process tree)",
    "gpu_energy_joules_total": "GPU power (from its energy counter)",
    "cpu_energy_joules_total": "CPU power (from its energy counter)",
    "tree_processes": "Processes (process tree)",
}
"""Human titles of the usual series; the others get one made from their name (:func:`title_of`)."""

_SUFFIXES = (
    "_bytes_per_second", "_bytes_total", "_joules_total", "_seconds_total", "_total", "_bytes",
    "_watts", "_celsius", "_ratio", "_seconds", "_hertz",
)  # fmt: skip
_WORDS = {
    "gpu": "GPU", "cpu": "CPU", "sm": "SM", "dram": "DRAM", "pcie": "PCIe", "nvlink": "NVLink",
    "ecc": "ECC", "xid": "Xid", "tree": "process tree", "io": "I/O", "rss": "RSS",
}  # fmt: skip

_UNIT_TEXT = {
    "ratio": "%",
    "bytes": "bytes",
    "bytes_per_second": "bytes/s",
    "watts": "W",
    "joules": "J",
    "seconds": "s",
    "celsius": "°C",
    "cores": "CPU cores busy",
    "hertz": "Hz",
}


class ChartLine(TypedDict):
    label: str
    mean: list[float | None]
    lo: NotRequired[list[float | None]]
    hi: NotRequired[list[float | None]]


class ChartSpec(TypedDict):
    """One chart as ``dashboard.js`` draws it: ``x`` are Unix seconds when ``time``, else
    seconds since the run started."""

    id: str
    title: str
    unit: str
    """How ``dashboard.js`` formats values: ``ratio``, ``bytes``, ``watts``, ``cores``..."""
    unit_text: str
    """The unit as the chart's caption shows it: ``%``, ``W``, ``bytes/s``, ``reads/s``."""
    time: bool
    x: list[float]
    series: list[ChartLine]


@dataclass(frozen=True, slots=True)
class SeriesData:
    """One uploaded series as stored (merged from ``run_series_parts``)."""

    name: str
    labels: Mapping[str, str]
    bucket_seconds: float
    points: Sequence[Sequence[float]]


def unit_of(name: str) -> str:
    """The chart unit of a series from its name's suffix (Prometheus naming, base units).
    Counters (``_total``) were uploaded as per-second rates."""
    if name.endswith("_ratio"):
        return "ratio"
    if name.endswith("_bytes_total"):
        return "bytes_per_second"
    if name.endswith("_joules_total"):
        return "watts"
    if name.endswith("_seconds_total"):
        return "cores"  # CPU seconds per second: cores busy
    if name.endswith("_total"):
        return "per_second"
    if name.endswith("_bytes_per_second"):
        return "bytes_per_second"
    for suffix, unit in (
        ("_bytes", "bytes"), ("_watts", "watts"), ("_celsius", "celsius"), ("_hertz", "hertz"),
    ):  # fmt: skip
        if name.endswith(suffix):
            return unit
    if name.endswith("_seconds"):
        return "seconds"
    return ""


def unit_text(name: str) -> str:
    """The unit a chart of series ``name`` shows beside its title: ``%``, ``W``, ``bytes/s``;
    a counter of things, its things per second (``host_disk_reads_total``: ``reads/s``); a
    count, what it counts (``tree_processes``: ``processes``)."""
    unit = unit_of(name)
    thing = name.removesuffix("_total").rsplit("_", 1)[-1]
    if unit == "per_second":
        return f"{thing}/s"
    return _UNIT_TEXT.get(unit, thing)  # a count: what it counts (``tree_processes``)


def title_of(name: str) -> str:
    """A human title for series ``name``: the usual ones by hand (``GPU power``), the others
    from the name without its unit (``host_nvme_queue_depth`` → ``Host nvme queue depth``)."""
    if name in _TITLES:
        return _TITLES[name]
    stem = name
    for suffix in _SUFFIXES:
        if stem.endswith(suffix) and len(stem) > len(suffix):
            stem = stem.removesuffix(suffix)
            break
    words = [_WORDS.get(w, w) for w in stem.split("_") if w]
    text = " ".join(words) or name
    return text[:1].upper() + text[1:]


def _num(v: float | None) -> float | None:
    if v is None or not math.isfinite(v):
        return None
    return float(f"{v:.4g}")


def _point(p: Sequence[float]) -> bool:
    """A bucket ``[t, min, mean, max]`` with a time one can draw."""
    return len(p) == 4 and math.isfinite(p[0]) and abs(p[0]) < 1e12


def _label(name: str, labels: Mapping[str, str]) -> str:
    if not labels:
        return title_of(name)
    if "gpu" in labels:
        gpu = labels["gpu"]
        return gpu if len(gpu) <= 16 else gpu[:16] + "…"
    return ", ".join(f"{k}={v}" for k, v in sorted(labels.items()))[:60]


def _aligned(
    lines: Sequence[tuple[str, Sequence[Sequence[float]]]], offset: float, bands: bool
) -> tuple[list[float], list[ChartLine]]:
    """Several series on the union of their bucket times (None where a series has no bucket)."""
    xs = sorted({round(p[0] - offset, 3) for _, pts in lines for p in pts if _point(p)})
    pos = {x: i for i, x in enumerate(xs)}
    out: list[ChartLine] = []
    for label, pts in lines:
        mean: list[float | None] = [None] * len(xs)
        lo: list[float | None] = [None] * len(xs)
        hi: list[float | None] = [None] * len(xs)
        banded = False
        for p in pts:
            if not _point(p):
                continue
            i = pos[round(p[0] - offset, 3)]
            lo[i], mean[i], hi[i] = _num(p[1]), _num(p[2]), _num(p[3])
            banded = banded or p[1] != p[3]
        line: ChartLine = {"label": label, "mean": mean}
        if bands and banded:
            line["lo"] = lo
            line["hi"] = hi
        out.append(line)
    return xs, out


def _order(names: Iterable[str]) -> list[str]:
    first = [n for n in _FIRST if n in names]
    return first + sorted(n for n in names if n not in _FIRST)


def run_charts(series: Iterable[SeriesData], *, max_charts: int = MAX_CHARTS) -> list[ChartSpec]:
    """A run's charts: one per series name (the usual ones first), a line per label set."""
    by_name: dict[str, list[SeriesData]] = {}
    for s in series:
        if s.points:
            by_name.setdefault(s.name, []).append(s)
    out: list[ChartSpec] = []
    for i, name in enumerate(_order(by_name)[:max_charts]):
        group = sorted(by_name[name], key=lambda s: sorted(s.labels.items()))[:MAX_LINES]
        x, lines = _aligned([(_label(name, s.labels), s.points) for s in group], 0.0, True)
        out.append(
            {"id": f"s{i}", "title": title_of(name), "unit": unit_of(name),
             "unit_text": unit_text(name), "time": True, "x": x, "series": lines}
        )  # fmt: skip
    return out


def _combined(name: str, group: Sequence[SeriesData]) -> list[list[float]]:
    """A run's series of one name as one line: devices added up (ratios averaged) per bucket."""
    acc: dict[float, list[float]] = {}
    for s in group:
        for p in s.points:
            if _point(p) and math.isfinite(p[2]):
                acc.setdefault(p[0], []).append(p[2])
    average = name.endswith("_ratio")
    out = []
    for t in sorted(acc):
        vals = acc[t]
        v = sum(vals) / len(vals) if average else sum(vals)
        out.append([t, v, v, v])
    return out


def compare_charts(
    runs: Sequence[tuple[str, float, Iterable[SeriesData]]],
) -> list[ChartSpec]:
    """Overlaid charts of ``runs`` (label, start time, series): for each of :data:`COMPARED`
    that any run has, one line per run on the time since it started."""
    per_run: list[tuple[str, float, dict[str, list[SeriesData]]]] = []
    for label, started, series in runs:
        by_name: dict[str, list[SeriesData]] = {}
        for s in series:
            by_name.setdefault(s.name, []).append(s)
        per_run.append((label, started, by_name))
    out: list[ChartSpec] = []
    for name in COMPARED:
        lines: list[tuple[str, Sequence[Sequence[float]]]] = []
        starts: list[float] = []
        for label, started, by_name in per_run:
            if by_name.get(name):
                lines.append((label, _combined(name, by_name[name])))
                starts.append(started)
        if not lines:
            continue
        shifted = [
            (label, [[p[0] - st, p[1], p[2], p[3]] for p in pts])
            for (label, pts), st in zip(lines, starts, strict=True)
        ]
        x, overlaid = _aligned(shifted, 0.0, False)
        out.append(
            {"id": f"c{len(out)}", "title": title_of(name), "unit": unit_of(name),
             "unit_text": unit_text(name), "time": False, "x": x, "series": overlaid}
        )  # fmt: skip
    return out
