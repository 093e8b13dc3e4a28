"""The server database's URL, engine and migrations.

``sqlite:///$COMPUTEWATCH_HOME/server.db`` by default (WAL, a busy timeout, foreign keys on);
``postgresql+psycopg://user:pw@host:port/db`` for an organisation (``postgresql://`` and
``postgres://`` mean the same, with psycopg 3). Any other URL is refused with a clear message.
The schema is migrated with Alembic (``migrations/``) by :func:`upgrade`, which the server runs
at start and ``server token create`` before it writes.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event, inspect
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import ConnectionPoolEntry

from computewatch.jsonout import compact as json_compact
from computewatch.jsonout import loads as json_loads
from computewatch.paths import create_private_file, data_home, make_private_dirs
from computewatch.serverdb.errors import BadDatabaseURL

__all__ = [
    "SERVER_DB_FILENAME",
    "SQLITE_BEGIN",
    "Database",
    "default_url",
    "display_url",
    "is_locked",
    "open_database",
    "parse_url",
    "upgrade",
]

SERVER_DB_FILENAME = "server.db"
SQLITE_BUSY_MS = 10_000
MIGRATIONS = Path(__file__).with_name("migrations")


def default_url() -> str:
    """``sqlite:///$COMPUTEWATCH_HOME/server.db`` (the XDG data dir when the variable is unset)."""
    return f"sqlite:///{data_home() / SERVER_DB_FILENAME}"


def display_url(url: URL | str) -> str:
    """The URL with its password hidden, fit for a message or a log."""
    try:
        u = url if isinstance(url, URL) else make_url(url)
    except ArgumentError:
        return "<unparsable URL>"
    return u.render_as_string(hide_password=True)


def parse_url(text: str | None) -> URL:
    """``--db`` as a SQLAlchemy URL on a driver the server supports; ``None`` is the default."""
    raw = text or default_url()
    try:
        url = make_url(raw)
    except ArgumentError:
        raise BadDatabaseURL(
            "--db: not a database URL (expected sqlite:///PATH or "
            "postgresql+psycopg://USER:PASSWORD@HOST:PORT/NAME)"
        ) from None
    backend, _, driver = url.drivername.partition("+")
    if backend in ("postgresql", "postgres"):
        if driver not in ("", "psycopg"):
            raise BadDatabaseURL(
                f"--db: PostgreSQL through {driver!r} is not supported; use postgresql+psycopg://"
            )
        url = url.set(drivername="postgresql+psycopg")
        if not url.database:
            raise BadDatabaseURL(f"--db: no database name in {display_url(url)}")
    elif backend == "sqlite":
        if driver not in ("", "pysqlite"):
            raise BadDatabaseURL(f"--db: SQLite through {driver!r} is not supported")
        if not url.database or url.database == ":memory:":
            raise BadDatabaseURL(
                "--db: a SQLite server database must be a file (sqlite:///PATH): several "
                "connections share it"
            )
    else:
        raise BadDatabaseURL(
            f"--db: unsupported database {backend!r}: use sqlite:///PATH or "
            "postgresql+psycopg://USER:PASSWORD@HOST:PORT/NAME"
        )
    return url


SQLITE_BEGIN = "computewatch_sqlite_begin"
"""Execution option: ``"IMMEDIATE"`` makes a SQLite transaction take the write lock at BEGIN
(``session.connection(execution_options={SQLITE_BEGIN: "IMMEDIATE"})`` before its first
statement); ``"IMMEDIATE_NOWAIT"`` the same without waiting for another process that holds it
(``database is locked`` at once: :func:`is_locked`). Other transactions begin DEFERRED."""


def _sqlite_begin(conn: Connection) -> None:
    # pysqlite's own transaction handling is off (isolation_level None, below): SQLAlchemy's
    # documented recipe for choosing the BEGIN a transaction starts with.
    mode = conn.get_execution_options().get(SQLITE_BEGIN, "DEFERRED")
    if mode == "IMMEDIATE_NOWAIT":
        conn.exec_driver_sql("PRAGMA busy_timeout = 0")
        try:
            conn.exec_driver_sql("BEGIN IMMEDIATE")
        finally:
            conn.exec_driver_sql(f"PRAGMA busy_timeout = {SQLITE_BUSY_MS}")
        return
    conn.exec_driver_sql("BEGIN IMMEDIATE" if mode == "IMMEDIATE" else "BEGIN")


def is_locked(error: BaseException) -> bool:
    """Whether ``error`` is SQLite's answer to a lock another connection holds."""
    orig = getattr(error, "orig", error)
    return isinstance(orig, sqlite3.OperationalError) and "locked" in str(orig)


def _sqlite_pragmas(dbapi_conn: Any, record: ConnectionPoolEntry) -> None:
    dbapi_conn.isolation_level = None
    cur = dbapi_conn.cursor()
    try:
        cur.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_MS}")
        cur.execute("PRAGMA journal_mode = WAL")
        cur.execute("PRAGMA synchronous = NORMAL")
        cur.execute("PRAGMA foreign_keys = ON")
    finally:
        cur.close()


def _no_autocheckpoint(dbapi_conn: Any, record: ConnectionPoolEntry) -> None:
    dbapi_conn.execute("PRAGMA wal_autocheckpoint = 0")


CHECKPOINT_SECONDS = 1.0
"""How often a server on SQLite copies its write-ahead log into the database file, in a thread
of its own (:meth:`Database.checkpoint`)."""


@dataclass
class Database:
    """An engine and its session factory; ``dialect`` is ``sqlite`` or ``postgresql``."""

    engine: Engine
    sessions: sessionmaker[Session]
    url: URL
    _write_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    background_checkpoints: bool = False
    """SQLite: no commit copies the write-ahead log into the database file (SQLite's
    automatic checkpoint, every 1,000 pages, is done by the commit that crosses the mark, with
    an fsync: tens of milliseconds on the connection that commits, which on the server is often
    its event loop's); the owner calls :meth:`checkpoint` from a thread instead."""

    def checkpoint(self) -> None:
        """Copy what the write-ahead log holds into the database file as far as readers
        allow, without waiting for any lock (``PRAGMA wal_checkpoint(PASSIVE)``); the next
        writer then starts the log from its beginning. Nothing on PostgreSQL."""
        if self.dialect != "sqlite":
            return
        pooled = self.engine.raw_connection()
        try:
            driver = pooled.driver_connection
            assert driver is not None
            driver.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        finally:
            pooled.close()

    def writing(self) -> contextlib.AbstractContextManager[object]:
        """Hold it around a write transaction: on SQLite one writer of this process at a time
        (SQLite takes one writer anyway; waiting here is fair and needs no busy polling, so
        only other processes wait on the busy timeout). Nothing on PostgreSQL."""
        if self.dialect == "sqlite":
            return self._write_lock
        return contextlib.nullcontext()

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    @contextlib.contextmanager
    def writing_now(self) -> Iterator[bool]:
        """The writer's turn of :meth:`writing` if it is free this moment (True, held until
        the block ends), else False at once: for work done on the server's event loop, which
        must never wait for the writer. Always True on PostgreSQL."""
        if self.dialect != "sqlite":
            yield True
            return
        mine = self._write_lock.acquire(blocking=False)
        try:
            yield mine
        finally:
            if mine:
                self._write_lock.release()

    def connection_free(self) -> bool:
        """Whether the pool holds an idle connection this moment: a session opened now waits
        for none (work on the event loop checks first, and goes to a thread when not)."""
        pool = self.engine.pool
        checkedin = getattr(pool, "checkedin", None)
        return callable(checkedin) and int(checkedin()) > 0

    def session(self) -> Session:
        return self.sessions()

    def dispose(self) -> None:
        self.engine.dispose()


POOL_SIZE = 16
"""Connections kept open per server process (and as many again opened under load)."""
POOL_WAIT_SECONDS = 1.0
"""How long a request waits for a free connection before the server answers 429 with
Retry-After (computewatch.server.app): a busy server says so at once rather than after 30 s."""


def open_database(
    url: URL | str | None = None,
    *,
    pool_size: int = POOL_SIZE,
    pool_wait: float = POOL_WAIT_SECONDS,
    background_checkpoints: bool = False,
) -> Database:
    """An engine on ``url`` (see :func:`parse_url`); a SQLite file's directory is created
        private. Connections to a database server are checked before use, so one that comes back is
    used again.
        The pool holds ``pool_size`` connections (and as many overflow ones); a caller waits at most
        ``pool_wait`` seconds for one (sqlalchemy.exc.TimeoutError after).
    ``background_checkpoints``: see :attr:`Database.background_checkpoints` (the caller then
    calls :meth:`Database.checkpoint` every :data:`CHECKPOINT_SECONDS` or so)."""
    u = url if isinstance(url, URL) else parse_url(url)
    kwargs: dict[str, Any] = {
        # a server that went away and came back: checked at every checkout (a round trip);
        # a SQLite file has no connection to lose, and the check was a statement per request
        "pool_pre_ping": u.get_backend_name() != "sqlite",
        # JSON columns (summaries, series parts) through orjson where installed
        "json_serializer": json_compact,
        "json_deserializer": json_loads,
        "pool_size": pool_size,
        "max_overflow": pool_size,
        "pool_timeout": pool_wait,
    }
    if u.get_backend_name() == "sqlite":
        path = Path(u.database or "").expanduser()
        make_private_dirs(path.parent)
        # made 0600 before SQLite opens it (its -wal and -shm files take the file's mode):
        # the server's database holds tokens' hashes and every team's runs (docs/security.md)
        with contextlib.suppress(OSError):  # SQLite then says why it cannot open the file
            create_private_file(path)
        kwargs["connect_args"] = {"check_same_thread": False, "timeout": SQLITE_BUSY_MS / 1000}
    else:
        kwargs["connect_args"] = {"connect_timeout": 5}
    engine = create_engine(u, **kwargs)
    if u.get_backend_name() == "sqlite":
        event.listen(engine, "connect", _sqlite_pragmas)
        event.listen(engine, "begin", _sqlite_begin)
        if background_checkpoints:
            event.listen(engine, "connect", _no_autocheckpoint)
    background = background_checkpoints and u.get_backend_name() == "sqlite"
    return Database(
        engine, sessionmaker(engine, expire_on_commit=False), u, background_checkpoints=background
    )


_upgrade_lock = threading.Lock()


def upgrade(db: Database) -> None:
    """Bring the schema to the newest revision (Alembic ``upgrade head``)."""
    # Alembic is only needed here, at start-up: imported at the call.
    from alembic import command
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    with _upgrade_lock, db.engine.connect() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")
        conn.commit()


def current_tables(db: Database) -> list[str]:
    """The tables the database holds now (for tests and diagnostics)."""
    return sorted(inspect(db.engine).get_table_names())
