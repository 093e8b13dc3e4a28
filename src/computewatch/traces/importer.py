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
import hashlib
import heapq
import math
import os
import uuid
from array import array
from collections.abc import Iterator, Sequence
from pathlib import Path

from computewatch.catalog import find_by_nvml_name
from computewatch.readings import Kind, labels
from computewatch.store import COMPLETED, RunRow, Store
from computewatch.traces._build import gap_limit, median_interval
from computewatch.traces.records import METRICS, GpuSeries, JobTrace, Trace, TraceError

__all__ = [
    "DIGEST_TAG",
    "ENERGY_NOTE",
    "ImportedRun",
    "already_imported",
    "file_digest",
    "import_trace",
    "imported_runs",
    "remove_imported",
]

DIGEST_TAG = "imported_sha256"
"""The tag that holds the SHA-256 of the file a run was imported from: the same log (under any
name) is recognised when it is imported again."""

MODE = "import"
WRITE_TICKS = 5000  # ticks per transaction
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


def _events(gi: int, times: array[float]) -> Iterator[tuple[float, int, int]]:
    for si, t in enumerate(times):
        yield t, gi, si


def _ticks(job: JobTrace) -> Iterator[tuple[float, list[tuple[int, int]]]]:
    """Rows grouped into ticks, in time order: a tick ends when a GPU comes round again
    (nvidia-smi prints every GPU once per poll, each with its own millisecond timestamp). Per
    tick: its wall time and, per GPU present, the position of that GPU's sample. A merge of the
    GPUs' series (each in time order): nothing the size of the trace is built."""
    streams = [_events(gi, g.times) for gi, g in enumerate(job.gpus)]
    tick: tuple[float, list[tuple[int, int]]] | None = None
    seen: set[int] = set()
    for t, gi, si in heapq.merge(*streams):
        if tick is None or gi in seen:
            if tick is not None:
                yield tick
            tick = (t, [])
            seen = set()
        seen.add(gi)
        tick[1].append((gi, si))
    if tick is not None:
        yield tick


def _integral(times: array[float], rates: array[float] | None) -> array[float]:
    """Cumulative trapezoid integral of ``rates`` over ``times`` at each sample (NaN before the
    first value; empty without rates); nothing is added across a gap or a missing value."""
    if rates is None:
        return array("d")
    out = array("d", bytes(8 * len(times)))
    limit = gap_limit(times)
    total = math.nan
    prev_t = prev_p = math.nan
    for i, (t, p) in enumerate(zip(times, rates, strict=True)):
        if math.isnan(p):
            prev_t = math.nan
        else:
            if math.isnan(total):
                total = 0.0
            elif not math.isnan(prev_t) and t - prev_t <= limit:
                total += (prev_p + p) / 2.0 * (t - prev_t)
            prev_t, prev_p = t, p
        out[i] = total
    return out


_NETWORK_COUNTERS = {
    "network_receive_bytes_per_second": "host_network_receive_bytes_total",
    "network_transmit_bytes_per_second": "host_network_transmit_bytes_total",
}


def file_digest(path: str | Path) -> str:
    """The SHA-256 of a file's bytes (hex), read in blocks."""
    h = hashlib.sha256()
    try:
        with Path(path).open("rb") as f:
            while block := f.read(1 << 20):
                h.update(block)
    except OSError as e:
        raise TraceError(f"{path}: cannot read: {e.strerror or e}") from None
    return h.hexdigest()


def imported_runs(store: Store, digest: str) -> list[RunRow]:
    """The imported runs of the file whose :func:`file_digest` is ``digest``, oldest first."""
    runs = store.list_runs(tags={DIGEST_TAG: digest})
    return sorted((r for r in runs if r.mode == MODE), key=lambda r: (r.started_at, r.key))


def already_imported(path: str | Path, runs: Sequence[RunRow]) -> TraceError:
    """The error for a log imported before (as ``runs``)."""
    which = ", ".join(f"{r.id} ({r.name})" if r.name else r.id for r in runs)
    return TraceError(
        f"{path}: this log was imported already as run{'s' if len(runs) > 1 else ''} {which}; "
        "--replace imports it again in its place"
    )


def remove_imported(store: Store, runs: Sequence[RunRow]) -> None:
    """Delete imported ``runs`` (their rows in every table keyed by run), in one transaction.
    Only runs of mode ``import`` are deleted: a monitored run is never touched."""
    keys = [r.key for r in runs if r.mode == MODE]
    if not keys:
        return
    c = store.conn
    tables = [
        name
        for (name,) in c.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        if any(col[1] == "run_key" for col in c.execute(f'PRAGMA table_info("{name}")'))
    ]
    marks = ",".join("?" * len(keys))
    c.execute("BEGIN IMMEDIATE")
    try:
        for name in tables:
            c.execute(f'DELETE FROM "{name}" WHERE run_key IN ({marks})', keys)
        c.execute(f"DELETE FROM runs WHERE key IN ({marks}) AND mode = ?", [*keys, MODE])
        c.execute("COMMIT")
    except BaseException:
        c.execute("ROLLBACK")
        raise


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
    intervals = [median_interval(g.times) for g in job.gpus if len(g.times) > 1]
    interval = min(intervals) if intervals else 1.0
    devices: list[dict[str, object]] = []
    uuids: list[str] = []
    for g in job.gpus:
        u = _uuid_of(g, run_id)
        uuids.append(u)
        model = find_by_nvml_name(g.name) if g.name else None
        total = next((v for v in g.metrics.get("gpu_memory_total_bytes", ()) if v > 0), None)
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
    # counters integrated from rates: per GPU, (series index, cumulative values)
    integrals: list[list[tuple[int, array[float]]]] = []
    net_owner: dict[str, int] = {}  # the job's traffic is taken from the first GPU giving it
    for gi, g in enumerate(job.gpus):
        mine: list[tuple[int, array[float]]] = []
        for m in METRICS:
            if m in g.metrics:
                index[(gi, m)] = len(series)
                series.append((len(series), m, labels(gpu=uuids[gi]), Kind.GAUGE))
        e = _integral(g.times, g.metrics.get("gpu_power_watts"))
        if any(not math.isnan(v) for v in e):
            mine.append((len(series), e))
            series.append(
                (
                    len(series),
                    "gpu_energy_joules_total",
                    labels(gpu=uuids[gi], method="polled"),
                    Kind.COUNTER,
                )
            )
        for m, counter_name in _NETWORK_COUNTERS.items():
            if m in g.metrics and m not in net_owner:
                net_owner[m] = gi
                mine.append((len(series), _integral(g.times, g.metrics[m])))
                lbl = labels(interface="imported")
                series.append((len(series), counter_name, lbl, Kind.COUNTER))
        integrals.append(mine)
    store.write_batch(key, series=series)
    metrics = [
        [(m, vals, index[(gi, m)]) for m, vals in g.metrics.items() if (gi, m) in index]
        for gi, g in enumerate(job.gpus)
    ]
    tick_rows: list[tuple[int, float, float]] = []
    samples: list[tuple[int, int, int, float]] = []
    seq = -1
    for seq, (t, members) in enumerate(_ticks(job)):
        tick_rows.append((seq, t - job.start, t))
        for gi, si in members:
            for _, vals, idx in metrics[gi]:
                v = vals[si]
                if not math.isnan(v):
                    samples.append((key, seq, idx, v))
            for idx, cum in integrals[gi]:
                if not math.isnan(cum[si]):
                    samples.append((key, seq, idx, cum[si]))
        if len(tick_rows) >= WRITE_TICKS:
            store.write_batch(key, ticks=tick_rows, samples=samples, data_until=t)
            tick_rows, samples = [], []
    store.write_batch(key, ticks=tick_rows, samples=samples, data_until=job.end)
    notes = [f"imported from {os.path.basename(trace.path)} ({trace.format})", ENERGY_NOTE]
    notes += trace.notes
    store.update_run(
        key, status=COMPLETED, exit_code=None, ended_at=job.end, notes=notes, heartbeat_at=job.end
    )
    return ImportedRun(key, run_id, job.job, seq + 1, len(job.gpus))
