"""Telemetry of a stored run (ours or imported) for the detector: per GPU, its series by tick."""

from __future__ import annotations

from computewatch.detect.features import GpuTelemetry
from computewatch.store import RunRow, Store
from computewatch.traces import METRICS

__all__ = ["run_telemetry"]


def run_telemetry(store: Store, run: RunRow) -> tuple[list[GpuTelemetry], list[str | None], bool]:
    """Per GPU of the run (the GPUs it used; every monitored one with ``--all-gpus``), its
    series at the wall time of each tick; the GPU names (as NVML reports them); and whether any
    of the GPUs was simulated (a fake or replayed device)."""
    devices = list(run.host.get("gpus") or [])
    chosen = set(run.host.get("gpus_used") or [])
    every = bool(run.host.get("gpu_all"))
    picked = [d for d in devices if every or d.get("uuid") in chosen]
    uuids = [str(d.get("uuid")) for d in picked]
    wall = {seq: w for seq, _, w in store.ticks(run.key)}
    series = [
        s
        for s in store.series(run.key)
        if s.name in METRICS and s.labels.get("gpu") in uuids and "pid" not in s.labels
    ]
    pts = store.points_of(run.key, [s.idx for s in series])
    out: list[GpuTelemetry] = []
    for u in uuids:
        mine = [s for s in series if s.labels.get("gpu") == u]
        seqs = sorted({seq for s in mine for seq, _ in pts[s.idx] if seq in wall})
        pos = {seq: i for i, seq in enumerate(seqs)}
        metrics: dict[str, list[float | None]] = {}
        for s in mine:
            vals: list[float | None] = [None] * len(seqs)
            for seq, v in pts[s.idx]:
                if seq in pos:
                    vals[pos[seq]] = v
            metrics[s.name] = vals
        out.append(GpuTelemetry([wall[q] for q in seqs], metrics))
    simulated = any(bool(d.get("simulated")) for d in picked)
    return out, [d.get("name") for d in picked], simulated
