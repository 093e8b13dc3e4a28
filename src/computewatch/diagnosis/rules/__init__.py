"""The diagnosis rules, one module per family. Each rule is a function
``(RunData, Thresholds) -> list[Finding]`` that raises
:class:`~computewatch.diagnosis.loader.NotApplicable` when the run lacks what it looks at."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from computewatch.config.thresholds import Thresholds
from computewatch.diagnosis.findings import AtStake, Evidence, Finding, Severity, severity_for
from computewatch.diagnosis.loader import RunData

Rule = Callable[[RunData, Thresholds], list[Finding]]


def build(
    data: RunData,
    th: Thresholds,
    *,
    id: str,
    title: str,
    seconds: float | None,
    evidence: Evidence,
    suggestion: str,
    usd: float | None = None,
    severity: Severity | None = None,
    keep_small: bool = False,
) -> list[Finding]:
    """One finding as a list (empty when less than ``min_seconds_at_stake`` is at stake,
    unless ``keep_small``: a finding whose worth is not time, such as memory headroom)."""
    if not keep_small and (seconds is None or seconds < th.min_seconds_at_stake):
        return []
    sev = severity or severity_for(
        seconds, data.duration, high=th.severity_high, medium=th.severity_medium
    )
    stake = AtStake(seconds=seconds, usd=usd if usd is not None else data.usd(seconds))
    return [Finding(id, title, sev, stake, evidence, suggestion)]


def pct(v: float) -> str:
    return f"{100 * v:.0f}%"


def secs(v: float) -> str:
    if v < 1:
        return f"{v * 1e3:.1f} ms"
    if v < 120:
        return f"{v:.2f} s"
    if v < 7200:
        return f"{v / 60:.1f} min"
    return f"{v / 3600:.2f} h"


def gib(v: float) -> str:
    return f"{v / 2**30:.1f} GiB"


def all_rules() -> Mapping[str, Rule]:
    """Every rule by id, in the order they are documented."""
    from computewatch.diagnosis.rules import (
        accelerator,
        data_loader,
        distributed,
        host,
        idle,
        steps,
        throttling,
    )

    return {
        "data_starvation": data_loader.data_starvation,
        "low_gpu_utilization": accelerator.low_gpu_utilization,
        "low_mfu": accelerator.low_mfu,
        "gpu_memory_headroom": accelerator.gpu_memory_headroom,
        "cpu_bound": host.cpu_bound,
        "host_memory_pressure": host.memory_pressure,
        "io_bound": host.io_bound,
        "gpu_throttling": throttling.gpu_throttling,
        "step_regression": steps.step_regression,
        "outlier_steps": steps.outlier_steps,
        "idle_allocation": idle.idle_allocation,
        "stragglers": distributed.stragglers,
        "collective_communication": distributed.collective_communication,
    }
