"""The modeled power of a machine's CPUs, when RAPL counters cannot be read: one model for the
run accounting (computewatch.accounting.engine) and the node agent (computewatch.fleet.node).

The visible CPUs draw ``TDP x (idle + (1 - idle) x u)`` with ``u`` the host's busy fraction and
TDP from the configured ``energy.cpu_tdp_watts``, else the CPU catalog (data/cpu_tdp.csv) scaled
to the threads this machine sees, else a per-core default for a CPU that is not in the catalog.
docs/methodology.md gives the formula; docs/agent.md says which figure an agent uses.
"""

from __future__ import annotations

import msgspec

from computewatch.catalog import reference

__all__ = ["CPU_IDLE_FRACTION", "KNOWN_CPU_UNCERTAINTY", "CpuPowerModel"]

KNOWN_CPU_UNCERTAINTY = 0.40  # TDP curve for a known CPU model
CPU_IDLE_FRACTION = 0.30  # package power at idle as a fraction of TDP (linear model)


class CpuPowerModel(msgspec.Struct, frozen=True):
    """``watts(u)``: modeled power of the machine's CPUs at busy fraction ``u`` (0-1), with
    how the TDP was found, its relative uncertainty and its source."""

    tdp_watts: float
    how: str
    relative_uncertainty: float = KNOWN_CPU_UNCERTAINTY
    source: str = ""

    def watts(self, busy_ratio: float) -> float:
        u = min(max(busy_ratio, 0.0), 1.0)
        return self.tdp_watts * (CPU_IDLE_FRACTION + (1.0 - CPU_IDLE_FRACTION) * u)

    @classmethod
    def for_cpu(
        cls,
        cpu_model: str,
        logical_cpus: float,
        configured_tdp_watts: float | None = None,
        configured_source: str = "configuration",
    ) -> CpuPowerModel:
        """The model for this CPU: configured TDP, else the catalog's, else the default."""
        if configured_tdp_watts is not None:
            return cls(
                configured_tdp_watts,
                f"TDP {configured_tdp_watts:g} W (configured) for the machine's CPUs",
                KNOWN_CPU_UNCERTAINTY,
                configured_source,
            )
        row = reference.cpu_tdp(cpu_model)
        if row is not None:
            # A VM sees part of a socket: scale the socket's TDP by the share of its threads
            # seen (2 threads per core assumed: a host without SMT is charged half; say so).
            sockets = logical_cpus / (2 * row.cores)
            return cls(
                row.tdp_watts * max(sockets, 0.0),
                f"{cpu_model}: TDP {row.tdp_watts:g} W per {row.cores}-core socket "
                f"({row.source}, {row.year}) x {sockets:.3g} sockets' worth of threads",
                KNOWN_CPU_UNCERTAINTY,
                row.source,
            )
        d = reference.defaults()
        per_core = d["unknown_cpu_watts_per_core"]
        return cls(
            per_core.value * logical_cpus / 2,
            f"CPU model {cpu_model!r} not in the catalog: {per_core.value:g} W per core "
            f"({per_core.source}) x {logical_cpus:g} logical CPUs / 2 threads per core",
            d["unknown_cpu_relative_uncertainty"].value,
            per_core.source,
        )
