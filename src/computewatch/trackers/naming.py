"""The metrics a tracker gets, and their names.

Every name is ours, under ``computewatch/``: the system series as
``computewatch/system/...`` (MLflow's system-metric spelling, ``cpu_utilization_percentage``,
``gpu_0_utilization_percentage``, but never MLflow's or W&B's own ``system/...`` keys, which
those tools' monitors write and which mean something else), the run's own figures as
``computewatch/...``. Each tool takes the names as they are (TensorBoard as scalar tags, the
``/`` groups them). The CPU and resident memory are the run's process tree (docs/metrics.md),
the host's memory says ``host``. The table is in docs/trackers.md.

:class:`PointMaker` turns one sampler tick (readings plus the steps closed since the last one)
into points. Counters become rates over the tick; memory is in megabytes (10^6 bytes, as
MLflow's own system metrics).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from computewatch.catalog import load_accelerators
from computewatch.readings import Reading
from computewatch.records import StepRecord
from computewatch.trackers.base import MetricPoint

__all__ = ["GPU_METRICS", "STEP_METRICS", "SYSTEM_METRICS", "PointMaker", "gpu_index_of"]

SYSTEM_METRICS = {
    "computewatch/system/cpu_utilization_percentage": "the run's processes' CPU time over the "
    "tick, as a percentage of the cores the run may use",
    "computewatch/system/process_memory_rss_megabytes": "resident memory of the run's process "
    "tree, MB",
    "computewatch/system/host_memory_usage_megabytes": "host memory in use, MB",
    "computewatch/system/host_memory_usage_percentage": "host memory in use, % of installed",
}
GPU_METRICS = {
    "computewatch/system/gpu_{i}_utilization_percentage": "NVML/amdsmi utilization (kernel "
    "running), %",
    "computewatch/system/gpu_{i}_memory_usage_megabytes": "device memory in use, MB",
    "computewatch/system/gpu_{i}_memory_usage_percentage": "device memory in use, % of total",
    "computewatch/system/gpu_{i}_power_usage_watts": "board power, W",
}
STEP_METRICS = {
    "computewatch/step_time_seconds": "mean time between consecutive steps in the tick",
    "computewatch/steps_per_second": "steps closed in the tick ÷ the tick's length",
    "computewatch/samples_per_second": "samples reported in the tick ÷ the tick's length",
    "computewatch/tokens_per_second": "tokens reported in the tick ÷ the tick's length",
    "computewatch/mfu": "counted FLOPs in the tick ÷ (tick length × the GPUs' catalog peak or "
    "the declared peak); the run's MFU is the summary's",
}
_DEFAULT_PRECISIONS = ("bf16", "fp16", "fp32")
_MB = 1e6


def gpu_index_of(facts: Mapping[str, object]) -> dict[str, int]:
    """GPU uuid → index, from the run's host facts (``gpus``)."""
    out: dict[str, int] = {}
    gpus = facts.get("gpus")
    if isinstance(gpus, list):
        for pos, g in enumerate(gpus):
            if isinstance(g, dict) and isinstance(g.get("uuid"), str):
                idx = g.get("index")
                out[g["uuid"]] = idx if isinstance(idx, int) else pos
    return out


def catalog_peak(facts: Mapping[str, object]) -> float | None:
    """The summed dense peak FLOP/s of the run's GPUs from the catalog (bf16, else fp16, fp32),
    None when one is missing: what the live MFU divides by."""
    gpus = facts.get("gpus")
    if not isinstance(gpus, list) or not gpus:
        return None
    catalog = load_accelerators()
    total = 0.0
    for g in gpus:
        acc = catalog.get(str(g.get("model"))) if isinstance(g, dict) else None
        if acc is None:
            return None
        peak = next(
            (p for p in (acc.peak_tflops(x) for x in _DEFAULT_PRECISIONS) if p is not None), None
        )
        if peak is None:
            return None
        total += peak * 1e12
    return total


@dataclass(slots=True)
class PointMaker:
    """Points from ticks; keeps the previous counters and step time between ticks."""

    allowed_cores: float = 1.0
    gpu_index: dict[str, int] = field(default_factory=dict)
    peak_flops: float | None = None
    _prev_mono: float | None = None
    _prev_cpu: float | None = None
    _last_step: dict[int, float] = field(default_factory=dict)

    def points(
        self, seq: int, mono: float, wall: float, readings: Sequence[Reading],
        steps: Iterable[StepRecord] = (),
    ) -> list[MetricPoint]:  # fmt: skip
        """The points of one tick (``seq`` is the tick's number, the points' step)."""
        values: dict[str, float] = {}
        tree_cpu: float | None = None
        host_used = host_total = None
        gpu_mem: dict[int, float] = {}
        gpu_tot: dict[int, float] = {}
        for r in readings:
            name = r.name
            if name == "tree_cpu_seconds_total":
                tree_cpu = r.value
            elif name == "tree_resident_memory_bytes":
                if r.value > 0:  # none: the tree has ended (the final tick), not 0 MB in use
                    values["computewatch/system/process_memory_rss_megabytes"] = r.value / _MB
            elif name == "host_memory_used_bytes":
                host_used = r.value
            elif name == "host_memory_total_bytes":
                host_total = r.value
            elif name.startswith("gpu_") and r.labels and r.labels[0][0] == "gpu":
                i = self._gpu(r.labels[0][1])
                if name == "gpu_utilization_ratio":
                    values[f"computewatch/system/gpu_{i}_utilization_percentage"] = r.value * 100.0
                elif name == "gpu_memory_used_bytes":
                    gpu_mem[i] = r.value
                elif name == "gpu_memory_total_bytes":
                    gpu_tot[i] = r.value
                elif name == "gpu_power_watts":
                    values[f"computewatch/system/gpu_{i}_power_usage_watts"] = r.value
        for i, used in gpu_mem.items():
            values[f"computewatch/system/gpu_{i}_memory_usage_megabytes"] = used / _MB
            if gpu_tot.get(i):
                values[f"computewatch/system/gpu_{i}_memory_usage_percentage"] = (
                    used / gpu_tot[i] * 100.0
                )
        if host_used is not None:
            values["computewatch/system/host_memory_usage_megabytes"] = host_used / _MB
            if host_total:
                values["computewatch/system/host_memory_usage_percentage"] = (
                    host_used / host_total * 100.0
                )
        cpu = tree_cpu  # the run's own processes (docs/metrics.md), never the container's
        dt = None if self._prev_mono is None else mono - self._prev_mono
        if cpu is not None:
            if dt and dt > 0 and self._prev_cpu is not None and self.allowed_cores > 0:
                used = max(0.0, cpu - self._prev_cpu) / dt / self.allowed_cores
                values["computewatch/system/cpu_utilization_percentage"] = used * 100.0
            self._prev_cpu = cpu
        self._step_values(values, steps, dt if dt and dt > 0 else None)
        self._prev_mono = mono
        # a broken reading (NaN, inf) is not logged: trackers refuse or mis-plot them
        return [MetricPoint(k, v, seq, wall) for k, v in values.items() if math.isfinite(v)]

    def _gpu(self, uuid: str) -> int:
        idx = self.gpu_index.get(uuid)
        if idx is None:
            idx = self.gpu_index[uuid] = len(self.gpu_index)
        return idx

    def _step_values(
        self, values: dict[str, float], steps: Iterable[StepRecord], dt: float | None
    ) -> None:
        """Rates over the tick; for the first tick (no previous one), over the steps' own span
        (its first step excluded: the span starts there)."""
        n = 0
        samples = tokens = flops = 0.0
        gaps: list[float] = []
        first: StepRecord | None = None
        last_mono = -math.inf
        for s in steps:
            if dt is None and first is None:
                first = s
                last_mono = s.mono
                prev = self._last_step.get(s.pid)
                self._last_step[s.pid] = s.mono
                if prev is None or s.mono <= prev:
                    continue
                gaps.append(s.mono - prev)
                continue
            last_mono = max(last_mono, s.mono)
            n += 1
            samples += s.samples or 0.0
            tokens += s.tokens or 0.0
            flops += s.flops or 0.0
            prev = self._last_step.get(s.pid)
            if prev is not None and s.mono > prev:
                gaps.append(s.mono - prev)
            self._last_step[s.pid] = s.mono
        if dt is None and first is not None and last_mono > first.mono:
            dt = last_mono - first.mono
        if not n or dt is None:
            if gaps:
                values["computewatch/step_time_seconds"] = sum(gaps) / len(gaps)
            return
        values["computewatch/steps_per_second"] = n / dt
        if gaps:
            values["computewatch/step_time_seconds"] = sum(gaps) / len(gaps)
        if samples:
            values["computewatch/samples_per_second"] = samples / dt
        if tokens:
            values["computewatch/tokens_per_second"] = tokens / dt
        if flops and self.peak_flops:
            values["computewatch/mfu"] = flops / dt / self.peak_flops
