"""Runs that wait in the spool to be stored: a store that was locked, full or corrupt when a run
ended gets that run later, exactly once.

A waiting run is a small SQLite file, ``<db dir>/spool/<run id>.run.sqlite``, with the store's own
schema: the run's row (its final status, exit code, end time, notes, the summary when it was
computed) and the data the store had not accepted. Ingestion copies it into the store in one
transaction, keyed by the run's id: a run already there is completed (its row updated, rows it
lacks added; a step, phase or request already stored, at the same process and time, is not added
again), so ingesting a file twice (a crash between the commit and the file's removal, two
readers at once) stores it once.
"""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import msgspec

from computewatch.store.db import (
    BUSY_TIMEOUT_SECONDS,
    INTERRUPTED_NOTE,
    RUNNING,
    Store,
    StoreError,
    rollback,
)

__all__ = [
    "PendingRun",
    "ingest_file",
    "ingest_pending",
    "open_store",
    "pending_file",
    "pending_runs",
    "problem_of",
    "waiting_line",
    "write_reason",
]

SUFFIX = ".run.sqlite"


class PendingRun(msgspec.Struct, frozen=True):
    """A run waiting in the spool: its id, why it waits, and its file."""

    run_id: str
    reason: str
    path: Path


def spool_root(db_path: Path) -> Path:
    return db_path.parent / "spool"


def pending_file(db_path: Path, run_id: str) -> Path:
    """Where the run ``run_id`` waits when the store at ``db_path`` cannot take it."""
    return spool_root(db_path) / f"{run_id}{SUFFIX}"


def write_reason(store: Store, reason: str) -> None:
    """Record in a waiting run's file why it waits (``runs`` says it)."""
    c = store.conn
    c.execute("CREATE TABLE IF NOT EXISTS waiting (reason TEXT NOT NULL)")
    c.execute("DELETE FROM waiting")
    c.execute("INSERT INTO waiting (reason) VALUES (?)", (reason,))


def pending_runs(db_path: Path) -> list[PendingRun]:
    """The runs waiting in the spool of the store at ``db_path``, oldest file first."""
    root = spool_root(db_path)
    try:
        names = [n for n in os.listdir(root) if n.endswith(SUFFIX)]
    except OSError:  # no spool yet (the usual case), or one we cannot list
        return []
    out: list[PendingRun] = []
    for n in names:
        path = root / n
        reason = "waiting"
        try:
            uri = "file:" + str(path) + "?mode=ro"
            conn = sqlite3.connect(uri, uri=True, timeout=1.0)
            try:
                row = conn.execute("SELECT reason FROM waiting LIMIT 1").fetchone()
                if row:
                    reason = str(row[0])
            finally:
                conn.close()
        except sqlite3.Error:
            pass
        out.append(PendingRun(n[: -len(SUFFIX)], reason, path))
    out.sort(key=lambda r: _mtime(r.path))
    return out


def _mtime(p: Path) -> float:
    try:
        return p.stat().st_mtime
    except OSError:
        return 0.0


_FINAL_COLUMNS = (
    "status", "exit_code", "ended_at", "data_until", "heartbeat_at", "name", "tags", "host",
)  # fmt: skip
# Rows without a key of their own: one already stored at the same process and time is the same.
_NATURAL = {"steps": ("pid", "mono"), "phases": ("pid", "name", "start"),
            "requests": ("pid", "name", "start")}  # fmt: skip
_KEYED = ("series", "ticks", "samples", "processes", "writers")


def ingest_file(store: Store, path: Path) -> tuple[str, int, bool] | None:
    """Store the waiting run in ``path``; returns (run id, its key in ``store``, whether it has
    a summary), or None for a file holding no run. The file is removed once stored.

    Raises :class:`StoreError` when the file cannot be read and ``sqlite3.Error`` when the
    store refuses the write (locked, full): the file then stays for a later try."""
    try:  # brings a file written by an older computewatch up to this schema
        Store.open(path, create=False, busy_timeout=1.0).close()
    except StoreError as e:
        raise StoreError(f"the waiting run {path.name} cannot be read: {e}") from None
    c = store.conn
    c.execute("ATTACH DATABASE ? AS sp", (str(path),))
    try:
        c.execute("BEGIN IMMEDIATE")
        try:
            result = _copy(store)
            c.execute("COMMIT")
        except BaseException:
            rollback(c)
            raise
    finally:
        c.execute("DETACH DATABASE sp")
    path.unlink(missing_ok=True)
    return result


def _columns(c: sqlite3.Connection, table: str) -> list[str]:
    return [r[1] for r in c.execute(f"PRAGMA main.table_info({table})")]


def _copy(store: Store) -> tuple[str, int, bool] | None:
    c = store.conn
    row = c.execute("SELECT key, id, status, notes, summary FROM sp.runs LIMIT 1").fetchone()
    if row is None:
        return None
    sp_key, run_id, sp_status, sp_notes, sp_summary = row
    found = c.execute("SELECT key, notes FROM main.runs WHERE id=?", (run_id,)).fetchone()
    cols = [x for x in _columns(c, "runs") if x != "key"]
    if found is None:
        key = c.execute(
            f"INSERT INTO main.runs ({', '.join(cols)}) SELECT {', '.join(cols)} FROM sp.runs "
            "WHERE key=? RETURNING key",
            (sp_key,),
        ).fetchone()[0]
    else:
        key = found[0]
        if sp_status != RUNNING:  # the run's end, as its supervisor knew it
            # marked interrupted meanwhile (its monitor gone): it was not, it finished
            notes = [n for n in json.loads(found[1]) if n != INTERRUPTED_NOTE]
            notes += [n for n in json.loads(sp_notes) if n not in notes]
            sets = ", ".join(f"{x}=(SELECT {x} FROM sp.runs WHERE key=?)" for x in _FINAL_COLUMNS)
            c.execute(
                f"UPDATE main.runs SET {sets}, notes=?, "
                "summary=coalesce((SELECT summary FROM sp.runs WHERE key=?), summary) WHERE key=?",
                (*([sp_key] * len(_FINAL_COLUMNS)), json.dumps(notes), sp_key, key),
            )
    for table in _KEYED:
        tcols = [x for x in _columns(c, table) if x != "run_key"]
        c.execute(
            f"INSERT OR IGNORE INTO main.{table} (run_key, {', '.join(tcols)}) "
            f"SELECT ?, {', '.join(tcols)} FROM sp.{table} WHERE run_key=?",
            (key, sp_key),
        )
    for table, natural in _NATURAL.items():
        tcols = [x for x in _columns(c, table) if x != "run_key"]
        same = " AND ".join(f"m.{x}=s.{x}" for x in natural)
        c.execute(
            f"INSERT INTO main.{table} (run_key, {', '.join(tcols)}) "
            f"SELECT ?, {', '.join('s.' + x for x in tcols)} FROM sp.{table} s "
            f"WHERE s.run_key=? AND NOT EXISTS (SELECT 1 FROM main.{table} m "
            f"WHERE m.run_key=? AND {same})",
            (key, sp_key, key),
        )
    c.execute(  # what the run recorded beside its samples: the spooled copy is the newer
        "INSERT OR REPLACE INTO main.run_meta (run_key, kind, value) "
        "SELECT ?, kind, value FROM sp.run_meta WHERE run_key=?",
        (key, sp_key),
    )
    has_summary = c.execute("SELECT summary IS NOT NULL FROM main.runs WHERE key=?", (key,))
    return str(run_id), int(key), bool(has_summary.fetchone()[0]) or sp_summary is not None


def ingest_pending(store: Store, *, busy_timeout: float = 1.0) -> tuple[list[str], list[str]]:
    """Store every run waiting in the spool of ``store``: (ids stored, problems). A store that
    stays locked past ``busy_timeout`` keeps them waiting, said in the problems."""
    if store.readonly:
        return [], []
    waiting = pending_runs(store.path)
    if not waiting:
        return [], []
    stored: list[str] = []
    problems: list[str] = []
    store.set_busy_timeout(busy_timeout)
    try:
        for w in waiting:
            try:
                done = ingest_file(store, w.path)
            except StoreError as e:
                problems.append(str(e))
                continue
            except sqlite3.Error as e:
                problems.append(f"run {w.run_id} still waits to be stored ({problem_of(e)})")
                continue
            if done is not None:
                stored.append(done[0])
    finally:
        store.set_busy_timeout(BUSY_TIMEOUT_SECONDS)
    return stored, problems


def problem_of(e: BaseException) -> str:
    """A store failure in a few words: database locked, disk full, read-only, corrupt."""
    text = str(e).lower()
    if "locked" in text or "busy" in text:
        return "database locked"
    if "full" in text or "no space" in text:
        return "disk full"
    if "readonly" in text or "read-only" in text or "permission" in text:
        return "read-only"
    if "not a database" in text or "malformed" in text or "corrupt" in text:
        return "corrupt database"
    return str(e)


def open_store(path: Path) -> Store:
    """An existing store for the readers (``runs``, ``show``, ``report``, ``export``): for
    writing when it can be written (runs waiting in the spool are stored first), else
    read-only (a read-only mount, a file without write permission), never migrated or
    changed then. What could not be done is in ``store.notices``."""
    writable = os.access(path, os.W_OK) and os.access(path.parent, os.W_OK)
    if writable:
        try:
            store = Store.open(path, create=False)
        except StoreError as e:
            if problem_of(e) != "read-only":
                raise
        else:
            _, problems = ingest_pending(store)
            store.notices.extend(problems)
            return store
    store = Store.open_readonly(path)
    waiting = pending_runs(path)
    if waiting:
        store.notices.append(
            f"{len(waiting)} run(s) wait in the spool and cannot be stored in a read-only store"
        )
    return store


def waiting_line(path: Path) -> str | None:
    """``N run(s) waiting to be stored: id (reason), ...``, or None when none waits."""
    waiting = pending_runs(path)
    if not waiting:
        return None
    shown = ", ".join(f"{w.run_id} ({w.reason})" for w in waiting[:5])
    more = f", and {len(waiting) - 5} more" if len(waiting) > 5 else ""
    return f"{len(waiting)} run(s) waiting to be stored: {shown}{more}"
