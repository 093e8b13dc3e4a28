"""A run's life outside the command: its id and spool directory, and how it ends (last flush,
final row, summary, accounting, diagnosis). Shared by ``computewatch run`` (the supervisor) and
the sampler subprocess of ``track()``."""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path
from typing import Any

import msgspec

from computewatch.accounting.engine import AccountingOptions, accounted, with_accounting
from computewatch.analysis.summary import build_summary, summary_of
from computewatch.analysis.summary_types import RunSummary
from computewatch.diagnosis import diagnosed
from computewatch.profiling.artifacts import link_pending, name_captures
from computewatch.sampling.channel import SpoolReader
from computewatch.sampling.repro import ReproRecord, store_repro
from computewatch.sampling.sampler import Sampler
from computewatch.store import RunRow, StepRow, Store, StoreError
from computewatch.store.reserve import release_reserve
from computewatch.store.spooled import ingest_pending, pending_file, problem_of, write_reason

__all__ = [
    "END_BUSY_TIMEOUT",
    "END_DEADLINE_SECONDS",
    "RUN_BUSY_TIMEOUT",
    "SPOOL_SECONDS",
    "Deadline",
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
batch and retries, and stops waiting as soon as the command ends."""
END_DEADLINE_SECONDS = 1.0
"""The end of a supervised run (its final row, last flush, reproducibility record, summary) is
over this long after the job's end: each write waits only for what is left, and what the store
has not taken by then goes to the spool, stored by the next command."""
SPOOL_SECONDS = 0.2
"""Of :data:`END_DEADLINE_SECONDS`, the part kept for writing the spool file when the store
refuses the run's end: the store's writes wait for a lock until 0.8 s after the job's end."""
END_BUSY_TIMEOUT = END_DEADLINE_SECONDS
"""How long the spool file's writes wait for a lock (nothing else writes it)."""


class RunStore(msgspec.Struct):
    """Where a run is being stored: the store at ``db_path``, or (when that cannot take it)
    a file in its spool that the next command stores, or memory when no file can be written."""

    db_path: Path
    store: Store | None
    reason: str | None = None
    """Why the run is not in the store at ``db_path`` (database locked, disk full ...)."""
    kind: str = "store"  # store | spool | memory
    messages: list[str] = msgspec.field(default_factory=list)
    """What the user should hear once (waiting runs stored now, problems)."""
    reserve: Path | None = None
    """Disk space set aside for the run's end (``store.reserve``), given back before it."""

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
            _remove(path)
            store = Store.memory()
            self.kind = "memory"
            self.reason = f"{reason}; the spool cannot be written either: {_short(e)}"
        self.store = store
        return store

    def drop_spool(self, run_id: str, reason: str, e: BaseException) -> None:
        """The spool file refused the run too (a full disk): remove what it holds of it."""
        if self.store is not None and self.kind == "spool":
            self.store.close()
            _remove(pending_file(self.db_path, run_id))
        self.kind = "memory"
        self.reason = f"{reason}; the spool cannot be written either: {problem_of(e)}"


def _remove(path: Path) -> None:
    """Remove a spool file that could not take the run; a read-only place refuses even that
    (EROFS, whether or not the file is there): nothing to do then."""
    try:
        path.unlink(missing_ok=True)
    except OSError:
        pass


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


class RunOutcome(msgspec.Struct):
    """The command's exit status, and the stored run (None when monitoring itself failed)."""

    exit_code: int
    run: RunRow | None
    summary: RunSummary | None


def new_run_id() -> str:
    """12 hex digits, 48 random bits (what uuid4's first 12 digits were; the uuid module loads
    platform, about 4 ms of every run's start)."""
    return os.urandom(6).hex()


def spool_dir(db_path: Path, run_id: str) -> Path:
    return db_path.parent / "spool" / run_id


class Deadline(msgspec.Struct, frozen=True):
    """When the end of a run must be over, on the monotonic clock (None: no bound)."""

    at: float | None = None

    def left(self) -> float:
        return float("inf") if self.at is None else max(self.at - time.monotonic(), 0.0)

    def bound(self, store: Store) -> None:
        """Let the store's next write wait for another process's lock only for what is left
        of the time: past the deadline, a write is tried once, without waiting (a store that
        is free takes it at once, however long the summary took to compute; a locked one
        refuses it, and the run's end goes to the spool)."""
        if self.at is not None:
            store.set_busy_timeout(self.left())


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
    deadline: Deadline | None = None,
    repro: ReproRecord | None = None,
) -> RunOutcome:
    """The run's final row (status, exit code, end, notes) first, in a transaction of its own,
    then the last flush, the reproducibility record and the summary. ``ended_at`` defaults to
    now.

    With a ``deadline`` (the supervisor's end of a run), each write waits only for what is left
    of it, and a flush the store refuses raises (``sqlite3.Error``: the caller takes what is
    left to the spool); without, a refused flush keeps its spooled steps for a later reader."""
    dl = deadline or Deadline()
    run = store.run_by_key(run_key)
    notes = list(run.notes)
    name, tags = _named(run.name, dict(run.tags), app_meta)
    ended = ended_at if ended_at is not None else time.time()
    # The status before the bulk of the data: a store that takes a small row but not the
    # batch (a full disk) still knows how the job ended.
    dl.bound(store)
    store.update_run(
        run_key,
        status=status,
        exit_code=exit_code,
        ended_at=ended,
        notes=notes + sampler.notes,
        name=name,
        tags=tags,
        **({"host": facts} if facts is not None else {}),
    )
    dl.bound(store)
    ok = sampler.flush()
    if not ok and deadline is not None:
        raise sqlite3.OperationalError(sampler.last_store_error or "write refused")
    if not ok and retry:  # one more try before giving up on the tail of the data
        time.sleep(0.5)
        ok = sampler.flush()
    if repro is not None:
        dl.bound(store)
        store_repro(store, run_key, repro)
    run = store.run_by_key(run_key)
    dl.bound(store)
    link_pending(store, run_key, run.id)  # profiles the job wrote (PyTorch Profiler, py-spy)
    # The sampler's aggregates hold what the store accepted: no sample is read back. Without
    # them (an internal error, a source that repeated a series within a tick), the summary is
    # rebuilt from the store.
    agg = sampler.aggregates
    if agg is not None and agg.complete:
        summary = summary_of(store, run, agg)
    else:
        summary = build_summary(store, run)
    try:  # read once for the accounting's FLOPs and the diagnosis (a long run has many)
        steps: list[StepRow] | None = store.steps(run_key)
    except sqlite3.Error:
        steps = None  # each reads them itself, and says so if it cannot
    summary = with_accounting(
        summary, accounted(store, run, summary, accounting or AccountingOptions(), steps)
    )
    summary["diagnosis"] = diagnosed(store, run, summary, accounting, steps)  # never raises
    name_captures(summary["diagnosis"], store, run_key)  # profiles taken on an anomaly
    dl.bound(store)
    store.update_run(run_key, summary=summary, notes=notes + sampler.notes)
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
    exit_code: int | None,
    app_meta: list[dict[str, Any]],
    reader: SpoolReader | None,
    *,
    ended_at: float | None,
    facts: dict[str, Any] | None,
    accounting: AccountingOptions | None,
    job_ended: float | None = None,
    repro: ReproRecord | None = None,
) -> tuple[RunOutcome, list[str]]:
    """The end of a supervised or tracked run (``run``, ``track()``), bounded in time: in the
    store when it takes every last write within :data:`END_DEADLINE_SECONDS` of ``job_ended``
    (the monotonic time the job ended; default now), else what it did not take goes to the
    spool, stored by the next command. The run's reserve (:mod:`computewatch.store.reserve`) is
    given back first. Returns the outcome and what to tell the user (one line each)."""
    store = target.store
    assert store is not None
    release_reserve(target.reserve)
    target.reserve = None
    said: list[str] = []
    if target.kind == "store":
        start = job_ended if job_ended is not None else time.monotonic()
        deadline = Deadline(start + END_DEADLINE_SECONDS - SPOOL_SECONDS)
        try:
            return finish_run(
                store, sampler, run_key, status, exit_code, app_meta, reader,
                ended_at=ended_at, facts=facts, accounting=accounting, retry=False,
                deadline=deadline, repro=repro,
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
            if repro is not None:
                store_repro(store, key, repro)
            run = store.run_by_key(key)
        except sqlite3.Error as e:
            target.drop_spool(str(run_fields["run_id"]), reason, e)
            run = None
        if target.kind == "memory":  # last resort: a row update is small, and may still fit
            run = _end_row_only(main, run_key, status, exit_code, ended_at, sampler.notes)
            if run is not None:
                target.reason = f"{target.reason}; its end and status are stored, not its last data"
        main.close()
        if reader is not None:
            reader.close()  # the spooled steps stay for `show` to find
        said.append(_waiting_line(target, run_fields["run_id"]))
        return RunOutcome(exit_code if exit_code is not None else 0, run, None), said
    # The whole run is in the spool file or in memory: end it there, summary and all.
    outcome = finish_run(
        store, sampler, run_key, status, exit_code, app_meta, reader,
        ended_at=ended_at, facts=facts, accounting=accounting, repro=repro,
    )  # fmt: skip
    said.append(_waiting_line(target, run_fields["run_id"]))
    return outcome, said


def _end_row_only(
    store: Store,
    run_key: int,
    status: str,
    exit_code: int | None,
    ended_at: float | None,
    notes: list[str],
) -> RunRow | None:
    """The run's status, exit code and end in its row, without the data the store refused;
    None when the row does not hold them (the store refused even that)."""
    try:
        store.set_busy_timeout(0.0)  # past the end's deadline: one try
        row = store.run_by_key(run_key)
        lost = "the last samples were lost: the store and its spool refused writes"
        try:
            store.update_run(
                run_key, status=status, exit_code=exit_code,
                ended_at=ended_at if ended_at is not None else time.time(),
                notes=[*row.notes, *[n for n in notes if n not in row.notes], lost],
            )  # fmt: skip
        except sqlite3.Error:
            pass  # the end row written first may hold them already
        row = store.run_by_key(run_key)
    except sqlite3.Error:
        return None
    return row if row.status == status and row.exit_code == exit_code else None


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
