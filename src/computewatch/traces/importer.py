"""Write an imported trace into the local store as runs (mode ``import``), one per job.

The series are those our own sampler stores for GPUs (labels ``gpu=<uuid>``), so ``show``,
``report``, the summary and the accounting read an imported run like any other. Energy is the
trapezoid integral of the polled power (``gpu_energy_joules_total``, ``method=polled``), as our
sampler integrates it when a GPU has no energy counter; nothing is integrated across a gap
(:func:`computewatch.traces._build.gap_limit`) or a missing power value. The summary and the
accounting are computed by the caller (a higher layer), as for a finished run.
"""

from __future__ import annotations

import dataclasses
import os
import statistics
import uuid

from computewatch.catalog import find_by_nvml_name
from computewatch.readings import Kind, labels
from computewatch.store import COMPLETED, Store
from computewatch.traces._build import gap_limit
from computewatch.traces.records import METRICS, GpuSeries, JobTrace, Trace

__all__ = ["ENERGY_NOTE", "ImportedRun", "import_trace"]

MODE = "import"
ENERGY_NOTE = (
    "imported trace: GPU energy is the trapezoid integral of polled power.draw "
    "(no energy counter), not integrated across gaps or N/A values"
)


@dataclasses.dataclass(frozen=True, slots=True)
class ImportedRun:
    """One run the import wrote: its key and id, the job it holds, and its sample count."""

    key: int
    id: str
    job: str
    ticks: int
    gpus: int


def _uuid_of(g: GpuSeries, run_id: str) -> str:
    if g.key.startswith("GPU-") or g.key.startswith("MIG-"):
        return g.key
    return f"imported-{run_id}-{g.key.replace(':', '')}"


def _ticks(job: JobTrace) -> list[tuple[float, list[tuple[int, int]]]]:
    """Rows grouped into ticks: a tick ends when a GPU comes round again (nvidia-smi prints every
    GPU once per poll, each with its own millisecond timestamp). Per tick: its wall time and, per
    GPU of the job, the position of that GPU's sample."""
    events = sorted((t, gi, si) for gi, g in enumerate(job.gpus) for si, t in enumerate(g.times))
    ticks: list[tuple[float, list[tuple[int, int]]]] = []
    seen: set[int] = set()
    for t, gi, si in events:
        if not ticks or gi in seen:
            ticks.append((t, []))
            seen = set()
        seen.add(gi)
        ticks[-1][1].append((gi, si))
    return ticks


def _energy(g: GpuSeries) -> list[float | None]:
    """Cumulative joules at each sample (None before the first power value)."""
    power = g.metrics.get("gpu_power_watts")
    out: list[float | None] = [None] * len(g.times)
    if power is None:
        return out
    limit = gap_limit(g.times)
    total: float | None = None
    prev: tuple[float, float] | None = None
    for i, (t, p) in enumerate(zip(g.times, power, strict=True)):
        if p is None:
            prev = None
        else:
            if total is None:
                total = 0.0
            elif prev is not None and t - prev[0] <= limit:
                total += (prev[1] + p) / 2.0 * (t - prev[0])
            prev = (t, p)
        out[i] = total
    return out


def import_trace(
    store: Store,
    trace: Trace,
    *,
    name: str | None = None,
    tags: dict[str, str] | None = None,
) -> list[ImportedRun]:
    """Store each job of ``trace`` as a completed run; returns what was written."""
    out: list[ImportedRun] = []
    for job in trace.jobs:
        out.append(_import_job(store, trace, job, name, tags or {}))
    return out


def _import_job(
    store: Store, trace: Trace, job: JobTrace, name: str | None, tags: dict[str, str]
) -> ImportedRun:
    run_id = uuid.uuid4().hex[:12]
    run_name = name if len(trace.jobs) == 1 or name is None else f"{name}/{job.job}"
    if run_name is None:
        run_name = job.job
    intervals = [
        statistics.median(b - a for a, b in zip(g.times, g.times[1:], strict=False))
        for g in job.gpus
        if len(g.times) > 1
    ]
    interval = min(intervals) if intervals else 1.0
    devices: list[dict[str, object]] = []
    uuids: list[str] = []
    for g in job.gpus:
        u = _uuid_of(g, run_id)
        uuids.append(u)
        model = find_by_nvml_name(g.name) if g.name else None
        total = next((v for v in g.metrics.get("gpu_memory_total_bytes", []) if v), None)
        devices.append(
            {
                "index": g.index if g.index is not None else len(devices),
                "uuid": u,
                "name": g.name or "unknown (not in the trace)",
                "model": model.model if model else None,
                "memory_total_bytes": int(total) if total else None,
                "power_limit_watts": None,
                "mig_parent_uuid": None,
                "mig_index": None,
                "simulated": False,
                "capabilities": {
                    "energy_counter": False,
                    "energy_counter_why": "imported trace: energy is integrated from polled power",
                },
            }
        )
    host = {
        "hostname": "unknown (imported trace)",
        "gpu_backend": f"import:{trace.format}",
        "gpu_all": True,
        "gpus": devices,
        "gpus_used": uuids,
        "imported_from": os.path.basename(trace.path),
    }
    all_tags = {"imported_from": os.path.basename(trace.path), "format": trace.format, **tags}
    key = store.create_run(
        run_id=run_id,
        name=run_name,
        tags=all_tags,
        command=[],
        cwd=None,
        mode=MODE,
        started_at=job.start,
        interval_seconds=float(interval),
        host=host,
    )
    series: list[tuple[int, str, tuple[tuple[str, str], ...], Kind]] = []
    index: dict[tuple[int, str], int] = {}
    energies: list[list[float | None]] = []
    for gi, g in enumerate(job.gpus):
        for m in METRICS:
            if m in g.metrics:
                index[(gi, m)] = len(series)
                series.append((len(series), m, labels(gpu=uuids[gi]), Kind.GAUGE))
        e = _energy(g)
        energies.append(e)
        if any(v is not None for v in e):
            index[(gi, "energy")] = len(series)
            series.append(
                (
                    len(series),
                    "gpu_energy_joules_total",
                    labels(gpu=uuids[gi], method="polled"),
                    Kind.COUNTER,
                )
            )
    ticks = _ticks(job)
    tick_rows = [(seq, t - job.start, t) for seq, (t, _) in enumerate(ticks)]
    samples: list[tuple[int, int, int, float]] = []
    for seq, (_, members) in enumerate(ticks):
        for gi, si in members:
            g = job.gpus[gi]
            for m, vals in g.metrics.items():
                v = vals[si]
                if v is not None and (gi, m) in index:
                    samples.append((key, seq, index[(gi, m)], v))
            ev = energies[gi][si]
            if ev is not None:
                samples.append((key, seq, index[(gi, "energy")], ev))
    store.write_batch(key, series=series, ticks=tick_rows, samples=samples, data_until=job.end)
    notes = [f"imported from {os.path.basename(trace.path)} ({trace.format})", ENERGY_NOTE]
    notes += trace.notes
    store.update_run(
        key, status=COMPLETED, exit_code=None, ended_at=job.end, notes=notes, heartbeat_at=job.end
    )
    return ImportedRun(key, run_id, job.job, len(ticks), len(job.gpus))
