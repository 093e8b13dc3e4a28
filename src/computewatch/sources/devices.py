"""What can be measured on this machine: ``computewatch devices``."""

from __future__ import annotations

import os
from typing import IO, Any

import msgspec

from computewatch.sources.gpus import open_backend
from computewatch.sources.host import allowed_cores, host_facts
from computewatch.sources.rapl import rapl_status
from computewatch.sources.replay import record

DEVICES_SCHEMA_VERSION = 1


def describe(gpu_backend: str = "auto", *, procfs_root: str = "/proc") -> dict[str, Any]:
    """Every device found, by backend, with what can be measured on it and why not."""
    facts: dict[str, Any] = dict(host_facts(procfs_root=procfs_root, pid=os.getpid()))
    facts["allowed_cores"] = allowed_cores(facts)
    ok, detail = rapl_status()
    # An empty tree still makes the backends probe their per-process queries.
    backend = open_backend(gpu_backend, all_gpus=True, procfs_root=procfs_root, pids=tuple)
    try:
        gpus = []
        for src in backend.sources:
            for d in src.devices:
                entry = msgspec.structs.asdict(d)
                entry["backend"] = src.name
                gpus.append(entry)
        return {
            "schema_version": DEVICES_SCHEMA_VERSION,
            "host": facts,
            "cpu_energy": {"backend": "rapl", "available": ok, "detail": detail},
            "gpu_backend": gpu_backend,
            "gpu_backends_used": [s.name for s in backend.sources],
            "gpu_backends_skipped": [{"backend": n, "reason": r} for n, r in backend.skipped],
            "gpus": gpus,
            "simulated": backend.simulated,
        }
    finally:
        backend.close()


def record_trace(
    out: IO[str], *, gpu_backend: str, seconds: float, interval: float, procfs_root: str = "/proc"
) -> tuple[int, int]:
    """Record GPU readings to ``out`` as a replayable trace; returns (devices, ticks).
    Raises ValueError when no GPU backend is available."""
    backend = open_backend(gpu_backend, all_gpus=True, procfs_root=procfs_root)
    try:
        if not backend.sources:
            reasons = "; ".join(f"{n}: {r}" for n, r in backend.skipped) or "none found"
            raise ValueError(f"no GPU to record ({reasons})")
        ticks = record(list(backend.sources), out, seconds=seconds, interval=interval)
        return len(backend.devices), ticks
    finally:
        backend.close()
