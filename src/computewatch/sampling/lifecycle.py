"""A run's life outside the command: its id and spool directory, and how it ends (last flush,
final row, summary, accounting, diagnosis). Shared by ``computewatch run`` (the supervisor) and
the sampler subprocess of ``track()``."""

from __future__ import annotations

import sqlite3
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from computewatch.accounting.engine import AccountingOptions, accounted, with_accounting
from computewatch.analysis.summary import build_summary, summary_of
from computewatch.analysis.summary_types import RunSummary
from computewatch.diagnosis import diagnosed
from computewatch.profiling.artifacts import link_pending, name_captures
from computewatch.sampling.channel import SpoolReader
from computewatch.sampling.sampler import Sampler
from computewatch.store import RunRow, Store, StoreError
from computewatch.store.spooled import ingest_pending, pending_file, problem_of, write_reason

__all__ = [
    "END_BUSY_TIMEOUT",
    "RUN_BUSY_TIMEOUT",
    "RunOutcome",
    "RunStore",
    "end_run",
    "finish_run",
    "new_run_id",
    "open_run_store",
    "spool_dir",
]

RUN_BUSY_TIMEOUT = 0.5
"""How long a flush during a run waits for another process's lock: a failed flush keeps its
batch and retries, and a sampler waiting on a lock does not see the command end."""
END_BUSY_TIMEOUT = 1.0
"""How long the run's last writes wait for a lock before the run goes to the spool."""


@dataclass(slots=True)
class RunStore:
    """Where a run is being stored: the store at ``db_path``, or (when that cannot take it)
    a file in its spool that the next command stores, or memory when no file can be written."""

    db_path: Path
    store: Store | None
    reason: str | None = None
    """Why the run is not in the store at ``db_path`` (database locked, disk full ...)."""
    kind: str = "store"  # store | spool | memory
    messages: list[str] = field(default_factory=list)
    """What the user should hear once (waiting runs stored now, problems)."""

    def fall_back(self, run_id: str, reason: str) -> Store:
        """Take the run to the spool (or to memory) because the store cannot: ``reason``. The
        store given up is the caller's to close."""
        self.reason = reason
        path = pending_file(self.db_path, run_id)
        try:
            store = Store.open(path, busy_timeout=END_BUSY_TIMEOUT)
            write_reason(store, reason)
            self.kind = "spool"
        except (StoreError, sqlite3.Error) as e:  # the home refuses writes too (full, read-only)
            path.unlink(missing_ok=True)
            store = Store.memory()
            self.kind = "memory"
            self.reason = f"{reason}; the spool cannot be written either: {_short(e)}"
        self.store = store
        return store


def _short(e: BaseException) -> str:
    text = str(e)
    return text if len(text) < 200 else text[:200] + "..."


def open_run_store(db_path: Path) -> RunStore:
    """The store a run writes to, never raising: a store that cannot be opened (corrupt,
    read-only, locked, full) leaves the run to the spool (:meth:`RunStore.fall_back`). Runs
    that waited in the spool are stored first."""
    try:
        store = Store.open(db_path, busy_timeout=RUN_BUSY_TIMEOUT)
    except StoreError as e:
        return RunStore(db_path, None, reason=problem_of(e), kind="none")
    target = RunStore(db_path, store)
    try:
        stored, problems = ingest_pending(store, busy_timeout=RUN_BUSY_TIMEOUT)
    except sqlite3.Error as e:
        stored, problems = [], [f"waiting runs not stored: {problem_of(e)}"]
    store.set_busy_timeout(RUN_BUSY_TIMEOUT)
    if stored:
        target.messages.append(f"stored {len(stored)} run(s) that waited: {', '.join(stored)}")
    target.messages.extend(problems)
    return target


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
    retry: bool = True,
) -> RunOutcome:
    """Last flush, then the run's final row: status, exit code, notes, summary. ``ended_at``
    defaults to now."""
    ok = sampler.flush()
    if not ok and retry:  # one more try before giving up on the tail of the data
        time.sleep(0.5)
        ok = sampler.flush()
    run = store.run_by_key(run_key)
    name, tags = _named(run.name, dict(run.tags), app_meta)
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
    link_pending(store, run_key, run.id)  # profiles the job wrote (PyTorch Profiler, py-spy)
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
    name_captures(summary["diagnosis"], store, run_key)  # profiles taken on an anomaly
    store.update_run(run_key, summary=summary)
    if reader is not None:
        if ok:
            reader.remove()
        else:  # keep the spooled steps: a later reader can still store them
            reader.close()
    return RunOutcome(exit_code if exit_code is not None else 0, store.run_by_key(run_key), summary)


def end_run(
    target: RunStore,
    sampler: Sampler,
    run_key: int,
    run_fields: dict[str, Any],
    status: str,
    exit_code: int,
    app_meta: list[dict[str, Any]],
    reader: SpoolReader | None,
    *,
    ended_at: float | None,
    facts: dict[str, Any] | None,
    accounting: AccountingOptions | None,
) -> tuple[RunOutcome, list[str]]:
    """The end of a supervised run, bounded in time: in the store when it takes the last
    writes within :data:`END_BUSY_TIMEOUT`, else the run's final record goes to the spool.
    Returns the outcome and what to tell the user (one line each)."""
    store = target.store
    assert store is not None
    said: list[str] = []
    if target.kind == "store":
        store.set_busy_timeout(END_BUSY_TIMEOUT)
        try:
            if not sampler.flush():
                raise sqlite3.OperationalError(sampler.last_store_error or "write refused")
            return finish_run(
                store, sampler, run_key, status, exit_code, app_meta, reader,
                ended_at=ended_at, facts=facts, accounting=accounting, retry=False,
            ), said  # fmt: skip
        except sqlite3.Error as e:
            reason = problem_of(e)
        main = store
        store = target.fall_back(str(run_fields["run_id"]), reason)
        try:
            key = store.create_run(**run_fields)
            sampler.write_pending_to(store, key)
            name, tags = _named(
                run_fields.get("name"), dict(run_fields.get("tags") or {}), app_meta
            )
            store.update_run(
                key, status=status, exit_code=exit_code,
                ended_at=ended_at if ended_at is not None else time.time(),
                notes=[*sampler.notes, f"stored later: the store refused the run's end ({reason})"],
                name=name, tags=tags, **({"host": facts} if facts is not None else {}),
            )  # fmt: skip
            run = store.run_by_key(key)
        except sqlite3.Error as e:
            target.kind = "memory"
            target.reason = f"{reason}; the spool cannot be written either: {problem_of(e)}"
            run = None
        if target.kind == "memory":  # last resort: a row update is small, and may still fit
            run = _end_row_only(main, run_key, status, exit_code, ended_at, sampler.notes)
            if run is not None:
                target.reason = f"{target.reason}; its end and status are stored, not its last data"
        main.close()
        if reader is not None:
            reader.close()  # the spooled steps stay for `show` to find
        said.append(_waiting_line(target, run_fields["run_id"]))
        return RunOutcome(exit_code, run, None), said
    # The whole run is in the spool file or in memory: end it there, summary and all.
    outcome = finish_run(
        store, sampler, run_key, status, exit_code, app_meta, reader,
        ended_at=ended_at, facts=facts, accounting=accounting,
    )  # fmt: skip
    said.append(_waiting_line(target, run_fields["run_id"]))
    return outcome, said


def _end_row_only(
    store: Store,
    run_key: int,
    status: str,
    exit_code: int,
    ended_at: float | None,
    notes: list[str],
) -> RunRow | None:
    """The run's status, exit code and end in its row, without the data the store refused."""
    try:
        row = store.run_by_key(run_key)
        lost = "the last samples were lost: the store and its spool refused writes"
        store.update_run(
            run_key, status=status, exit_code=exit_code,
            ended_at=ended_at if ended_at is not None else time.time(),
            notes=[*row.notes, *notes, lost],
        )  # fmt: skip
        return store.run_by_key(run_key)
    except sqlite3.Error:
        return None


def _waiting_line(target: RunStore, run_id: object) -> str:
    if target.kind == "spool":
        return (
            f"run {run_id} could not be stored now ({target.reason}); it waits in "
            f"{pending_file(target.db_path, str(run_id))} and the next computewatch command "
            "stores it"
        )
    return f"run {run_id} could not be stored: {target.reason}"


def _named(
    name: str | None, tags: dict[str, str], app_meta: list[dict[str, Any]]
) -> tuple[str | None, dict[str, str]]:
    """The run's name and tags with what ``track()`` inside the command said about them."""
    for meta in app_meta:
        if name is None and meta.get("name"):
            name = str(meta["name"])
        for k, v in (meta.get("tags") or {}).items():
            tags.setdefault(str(k), str(v))
    return name, tags
