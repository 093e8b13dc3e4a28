"""Thresholds of the diagnosis rules, with their defaults (each one is explained in
``docs/diagnosis.md``). The configuration file's ``[diagnosis]`` section overrides any of them:

```toml
[diagnosis]
data_wait_share = 0.10      # flag data-loader starvation from 10 % of step time
idle_min_seconds = 600      # GPUs held idle for 10 minutes, not 5
```
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import msgspec

MIB = 1024 * 1024


class Thresholds(msgspec.Struct, frozen=True):
    """Every threshold the rules use. Ratios are 0-1, times in seconds, sizes in bytes."""

    # ranking and reporting
    min_seconds_at_stake: float = 1.0  # a finding costing less wall time than this is dropped
    severity_high: float = 0.25  # share of the run's duration at stake for "high"
    severity_medium: float = 0.10  # ... and for "medium" (below: "low")
    # data-loader starvation
    data_wait_share: float = 0.15  # share of step time spent in the `data` phase
    # accelerators
    gpu_utilization_low: float = 0.5  # mean NVML utilization below this is low
    mfu_low: float = 0.3  # MFU below this is low for the hardware
    mfu_target: float = 0.5  # MFU a well-tuned dense model reaches; time at stake is measured to it
    gpu_memory_used_low: float = 0.5  # peak memory below this share of the device: headroom
    # host
    cpu_bound_share: float = 0.3  # share of the run bound by one saturated core
    single_core_busy: float = 0.85  # the process tree using at least this many cores (and < 1.15)
    other_cores_busy_max: float = 0.25  # ... while the other allowed cores are at most this busy
    memory_available_low: float = 0.05  # host (or cgroup) memory available below this share
    swap_growth_bytes: float = 256 * MIB  # swap in use growing by this much during the run
    memory_pressure_share: float = 0.05  # share of the run under memory pressure
    iowait_high: float = 0.2  # share of the busy-or-waiting CPU time spent in iowait
    io_bound_share: float = 0.2  # share of the run with high iowait
    io_step_slowdown: float = 1.2  # steps during high iowait this much slower than the others
    # throttling
    throttle_share: float = 0.1  # share of the run a GPU spent throttled (power or thermal)
    # step time
    skip_first_steps: int = 1  # warm-up steps left out (the first is timed from track() start)
    regression_min_steps: int = 20  # fewer steps: no change-point test
    min_segment_steps: int = 5  # each side of a change point has at least this many steps
    regression_min_change: float = 0.2  # relative change of the mean step time (20 %)
    regression_p_value: float = 0.01  # Mann-Whitney U test, two-sided
    outlier_mad_k: float = 6.0  # an outlier step is above median + k * 1.4826 * MAD ...
    outlier_min_ratio: float = 2.0  # ... and at least this many times the median
    # idle allocation
    idle_utilization: float = 0.05  # a held GPU at or below this utilization is idle
    idle_min_seconds: float = 300.0  # only idle stretches at least this long count
    # distributed
    straggler_min_excess: float = 0.1  # slowest rank's compute time over the median rank's
    comm_share_high: float = 0.3  # share of step time in `comm` phases

    def with_overrides(self, overrides: Mapping[str, Any]) -> Thresholds:
        """A copy with ``overrides`` (checked as in :func:`check_overrides`) applied."""
        return msgspec.structs.replace(self, **check_overrides(overrides))

    def as_dict(self) -> dict[str, float]:
        return msgspec.structs.asdict(self)


DEFAULTS = Thresholds()

_INT_FIELDS = frozenset(
    {"skip_first_steps", "regression_min_steps", "min_segment_steps"}
)  # fmt: skip
_RATIO_FIELDS = frozenset(
    {
        "severity_high", "severity_medium", "data_wait_share", "gpu_utilization_low", "mfu_low",
        "mfu_target", "gpu_memory_used_low", "cpu_bound_share", "single_core_busy",
        "other_cores_busy_max", "memory_available_low", "memory_pressure_share", "iowait_high",
        "io_bound_share", "throttle_share", "regression_p_value", "idle_utilization",
        "comm_share_high",
    }
)  # fmt: skip


def check_overrides(overrides: Mapping[str, Any]) -> dict[str, Any]:
    """Check ``[diagnosis]`` keys and values; raises ``ValueError`` naming the bad one."""
    known = {f.name for f in msgspec.structs.fields(Thresholds)}
    out: dict[str, Any] = {}
    for key, value in overrides.items():
        if key not in known:
            raise ValueError(f"unknown key diagnosis.{key}; known: {', '.join(sorted(known))}")
        bad = f"diagnosis.{key} = {value!r}"
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"{bad} must be a number")
        try:
            v = float(value)
        except OverflowError:  # an integer too large for a float (TOML integers have no limit)
            v = math.inf
        if not math.isfinite(v) or v < 0:
            raise ValueError(f"{bad} must be a finite number, not negative")
        if key in _RATIO_FIELDS and v > 1:
            raise ValueError(f"{bad} is a ratio: from 0 to 1")
        if key in _INT_FIELDS:
            if v != int(v):
                raise ValueError(f"{bad} must be a whole number")
            out[key] = int(v)
        else:
            out[key] = v
    return out
