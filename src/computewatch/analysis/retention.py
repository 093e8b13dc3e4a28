"""Retention: drop old runs' samples, keep their summaries (``computewatch gc``)."""

from __future__ import annotations

from computewatch.analysis.summary import build_summary
from computewatch.store import RUNNING, RunRow, Store


def expired_runs(store: Store, cutoff: float) -> list[RunRow]:
    """Finished runs started before ``cutoff`` (epoch seconds) that still have samples."""
    return [
        r
        for r in store.list_runs()
        if r.started_at < cutoff and r.status != RUNNING and r.samples_deleted_at is None
    ]


def collect(store: Store, cutoff: float, *, vacuum: bool = False) -> list[RunRow]:
    """Store a summary for every expired run that lacks one, then delete their samples."""
    for r in expired_runs(store, cutoff):
        if r.summary is None:
            store.update_run(r.key, summary=build_summary(store, r))
    done = store.delete_samples_before(cutoff)
    if vacuum:
        store.vacuum()
    return done
