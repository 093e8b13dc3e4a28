"""Idle allocation: GPUs holding the run's memory while doing no work, for long stretches."""

from __future__ import annotations

import itertools
from typing import Any

from computewatch.config.thresholds import Thresholds
from computewatch.diagnosis.findings import Evidence, Finding, Saving, TimeRange
from computewatch.diagnosis.loader import NotApplicable, RunData, stretches
from computewatch.diagnosis.rules import build
from computewatch.diagnosis.rules.accelerator import gpu_label
from computewatch.units import format_bytes, format_seconds


def _usd_per_gpu_second(data: RunData, n_gpus: int) -> float | None:
    """The price of one GPU for one second: the compute cost (else the total) over the run's
    GPUs and duration."""
    cost = data.summary.get("cost")
    if not isinstance(cost, dict) or data.duration <= 0 or n_gpus <= 0:
        return None
    for key in ("compute", "total"):
        part = cost.get(key)
        usd = part.get("value") if isinstance(part, dict) else None
        if isinstance(usd, int | float):
            return float(usd) / (n_gpus * data.duration)
    return None


def idle_allocation(data: RunData, th: Thresholds) -> list[Finding]:
    """Fires for stretches of at least ``idle_min_seconds`` in which a GPU held memory of the
    run's processes while its utilization stayed at or below ``idle_utilization``."""
    gpus = data.used_gpus()
    lines: list[str] = []
    ranges: list[TimeRange] = []
    numbers: dict[str, float | int | str | None] = {}
    gpu_seconds = 0.0
    edges = 0.0  # GPU-seconds: a tick interval per idle stretch
    read_any = False
    for g in gpus:
        held, whose = _held(data, g)
        util = {t: u for s in data.of("gpu_utilization_ratio", gpu=g["uuid"]) for t, u in s.points}
        if not util or not held:
            continue
        read_any = True
        times = sorted(util)
        flags = [
            (t0, t1, held.get(t1, 0.0) > 0 and util[t1] <= th.idle_utilization)
            for t0, t1 in itertools.pairwise(times)
        ]
        spans = stretches(flags, min_seconds=th.idle_min_seconds)
        if not spans:
            continue
        idle = sum(b - a for a, b in spans)
        gpu_seconds += idle
        # Each stretch's ends lie inside the tick intervals around it (partly busy, so not
        # counted): on average half an interval at each end, at most a whole one.
        tick = sorted(b - a for a, b in itertools.pairwise(times))[(len(times) - 1) // 2]
        edges += len(spans) * tick
        mem = max(held.get(t, 0.0) for t in times if any(a <= t <= b for a, b in spans))
        lines.append(
            f"{gpu_label(g)}: idle for {format_seconds(idle)} in {len(spans)} stretch(es) of "
            "at least "
            f"{format_seconds(th.idle_min_seconds)}, holding up to {format_bytes(mem)} ({whose})"
        )
        for a, b in sorted(spans, key=lambda r: r[0] - r[1])[:3]:
            ranges.append(TimeRange(data.rel(a), data.rel(b)))
            lines.append(f"{gpu_label(g)}: idle {TimeRange(data.rel(a), data.rel(b)).text()}")
        numbers[f"gpu{g.get('index')}_idle_seconds"] = idle
    if not read_any:
        raise NotApplicable("no GPU utilization and memory series stored")
    if not lines:
        return []
    numbers["gpu_hours_idle"] = gpu_seconds / 3600
    rate = _usd_per_gpu_second(data, len(gpus))
    usd = (gpu_seconds + edges) * rate if rate is not None else None
    lines.insert(
        0,
        f"{gpu_seconds / 3600:.3f} GPU-hours held without work"
        + (f", ${usd:,.2f} at the run's price" if usd is not None else " (no price known)"),
    )
    return build(
        data,
        th,
        id="idle_allocation",
        title="Idle allocation: GPUs held with no work",
        seconds=(gpu_seconds + edges) / len(gpus),  # wall time of the whole allocation
        usd=usd,
        saving=Saving(
            (gpu_seconds + edges / 2) / len(gpus),
            0.9 * gpu_seconds / len(gpus),
            (gpu_seconds + edges) / len(gpus),
            "the GPUs released while idle (the job ended or the idle stage run outside the "
            "allocation)",
            "the idle stretches go away and the rest of the run is unchanged; each stretch's "
            "ends lie inside the partly busy tick intervals around it: half an interval at "
            "each end counted, range none to a whole one; low: a tenth kept (the "
            "allocation's start and end)",
            "idle",
            (gpu_seconds + edges) / len(gpus),
        ),
        evidence=Evidence(tuple(lines), numbers, tuple(ranges)),
        suggestion=(
            "Release GPUs you are not using: end the job when training ends instead of "
            "waiting, run CPU-only stages (preprocessing, evaluation on CPU, uploads) outside "
            "the GPU allocation, shut down idle notebook kernels, and set the scheduler's idle "
            "timeout."
        ),
    )


def _held(data: RunData, g: dict[str, Any]) -> tuple[dict[float, float], str]:
    """Memory on the GPU at each tick: the run's processes' where read, else the device's."""
    held: dict[float, float] = {}
    for s in data.of("gpu_process_memory_used_bytes", gpu=g["uuid"]):
        for t, v in s.points:
            held[t] = held.get(t, 0.0) + v
    if held:
        return held, "the run's processes"
    for s in data.of("gpu_memory_used_bytes", gpu=g["uuid"]):
        for t, v in s.points:
            held[t] = held.get(t, 0.0) + v
    return held, "device memory, any process"
