"""The embedded store: SQLite in WAL mode, written in batches, read by every reader."""

from __future__ import annotations

import functools
import json
import os
import sqlite3
import time
import urllib.parse
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import msgspec

from computewatch import jsonout
from computewatch.errors import ComputewatchError
from computewatch.escape import clean_text
from computewatch.paths import create_private_file, make_private_dirs
from computewatch.readings import Kind, Labels
from computewatch.records import PhaseRecord, RequestRecord, StepRecord
from computewatch.redact import configured_names, redact_argv, redact_mapping, redact_text
from computewatch.store.reserve import release_reserve, reserve_path
from computewatch.store.schema import MIGRATIONS, SCHEMA_VERSION

BUSY_TIMEOUT_SECONDS = 60.0
BUSY_SLICE_SECONDS = 0.05
"""The longest one wait for a lock lasts when the caller may give up (``write_batch``)."""

RUNNING = "running"
COMPLETED = "completed"
FAILED = "failed"
INTERRUPTED = "interrupted"


INTERRUPTED_NOTE = (
    "the monitor stopped without finishing the run (killed or crashed); "
    "data ends at the last stored sample"
)
"""The note :meth:`Store.reconcile` gives a run whose monitor is gone; dropped when the run's
own end arrives later from the spool (computewatch.store.spooled)."""


class StoreError(ComputewatchError):
    """A store problem a user can act on (corrupt file, newer schema, unknown run)."""


class RunRow(msgspec.Struct, frozen=True):
    key: int
    id: str
    name: str | None
    tags: dict[str, str]
    command: list[str]
    cwd: str | None
    mode: str
    status: str
    exit_code: int | None
    started_at: float
    ended_at: float | None
    interval_seconds: float
    host: dict[str, Any]
    supervisor_host: str | None
    supervisor_pid: int | None
    heartbeat_at: float | None
    data_until: float | None
    notes: list[str]
    summary: dict[str, Any] | None
    samples_deleted_at: float | None


class SeriesRow(msgspec.Struct, frozen=True):
    idx: int
    name: str
    labels: dict[str, str]
    kind: Kind


class StepRow(StepRecord, frozen=True, kw_only=True):
    """A stored step: the record user code spooled (``computewatch.records.StepRecord``, the one
    step type) with the wall-clock time the sampler gave it (by keyword: ``wall=``)."""

    wall: float


PhaseRow = PhaseRecord
"""A stored phase: the record user code spooled, as it is (``computewatch.records``)."""

RequestRow = RequestRecord
"""A stored request: the record user code spooled, as it is (``computewatch.records``)."""


_OWN_TABLES = frozenset(
    {
        "runs", "series", "ticks", "samples", "steps", "writers", "processes", "phases",
        "requests", "run_meta", "uploads",
    }
)  # fmt: skip
_RUN_DATA_TABLES = (
    "samples", "ticks", "steps", "series", "processes", "writers", "phases", "requests",
)  # fmt: skip

_RUN_COLUMNS = (
    "key, id, name, tags, command, cwd, mode, status, exit_code, started_at, ended_at, "
    "interval_seconds, host, supervisor_host, supervisor_pid, heartbeat_at, data_until, notes, "
    "summary, samples_deleted_at"
)


def _safe_tags(tags: Mapping[str, object]) -> dict[str, str]:
    """Tags as stored: valid UTF-8 (undecodable bytes as \\xNN, computewatch.escape), the value of
    every secret-named key replaced and URL passwords removed (computewatch.redact)."""
    clean = {clean_text(str(k)): clean_text(str(v)) for k, v in tags.items()}
    return redact_mapping(clean, configured_names())


@functools.lru_cache(maxsize=4096)
def _safe_name(name: str, extra: tuple[str, ...]) -> str:
    """A phase's or request's name as stored: valid UTF-8, secrets redacted as in a command
    line (``fetch --token X``; ``extra``: the configured names). Names repeat step after step:
    each is worked out once."""
    return redact_text(clean_text(str(name)), extra)


def _safe_meta(meta: Mapping[str, Any]) -> dict[str, Any]:
    """A writer's metadata as stored: the tags ``track()`` was given, redacted."""
    tags = meta.get("tags")
    if isinstance(tags, Mapping):
        return {**meta, "tags": _safe_tags(tags)}
    return dict(meta)


def _run_row(r: Sequence[Any]) -> RunRow:
    return RunRow(
        key=r[0],
        id=r[1],
        name=r[2],
        tags=json.loads(r[3]),
        command=json.loads(r[4]),
        cwd=r[5],
        mode=r[6],
        status=r[7],
        exit_code=r[8],
        started_at=r[9],
        ended_at=r[10],
        interval_seconds=r[11],
        host=json.loads(r[12]),
        supervisor_host=r[13],
        supervisor_pid=r[14],
        heartbeat_at=r[15],
        data_until=r[16],
        notes=json.loads(r[17]),
        summary=json.loads(r[18]) if r[18] else None,
        samples_deleted_at=r[19],
    )


def _hostname() -> str:
    """``socket.gethostname()`` without importing socket where ``os.uname`` exists: both are
    uname(2)'s nodename on Linux (glibc's gethostname calls uname)."""
    try:
        return os.uname().nodename
    except AttributeError:  # Windows: no os.uname
        import socket  # only where os.uname is missing

        return socket.gethostname()


def process_start_ticks(pid: int, procfs_root: str = "/proc") -> int | None:
    """A live process's start time in clock ticks since boot: with the PID, it names one
    process across PID reuse. None for a process that is gone or a zombie (dead, not reaped)."""
    try:
        with open(f"{procfs_root}/{pid}/stat", "rb") as f:
            raw = f.read()
        fields = raw[raw.rindex(b")") + 2 :].split()
        if fields[0] in (b"Z", b"X"):
            return None
        return int(fields[19])
    except (OSError, ValueError, IndexError):
        return None


class Store:
    """One SQLite database file. Open with :meth:`open`; not shared between threads."""

    def __init__(self, conn: sqlite3.Connection, path: Path) -> None:
        self.conn = conn
        self.path = path
        self.readonly = False
        """Opened with :meth:`open_readonly`: nothing is written."""
        self.notices: list[str] = []
        """What a read-only store could not do (mark a run interrupted), for the reader to say."""
        self.busy_timeout = BUSY_TIMEOUT_SECONDS
        """How long a write waits for another process's lock (:meth:`set_busy_timeout`)."""

    # -- opening ------------------------------------------------------------------------------
    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        create: bool = True,
        busy_timeout: float = BUSY_TIMEOUT_SECONDS,
    ) -> Store:
        """Open (and create or migrate) the database at ``path``.

        Raises :class:`StoreError` with a readable reason for a file that is not a computewatch
        database, a schema newer than this version knows, or a directory that cannot be made.
        ``busy_timeout`` bounds each wait for another process's write lock (the supervisor
        passes a short one: the job's exit never waits on the store).
        """
        p = Path(path)
        if not create and not p.exists():
            raise StoreError(f"no computewatch database at {p}")
        try:
            make_private_dirs(p.parent)
            create_private_file(p)  # 0600 before SQLite writes: -wal and -shm take its mode
        except OSError as e:
            raise StoreError(f"cannot create {p.parent}: {e.strerror or e}") from None
        if p.is_dir():
            raise StoreError(f"{p} is a directory, not a database file")
        try:
            conn = sqlite3.connect(
                p, timeout=busy_timeout, isolation_level=None, check_same_thread=False
            )
        except sqlite3.Error as e:
            raise StoreError(f"cannot open {p}: {e}") from None
        store = cls(conn, p)
        store.busy_timeout = busy_timeout
        try:
            store._setup()
        except sqlite3.OperationalError as e:  # disk full, read-only, locked too long: the place
            conn.close()
            raise StoreError(f"cannot use the database {p}: {e}") from None
        except sqlite3.DatabaseError as e:  # the file itself: not a database, corrupt
            conn.close()
            raise StoreError(f"{p} is not a usable computewatch database: {e}") from None
        except BaseException:  # a newer schema (StoreError), Ctrl-C: do not leak the connection
            conn.close()
            raise
        return store

    @classmethod
    def open_readonly(cls, path: str | os.PathLike[str]) -> Store:
        """Open an existing database for reading only (a read-only mount, a file without write
        permission): no migration, no marking of interrupted runs, nothing written.

        A WAL database needs its -shm file writable, or created: in a directory that refuses
        that, the file is opened ``immutable`` (SQLite's URI parameter: no locks; fine for a
        file nobody can write here)."""
        p = Path(path)
        if not p.is_file():
            raise StoreError(f"no computewatch database at {p}")
        uri = "file:" + urllib.parse.quote(str(p.resolve())) + "?mode=ro"
        last: sqlite3.Error | None = None
        for params in ("", "&immutable=1"):
            try:
                conn = sqlite3.connect(
                    uri + params, uri=True, timeout=BUSY_TIMEOUT_SECONDS,
                    isolation_level=None, check_same_thread=False,
                )  # fmt: skip
            except sqlite3.Error as e:
                last = e
                continue
            store = cls(conn, p)
            store.readonly = True
            try:
                store._check_readable()
            except sqlite3.OperationalError as e:  # -shm cannot be made: try immutable
                conn.close()
                last = e
                continue
            except sqlite3.DatabaseError as e:
                conn.close()
                raise StoreError(f"{p} is not a usable computewatch database: {e}") from None
            except BaseException:
                conn.close()
                raise
            return store
        raise StoreError(f"cannot read the database {p}: {last}")

    @classmethod
    def memory(cls) -> Store:
        """An empty store in memory: where a run samples when no file can take it."""
        conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
        store = cls(conn, Path(":memory:"))
        store._migrate()
        return store

    def set_busy_timeout(self, seconds: float) -> None:
        """How long a write waits for another process's lock before it fails."""
        self.busy_timeout = max(seconds, 0.0)
        self._busy_pragma(self.busy_timeout)

    def _busy_pragma(self, seconds: float) -> None:
        self.conn.execute(f"PRAGMA busy_timeout={max(int(seconds * 1000), 0)}")

    def _begin(self, give_up: Callable[[], bool] | None) -> None:
        """``BEGIN IMMEDIATE``: take the write lock, waiting up to :attr:`busy_timeout` for
        another process's. With ``give_up``, the wait is cut in slices of
        :data:`BUSY_SLICE_SECONDS` and abandoned as soon as ``give_up()`` says so (SQLite's own
        wait cannot be interrupted: ``sqlite3_interrupt`` does not reach its busy handler)."""
        c = self.conn
        if give_up is None:
            c.execute("BEGIN IMMEDIATE")
            return
        end = time.monotonic() + self.busy_timeout
        self._busy_pragma(min(BUSY_SLICE_SECONDS, self.busy_timeout))
        try:
            while True:
                try:
                    c.execute("BEGIN IMMEDIATE")
                    return
                except sqlite3.OperationalError as e:
                    if not _is_busy(e) or give_up() or time.monotonic() >= end:
                        raise
        finally:
            self._busy_pragma(self.busy_timeout)

    def _check_readable(self) -> None:
        c = self.conn
        version = c.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"{self.path} has schema version {version}, newer than this computewatch "
                f"supports ({SCHEMA_VERSION}); upgrade computewatch"
            )
        if version < SCHEMA_VERSION:
            raise StoreError(
                f"{self.path} has an older schema ({version}) and is read-only here: it "
                "cannot be migrated; open it once where it can be written"
            )
        c.execute("SELECT count(*) FROM runs").fetchone()

    def _setup(self) -> None:
        c = self.conn
        c.execute("PRAGMA foreign_keys=ON")
        version = c.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"{self.path} has schema version {version}, newer than this computewatch "
                f"supports ({SCHEMA_VERSION}); upgrade computewatch"
            )
        if version == 0:
            names = {r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            # Our own tables may appear here while another process migrates the same new file.
            names -= _OWN_TABLES
            if names:  # a SQLite file of someone else's: never convert or extend it
                raise StoreError(
                    f"{self.path} is an SQLite database of another program "
                    f"(tables: {', '.join(sorted(names)[:5])}), not a computewatch database"
                )
        if c.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
            c.execute("PRAGMA journal_mode=WAL")
        # NORMAL in WAL mode: a commit is durable against a process crash (kill -9), only an OS
        # crash can lose the last transactions (SQLite docs, "WAL mode" / synchronous).
        c.execute("PRAGMA synchronous=NORMAL")
        if version < SCHEMA_VERSION:
            self._migrate()

    def _migrate(self) -> None:
        c = self.conn
        c.execute("BEGIN IMMEDIATE")
        try:
            version = c.execute("PRAGMA user_version").fetchone()[0]
            for i in range(version, SCHEMA_VERSION):
                for stmt in _split_sql(MIGRATIONS[i]):
                    c.execute(stmt)
                c.execute(f"PRAGMA user_version={i + 1}")
            c.execute("COMMIT")
        except BaseException:
            rollback(c)
            raise

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writing ------------------------------------------------------------------------------
    def create_run(
        self,
        *,
        run_id: str,
        name: str | None,
        tags: dict[str, str],
        command: list[str],
        cwd: str | None,
        mode: str,
        started_at: float,
        interval_seconds: float,
        host: dict[str, Any],
    ) -> int:
        """Insert a run in state ``running`` owned by this process; returns its integer key."""
        # Only valid UTF-8 is stored: undecodable bytes (argv, cwd) as \xNN (computewatch.escape)
        name = None if name is None else clean_text(name)
        command = [clean_text(a) for a in command]
        cwd = None if cwd is None else clean_text(cwd)
        pid = os.getpid()
        cur = self.conn.execute(
            "INSERT INTO runs (id, name, tags, command, cwd, mode, status, started_at, "
            "interval_seconds, host, supervisor_host, supervisor_pid, supervisor_start, "
            "heartbeat_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?) RETURNING key",
            (
                run_id,
                name,
                json.dumps(_safe_tags(tags), sort_keys=True),
                json.dumps(redact_argv(command, configured_names())),
                cwd,
                mode,
                RUNNING,
                started_at,
                interval_seconds,
                json.dumps(host, sort_keys=True),
                _hostname(),
                pid,
                process_start_ticks(pid),
                started_at,
            ),
        )
        key: int = cur.fetchone()[0]
        return key

    def write_batch(
        self,
        run_key: int,
        *,
        series: Iterable[tuple[int, str, Labels, Kind]] = (),
        ticks: Iterable[tuple[int, float, float]] = (),
        samples: Sequence[tuple[int, int, int, float]] = (),
        steps: Iterable[tuple[Any, ...]] = (),
        phases: Iterable[tuple[int, str, float, float, float | None]] = (),
        requests: Iterable[tuple[int, str, float, float, float | None, float | None, bool]] = (),
        processes: Iterable[tuple[int, int, str, list[str], float]] = (),
        writers: Iterable[tuple[int, float, dict[str, Any]]] = (),
        heartbeat_at: float | None = None,
        data_until: float | None = None,
        give_up: Callable[[], bool] | None = None,
    ) -> None:
        """Write one batch in one transaction.

        ``samples`` rows are ``(run_key, seq, series idx, value)``, built by the caller so that
        the hot path hands them to SQLite without copying. ``steps`` rows are ``(pid, mono,
        wall, samples, tokens[, flops])``. ``give_up``: stop waiting for another process's
        lock as soon as it returns true (the sampler's flush when the command has ended)."""
        c = self.conn
        names = configured_names()
        phases = list(phases)
        requests = list(requests)
        # each distinct phase or request name redacted once per batch (they repeat every step)
        safe = {n: _safe_name(n, names) for n in {x[1] for x in phases} | {x[1] for x in requests}}
        self._begin(give_up)
        try:
            c.executemany(
                "INSERT OR IGNORE INTO series (run_key, idx, name, labels, kind) "
                "VALUES (?,?,?,?,?)",
                [(run_key, i, n, json.dumps(dict(lb)), int(k)) for i, n, lb, k in series],
            )
            c.executemany(
                "INSERT OR REPLACE INTO ticks (run_key, seq, mono, wall) VALUES (?,?,?,?)",
                [(run_key, *t) for t in ticks],
            )
            c.executemany(
                "INSERT OR REPLACE INTO samples (run_key, seq, series, value) VALUES (?,?,?,?)",
                samples,
            )
            c.executemany(
                "INSERT INTO steps (run_key, pid, mono, wall, samples, tokens, flops) "
                "VALUES (?,?,?,?,?,?,?)",
                [(run_key, *s) if len(s) == 6 else (run_key, *s, None) for s in steps],
            )
            c.executemany(
                "INSERT INTO phases (run_key, pid, name, start, end, accel_seconds) "
                "VALUES (?,?,?,?,?,?)",
                [(run_key, pid, safe[n], a, b, acc) for pid, n, a, b, acc in phases],
            )
            c.executemany(
                "INSERT INTO requests (run_key, pid, name, start, end, tokens_in, tokens_out, ok) "
                "VALUES (?,?,?,?,?,?,?,?)",
                [
                    (run_key, p, safe[n], a, b, ti, to, int(ok))
                    for p, n, a, b, ti, to, ok in requests
                ],
            )
            c.executemany(
                "INSERT OR IGNORE INTO processes (run_key, pid, ppid, name, cmdline, first_seen) "
                "VALUES (?,?,?,?,?,?)",
                [
                    (run_key, pid, pp, nm, json.dumps(redact_argv(cl, configured_names())), t)
                    for pid, pp, nm, cl, t in processes
                ],
            )
            c.executemany(
                "INSERT OR REPLACE INTO writers (run_key, pid, started_mono, meta) "
                "VALUES (?,?,?,?)",
                [
                    (run_key, pid, t, json.dumps(_safe_meta(m), sort_keys=True))
                    for pid, t, m in writers
                ],
            )
            if heartbeat_at is not None or data_until is not None:
                c.execute(
                    "UPDATE runs SET heartbeat_at=coalesce(?, heartbeat_at), "
                    "data_until=coalesce(?, data_until) WHERE key=?",
                    (heartbeat_at, data_until, run_key),
                )
            c.execute("COMMIT")
        except BaseException:
            rollback(c)
            raise

    def update_run(self, run_key: int, **fields: Any) -> None:
        """Set columns of a run; dicts and lists are stored as JSON. Tags are redacted (secret
        names' values replaced) and the name and tags made valid UTF-8, as at :meth:`create_run`."""
        if fields.get("tags") is not None:
            fields["tags"] = _safe_tags(fields["tags"])
        if fields.get("name") is not None:
            fields["name"] = clean_text(str(fields["name"]))
        allowed = {
            "name", "tags", "status", "exit_code", "ended_at", "data_until", "notes", "summary",
            "heartbeat_at", "host", "samples_deleted_at",
        }  # fmt: skip
        bad = set(fields) - allowed
        if bad:
            raise ValueError(f"cannot update run columns {sorted(bad)}")
        cols = ", ".join(f"{k}=?" for k in fields)
        vals = [
            jsonout.dumps(v, sort_keys=True) if isinstance(v, dict | list) else v
            for v in fields.values()
        ]
        self.conn.execute(f"UPDATE runs SET {cols} WHERE key=?", (*vals, run_key))

    def set_meta(self, run_key: int, kind: str, value: object) -> None:
        """Record one document of ``kind`` for a run (its configuration, environment, governance
        declaration, artifacts, ...), replacing the one before; ``value`` is stored as JSON."""
        self.conn.execute(
            "INSERT OR REPLACE INTO run_meta (run_key, kind, value) VALUES (?,?,?)",
            (run_key, kind, jsonout.dumps(value, sort_keys=True)),
        )

    def mark_uploaded(self, run_key: int, server: str, *, seq: int, final: bool) -> None:
        """Remember that ``server`` holds the run up to upload sequence number ``seq`` (and, when
        ``final``, its finished state)."""
        self.conn.execute(
            "INSERT OR REPLACE INTO uploads (run_key, server, seq, final, uploaded_at) "
            "VALUES (?,?,?,?,?)",
            (run_key, server, seq, int(final), time.time()),
        )

    # -- reading ------------------------------------------------------------------------------
    def meta(self, run_key: int) -> dict[str, Any]:
        """Every document recorded with :meth:`set_meta` for a run, by kind."""
        rows = self.conn.execute("SELECT kind, value FROM run_meta WHERE run_key=?", (run_key,))
        return {kind: json.loads(value) for kind, value in rows}

    def uploaded(self, server: str) -> dict[int, tuple[int, bool]]:
        """Run key → (last uploaded sequence number, whether the finished run was uploaded),
        for ``server``."""
        rows = self.conn.execute(
            "SELECT run_key, seq, final FROM uploads WHERE server=?", (server,)
        )
        return {k: (int(seq), bool(final)) for k, seq, final in rows}

    def run_by_key(self, key: int) -> RunRow:
        r = self.conn.execute(f"SELECT {_RUN_COLUMNS} FROM runs WHERE key=?", (key,)).fetchone()
        if r is None:
            raise StoreError(f"no run with key {key}")
        return _run_row(r)

    def find_run(self, ref: str) -> RunRow:
        """A run by id, name (newest of that name), unique id prefix or ``last``; an exact id
        or name wins over a prefix."""
        self.reconcile()
        c = self.conn
        if ref == "last":
            r = c.execute(
                f"SELECT {_RUN_COLUMNS} FROM runs ORDER BY started_at DESC, key DESC LIMIT 1"
            ).fetchone()
            if r is None:
                raise StoreError(f"no runs stored yet in {self.path}")
            return _run_row(r)
        r = c.execute(f"SELECT {_RUN_COLUMNS} FROM runs WHERE id=?", (ref,)).fetchone()
        if r is not None:
            return _run_row(r)
        r = c.execute(
            f"SELECT {_RUN_COLUMNS} FROM runs WHERE name=? ORDER BY started_at DESC, key DESC "
            "LIMIT 1",
            (ref,),
        ).fetchone()
        if r is not None:
            return _run_row(r)
        if ref and all(ch in "0123456789abcdef" for ch in ref):
            rows = c.execute(
                f"SELECT {_RUN_COLUMNS} FROM runs WHERE id LIKE ? ORDER BY id LIMIT 4",
                (ref + "%",),
            ).fetchall()
            if len(rows) == 1:
                return _run_row(rows[0])
            if len(rows) > 1:
                ids = ", ".join(x[1] for x in rows[:3]) + (", ..." if len(rows) > 3 else "")
                raise StoreError(f"run id prefix {ref!r} is ambiguous: {ids}")
        raise StoreError(f"no run matches '{ref}' (an id, id prefix, name or 'last')")

    def list_runs(
        self, *, limit: int | None = None, tags: dict[str, str] | None = None
    ) -> list[RunRow]:
        """Runs newest first, optionally only those carrying every given tag."""
        self.reconcile()
        rows = [
            _run_row(r)
            for r in self.conn.execute(
                f"SELECT {_RUN_COLUMNS} FROM runs ORDER BY started_at DESC, key DESC"
            )
        ]
        if tags:
            rows = [r for r in rows if all(r.tags.get(k) == v for k, v in tags.items())]
        return rows[:limit] if limit is not None else rows

    def series(self, run_key: int) -> list[SeriesRow]:
        return [
            SeriesRow(idx, name, json.loads(lbl), Kind(kind))
            for idx, name, lbl, kind in self.conn.execute(
                "SELECT idx, name, labels, kind FROM series WHERE run_key=? ORDER BY idx",
                (run_key,),
            )
        ]

    def ticks(self, run_key: int, *, stride: int = 1) -> list[tuple[int, float, float]]:
        """(seq, mono, wall) of every tick, in order; with ``stride`` N, of the ticks whose seq
        is a multiple of N, found by seeking to each (the cost of N-times-thinner ticks does not
        grow with the run)."""
        if stride <= 1:
            return self.conn.execute(
                "SELECT seq, mono, wall FROM ticks WHERE run_key=? ORDER BY seq", (run_key,)
            ).fetchall()
        bounds = self.tick_bounds(run_key)
        if bounds is None:
            return []
        rows = self.conn.execute(
            f"{_SEQS_CTE} SELECT k.seq, k.mono, k.wall FROM t CROSS JOIN ticks k "
            "ON k.run_key=? AND k.seq=t.seq",
            (stride, stride, bounds[1][0], run_key),
        ).fetchall()
        rows.sort()
        return rows

    def tick_bounds(
        self, run_key: int
    ) -> tuple[tuple[int, float, float], tuple[int, float, float]] | None:
        """The first and last (seq, mono, wall) of a run's ticks (two seeks); None without."""
        first = self.conn.execute(
            "SELECT seq, mono, wall FROM ticks WHERE run_key=? ORDER BY seq LIMIT 1", (run_key,)
        ).fetchone()
        if first is None:
            return None
        last = self.conn.execute(
            "SELECT seq, mono, wall FROM ticks WHERE run_key=? ORDER BY seq DESC LIMIT 1",
            (run_key,),
        ).fetchone()
        return (first[0], first[1], first[2]), (last[0], last[1], last[2])

    def points(self, run_key: int, series_idx: int) -> list[tuple[int, float]]:
        """(seq, value) of one series, in order."""
        return self.conn.execute(
            "SELECT seq, value FROM samples WHERE run_key=? AND series=? ORDER BY seq",
            (run_key, series_idx),
        ).fetchall()

    def points_of(
        self, run_key: int, series: Sequence[int], *, stride: int = 1
    ) -> dict[int, list[tuple[int, float]]]:
        """(seq, value) lists of several series in one pass over the run's samples; with
        ``stride`` N, only every Nth tick (a thinned view of a long run, cheaper to build)."""
        out: dict[int, list[tuple[int, float]]] = {s: [] for s in series}
        if not series:
            return out
        marks = ",".join("?" * len(series))
        if stride <= 1:
            for sid, seq, value in self.conn.execute(
                f"SELECT series, seq, value FROM samples WHERE run_key=? AND series IN ({marks}) "
                "ORDER BY seq",
                (run_key, *series),
            ):
                out[sid].append((seq, value))
            return out
        last = self.conn.execute(
            "SELECT max(seq) FROM samples WHERE run_key=?", (run_key,)
        ).fetchone()[0]
        if last is None:
            return out
        # Seek to each kept tick and read its rows (the key is tick first), rather than scan
        # the whole run: the read costs the kept points, however long the run.
        for sid, seq, value in self.conn.execute(
            f"{_SEQS_CTE} SELECT s.series, s.seq, s.value FROM t CROSS JOIN samples s "
            f"ON s.run_key=? AND s.seq=t.seq WHERE +s.series IN ({marks})",
            (stride, stride, last, run_key, *series),
        ):
            out[sid].append((seq, value))
        for pts in out.values():
            pts.sort()  # in tick order already, as the seeks go: this only checks it
        return out

    def iter_points(
        self, run_key: int, series: Sequence[int]
    ) -> Iterator[tuple[int, int, int, float]]:
        """(run key, seq, series idx, value) of the given series, in tick order then series
        order: one pass over the run's samples, row by row."""
        if not series:
            return
        marks = ",".join("?" * len(series))
        yield from self.conn.execute(
            f"SELECT run_key, seq, series, value FROM samples WHERE run_key=? "
            f"AND series IN ({marks}) ORDER BY seq, series",
            (run_key, *series),
        )

    def first_last(self, run_key: int, series_idx: int) -> list[tuple[int, float]]:
        """The first and last (seq, value) of one series (one point if it has only one; none
        if it has none)."""
        out: list[tuple[int, float]] = []
        for order in ("ASC", "DESC"):
            row = self.conn.execute(
                f"SELECT seq, value FROM samples WHERE run_key=? AND series=? ORDER BY seq {order} "
                "LIMIT 1",
                (run_key, series_idx),
            ).fetchone()
            if row is not None and (not out or row[0] != out[0][0]):
                out.append((row[0], row[1]))
        return out

    def iter_samples(self, run_key: int) -> Iterator[tuple[int, int, float]]:
        """(seq, series idx, value) for every sample of a run, in tick order."""
        yield from self.conn.execute(
            "SELECT seq, series, value FROM samples WHERE run_key=? ORDER BY seq, series",
            (run_key,),
        )

    def counts(self, run_key: int, tables: Sequence[str]) -> list[int]:
        """The number of a run's rows in each of ``tables`` (phases, requests, steps ...)."""
        bad = set(tables) - set(_RUN_DATA_TABLES)
        if bad:
            raise ValueError(f"not a table of run data: {sorted(bad)}")
        return [
            self.conn.execute(f"SELECT count(*) FROM {t} WHERE run_key=?", (run_key,)).fetchone()[0]
            for t in tables
        ]

    def sample_count(self, run_key: int) -> int:
        n: int = self.conn.execute(
            "SELECT count(*) FROM samples WHERE run_key=?", (run_key,)
        ).fetchone()[0]
        return n

    def steps(self, run_key: int) -> list[StepRow]:
        return [
            StepRow(pid, mono, samples, tokens, flops, wall=wall)
            for pid, mono, wall, samples, tokens, flops in self.conn.execute(
                "SELECT pid, mono, wall, samples, tokens, flops FROM steps WHERE run_key=? "
                "ORDER BY pid, mono",
                (run_key,),
            )
        ]

    def phases(self, run_key: int) -> list[PhaseRow]:
        """The run's phase intervals, by process then start time."""
        return [
            PhaseRow(*r)
            for r in self.conn.execute(
                "SELECT pid, name, start, end, accel_seconds FROM phases WHERE run_key=? "
                "ORDER BY pid, start",
                (run_key,),
            )
        ]

    def requests(self, run_key: int) -> list[RequestRow]:
        """The run's served requests, by start time."""
        return [
            RequestRow(p, n, a, b, ti, to, bool(ok))
            for p, n, a, b, ti, to, ok in self.conn.execute(
                "SELECT pid, name, start, end, tokens_in, tokens_out, ok FROM requests "
                "WHERE run_key=? ORDER BY start",
                (run_key,),
            )
        ]

    def writers(self, run_key: int) -> dict[int, tuple[float, dict[str, Any]]]:
        """pid → (monotonic time its steps start from, its metadata)."""
        return {
            pid: (t, json.loads(m))
            for pid, t, m in self.conn.execute(
                "SELECT pid, started_mono, meta FROM writers WHERE run_key=?", (run_key,)
            )
        }

    def processes(self, run_key: int) -> list[dict[str, Any]]:
        return [
            {"pid": pid, "ppid": ppid, "name": name, "cmdline": json.loads(cl), "first_seen": t}
            for pid, ppid, name, cl, t in self.conn.execute(
                "SELECT pid, ppid, name, cmdline, first_seen FROM processes WHERE run_key=? "
                "ORDER BY first_seen, pid",
                (run_key,),
            )
        ]

    # -- maintenance --------------------------------------------------------------------------
    def reconcile(self, procfs_root: str = "/proc") -> list[str]:
        """Mark as interrupted the runs whose supervisor is gone (``kill -9``, a crash, a
        reboot) while their row still says running. Returns the ids marked."""
        me = _hostname()
        rows = self.conn.execute(
            "SELECT key, id, supervisor_host, supervisor_pid, supervisor_start, heartbeat_at, "
            "data_until, started_at FROM runs WHERE status=?",
            (RUNNING,),
        ).fetchall()
        marked = []
        now = time.time()
        for key, rid, host, pid, start, heartbeat, data_until, started in rows:
            if host == me:
                alive = pid is not None and process_start_ticks(pid, procfs_root) == start
            else:  # another machine sharing the file: trust a recent heartbeat only
                alive = heartbeat is not None and now - heartbeat < 600
            if alive:
                continue
            if self.readonly:
                msg = (
                    f"run {rid} looks interrupted (its monitor is gone) but the store is "
                    "read-only: not marked"
                )
                if msg not in self.notices:
                    self.notices.append(msg)
                continue
            end = data_until or heartbeat or started
            self.conn.execute(
                "UPDATE runs SET status=?, ended_at=coalesce(ended_at, ?), "
                "notes=json_insert(notes, '$[#]', ?) WHERE key=? AND status=?",
                (
                    INTERRUPTED,
                    end,
                    INTERRUPTED_NOTE,
                    key,
                    RUNNING,
                ),
            )
            marked.append(rid)
            if self.path.name != ":memory:":  # the space its supervisor set aside
                release_reserve(reserve_path(self.path, rid))
        return marked

    def delete_samples_before(self, cutoff: float) -> list[RunRow]:
        """Delete the samples, ticks and steps of finished runs that started before ``cutoff``
        (seconds since the epoch); their rows and summaries stay. Returns the runs affected."""
        self.reconcile()
        runs = [
            _run_row(r)
            for r in self.conn.execute(
                f"SELECT {_RUN_COLUMNS} FROM runs WHERE started_at < ? AND status != ? "
                "AND samples_deleted_at IS NULL",
                (cutoff, RUNNING),
            )
        ]
        now = time.time()
        for run in runs:
            c = self.conn
            c.execute("BEGIN IMMEDIATE")
            try:
                for table in _RUN_DATA_TABLES:
                    c.execute(f"DELETE FROM {table} WHERE run_key=?", (run.key,))
                c.execute("UPDATE runs SET samples_deleted_at=? WHERE key=?", (now, run.key))
                c.execute("COMMIT")
            except BaseException:
                rollback(c)
                raise
        return runs

    def vacuum(self) -> None:
        self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        self.conn.execute("VACUUM")


# The seqs 0, N, 2N ... up to a last one (parameters: N, N, last), as a table t(seq) to join.
_SEQS_CTE = "WITH RECURSIVE t(seq) AS (SELECT 0 UNION ALL SELECT seq + ? FROM t WHERE seq + ? <= ?)"


def _is_busy(e: sqlite3.Error) -> bool:
    text = str(e).lower()
    return "locked" in text or "busy" in text


def rollback(c: sqlite3.Connection) -> None:
    """Roll back the transaction, when there still is one: SQLite ends it itself on some errors
    (SQLITE_FULL, SQLITE_IOERR, SQLITE_NOMEM: "Error Codes" in its docs), and a failed ROLLBACK
    must not hide the error that matters (the caller re-raises that one)."""
    if c.in_transaction:
        try:
            c.execute("ROLLBACK")
        except sqlite3.Error:
            pass


def _split_sql(script: str) -> list[str]:
    return [s.strip() for s in script.split(";") if s.strip()]
