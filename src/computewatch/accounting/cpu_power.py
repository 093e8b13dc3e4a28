"""Modeled CPU power for the exporters, when RAPL counters cannot be read.

The same linear model as the run accounting (computewatch.accounting.engine): the visible CPUs
draw ``TDP x (idle + (1 - idle) x u)`` with ``u`` the host's busy fraction, TDP from the CPU
catalog (data/cpu_tdp.csv), the configured ``energy.cpu_tdp_watts``, or a per-core default for a
CPU that is not in the catalog. docs/agent.md says which figure an agent uses.
"""

from __future__ import annotations

from dataclasses import dataclass

from computewatch.accounting.engine import CPU_IDLE_FRACTION
from computewatch.catalog import reference

__all__ = ["CpuPowerModel"]


@dataclass(frozen=True, slots=True)
class CpuPowerModel:
    """``watts(u)``: modeled power of the node's CPUs at busy fraction ``u`` (0-1)."""

    tdp_watts: float
    how: str

    def watts(self, busy_ratio: float) -> float:
        u = min(max(busy_ratio, 0.0), 1.0)
        return self.tdp_watts * (CPU_IDLE_FRACTION + (1.0 - CPU_IDLE_FRACTION) * u)

    @classmethod
    def for_cpu(
        cls, cpu_model: str, logical_cpus: int, configured_tdp_watts: float | None = None
    ) -> CpuPowerModel:
        """The model for this CPU: configured TDP, else the catalog's, else the default."""
        if configured_tdp_watts is not None:
            return cls(configured_tdp_watts, "configured energy.cpu_tdp_watts")
        row = reference.cpu_tdp(cpu_model)
        if row is not None:
            sockets = logical_cpus / (2 * row.cores)  # 2 threads per core, as the accounting
            return cls(row.tdp_watts * sockets, f"{cpu_model}: catalog TDP ({row.source})")
        per_core = reference.defaults()["unknown_cpu_watts_per_core"].value
        return cls(per_core * logical_cpus / 2, f"{cpu_model}: not in the catalog, default W/core")
