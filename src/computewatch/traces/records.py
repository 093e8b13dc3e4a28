"""Typed records of an imported GPU trace: jobs, GPUs, and per-GPU series in SI units.

Metric names are the series names our own sampler stores for GPUs (``gpu_utilization_ratio``,
``gpu_memory_used_bytes``, ``gpu_power_watts`` ...), so an imported trace reads like a run.
"""

from __future__ import annotations

import dataclasses
from array import array

from computewatch.errors import ComputewatchError

__all__ = [
    "METRICS",
    "NETWORK_METRICS",
    "GpuSeries",
    "JobTrace",
    "Trace",
    "TraceError",
]


METRICS: dict[str, str] = {
    "gpu_utilization_ratio": "fraction of time a kernel ran (0-1)",
    "gpu_memory_utilization_ratio": "fraction of time device memory was read or written (0-1)",
    "gpu_memory_used_bytes": "device memory in use (bytes)",
    "gpu_memory_total_bytes": "device memory size (bytes)",
    "gpu_power_watts": "board power draw (W)",
    "gpu_power_limit_watts": "board power limit (W)",
    "gpu_temperature_celsius": "GPU temperature (degrees C)",
    "gpu_sm_clock_hertz": "SM clock (Hz)",
    "gpu_memory_clock_hertz": "memory clock (Hz)",
    "gpu_fan_ratio": "fan speed (0-1)",
    "gpu_pcie_receive_bytes_per_second": "PCIe receive throughput (bytes/s)",
    "gpu_pcie_transmit_bytes_per_second": "PCIe transmit throughput (bytes/s)",
}
"""The per-GPU metrics a trace may carry: our stored series names, SI units (any subset)."""

NETWORK_METRICS: dict[str, str] = {
    "network_receive_bytes_per_second": "the job's network receive throughput (bytes/s)",
    "network_transmit_bytes_per_second": "the job's network transmit throughput (bytes/s)",
}
"""Job-level traffic the long format may carry (on every GPU's rows, or on one GPU's); stored as
the host network counters of the run, integrated over time."""


class TraceError(ComputewatchError):
    """A trace file that cannot be read; the message names the file and, where one is at fault,
    the line."""


def _floats() -> array[float]:
    return array("d")


def _ints() -> array[int]:
    return array("q")


@dataclasses.dataclass(slots=True)
class GpuSeries:
    """One GPU's samples: wall-clock times (Unix seconds, increasing) and, per metric, one value
    per time, NaN where the tool printed N/A or the cell was empty. Compact arrays of doubles
    (8 bytes a value): months of logs fit in memory."""

    key: str  # the GPU's identity in the file: its uuid, or "index:N"
    index: int | None
    name: str | None
    times: array[float] = dataclasses.field(default_factory=_floats)
    lines: array[int] = dataclasses.field(default_factory=_ints)  # the file line of each sample
    metrics: dict[str, array[float]] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(slots=True)
class JobTrace:
    """One job: its GPUs' series."""

    job: str
    gpus: list[GpuSeries]

    @property
    def start(self) -> float:
        return min(g.times[0] for g in self.gpus if g.times)

    @property
    def end(self) -> float:
        return max(g.times[-1] for g in self.gpus if g.times)

    @property
    def duration_seconds(self) -> float:
        return self.end - self.start


@dataclasses.dataclass(slots=True)
class Trace:
    """What one file held: its format, jobs, the number of data rows read, and notes (ignored
    columns, values the tool could not give) said once each."""

    path: str
    format: str
    jobs: list[JobTrace]
    rows: int
    notes: list[str] = dataclasses.field(default_factory=list)

    @property
    def metrics(self) -> list[str]:
        """The metrics any GPU of the trace carried, in ``METRICS`` order."""
        have = {m for j in self.jobs for g in j.gpus for m in g.metrics}  # all-NaN ones dropped
        return [m for m in METRICS if m in have]
