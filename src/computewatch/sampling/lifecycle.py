"""A run's life outside the command: its id and spool directory, and how it ends (last flush,
final row, summary, accounting, diagnosis). Shared by ``computewatch run`` (the supervisor) and
the sampler subprocess of ``track()``."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from computewatch.accounting.engine import AccountingOptions, accounted, with_accounting
from computewatch.analysis.summary import build_summary, summary_of
from computewatch.analysis.summary_types import RunSummary
from computewatch.diagnosis import diagnosed
from computewatch.sampling.channel import SpoolReader
from computewatch.sampling.sampler import Sampler
from computewatch.store import RunRow, Store

__all__ = ["RunOutcome", "finish_run", "new_run_id", "spool_dir"]


@dataclass(slots=True)
class RunOutcome:
    """The command's exit status, and the stored run (None when monitoring itself failed)."""

    exit_code: int
    run: RunRow | None
    summary: RunSummary | None


def new_run_id() -> str:
    return uuid.uuid4().hex[:12]


def spool_dir(db_path: Path, run_id: str) -> Path:
    return db_path.parent / "spool" / run_id


def finish_run(
    store: Store,
    sampler: Sampler,
    run_key: int,
    status: str,
    exit_code: int | None,
    app_meta: list[dict[str, Any]],
    reader: SpoolReader | None,
    *,
    ended_at: float | None = None,
    facts: dict[str, Any] | None = None,
    accounting: AccountingOptions | None = None,
) -> RunOutcome:
    """Last flush, then the run's final row: status, exit code, notes, summary. ``ended_at``
    defaults to now."""
    ok = sampler.flush()
    if not ok:  # one more try before giving up on the tail of the data
        time.sleep(0.5)
        ok = sampler.flush()
    run = store.run_by_key(run_key)
    name = run.name
    tags = dict(run.tags)
    for meta in app_meta:  # what track() inside the command said about the run
        if name is None and meta.get("name"):
            name = str(meta["name"])
        for k, v in (meta.get("tags") or {}).items():
            tags.setdefault(str(k), str(v))
    ended = ended_at if ended_at is not None else time.time()
    store.update_run(
        run_key,
        status=status,
        exit_code=exit_code,
        ended_at=ended,
        notes=list(run.notes) + sampler.notes,
        name=name,
        tags=tags,
        **({"host": facts} if facts is not None else {}),
    )
    run = store.run_by_key(run_key)
    # The sampler's aggregates hold what the store accepted: no sample is read back. Without
    # them (an internal error, a source that repeated a series within a tick), the summary is
    # rebuilt from the store.
    agg = sampler.aggregates
    if agg is not None and agg.complete:
        summary = summary_of(store, run, agg)
    else:
        summary = build_summary(store, run)
    summary = with_accounting(
        summary, accounted(store, run, summary, accounting or AccountingOptions())
    )
    summary["diagnosis"] = diagnosed(store, run, summary, accounting)  # never raises
    store.update_run(run_key, summary=summary)
    if reader is not None:
        if ok:
            reader.remove()
        else:  # keep the spooled steps: a later reader can still store them
            reader.close()
    return RunOutcome(exit_code if exit_code is not None else 0, store.run_by_key(run_key), summary)
