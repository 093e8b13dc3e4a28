"""The statements an upload runs, executed by the driver's own connection.

SQLAlchemy's execution of a Core statement (its compiled form looked up, an execution context,
events, a result wrapper) cost about three times the SQLite work itself per statement, and an
upload runs ten or more of them: more than half of storing an upload, all of it on the server's
event loop. Each statement here is compiled once per set of column keys into its SQL text and
parameter names, and run by the driver directly (``sqlite3``; psycopg's cursor on PostgreSQL,
which prepares a statement on the server once it has run a few times) in the transaction the
session began (the same connection); values go through the column types' own bind processors
(JSON as the engine writes it), and the driver's errors are raised as SQLAlchemy's
(``IntegrityError``, ``DataError``, ``OperationalError``), as a statement run by SQLAlchemy
raises them. On PostgreSQL this took an upload's database CPU in the server's writer thread
from 4.9 to 4.0 ms under load. The server runs on these two drivers only
(computewatch.serverdb.engine.parse_url).

Selects read here return plain values: only columns whose type converts nothing on the way out
(strings, numbers) are allowed, checked when a statement is compiled.

On PostgreSQL the statements whose answers are not read can be sent together
(:func:`pipelined`, psycopg's pipeline mode): each statement is otherwise a round trip, which
the server's writer thread waits for.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Engine
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import DBAPIError
from sqlalchemy.sql import ClauseElement
from sqlalchemy.sql.compiler import SQLCompiler

__all__ = ["execute", "first", "pipelined", "read_first", "savepoint", "scalar"]

Params = Mapping[str, Any]


@dataclass(frozen=True)
class _Compiled:
    sql: str
    names: tuple[str, ...]
    processors: tuple[Callable[[Any], Any] | None, ...]
    given: dict[str, Any]
    """Values bound in the statement itself (``column == "x"``), by parameter name."""


_CACHE: dict[tuple[int, tuple[str, ...] | None, str], tuple[ClauseElement, _Compiled]] = {}
"""Compiled statements by (statement, column keys, dialect)."""


def _compiled(stmt: ClauseElement, dialect: Dialect, keys: tuple[str, ...] | None) -> _Compiled:
    cache_key = (id(stmt), keys, dialect.name)
    found = _CACHE.get(cache_key)
    if found is not None and found[0] is stmt:
        return found[1]
    compiled = stmt.compile(dialect=dialect, column_keys=list(keys) if keys is not None else None)
    if not isinstance(compiled, SQLCompiler):
        raise TypeError(f"not a SQL statement: {stmt}")
    if compiled.positiontup is not None:  # SQLite: ? in order
        names = tuple(compiled.positiontup)
    elif dialect.paramstyle == "pyformat":  # psycopg: %(name)s
        if compiled.escaped_bind_names:
            raise TypeError(f"bind names that need escaping: {stmt}")
        names = tuple(compiled.bind_names.values())
    else:
        raise TypeError(f"a parameter style the driver path does not know: {dialect.paramstyle}")
    processors = tuple(compiled.binds[n].type.bind_processor(dialect) for n in names)
    for column in getattr(compiled, "_result_columns", ()):
        if column[3].result_processor(dialect, None) is not None:
            raise TypeError(f"column {column[0]} needs SQLAlchemy to be read: {stmt}")
    given = {n: compiled.binds[n].effective_value for n in names if not compiled.binds[n].required}
    made = _Compiled(compiled.string, names, processors, given)
    _CACHE[cache_key] = (stmt, made)
    return made


def _args(made: _Compiled, params: Params) -> tuple[Any, ...]:
    if made.given:
        params = {**made.given, **params}
    return tuple(
        params[n] if p is None else p(params[n])
        for n, p in zip(made.names, made.processors, strict=True)
    )


def _named(made: _Compiled, params: Params) -> dict[str, Any]:
    """:func:`_args` by name (psycopg's ``%(name)s``)."""
    return dict(zip(made.names, _args(made, params), strict=True))


def _prepare(
    conn: Connection, stmt: ClauseElement, params: Params | Sequence[Params]
) -> tuple[_Compiled, Sequence[Params], bool]:
    """``stmt`` compiled for the keys of ``params``, its rows of parameters, and whether there
    are several (``executemany``)."""
    many = not isinstance(params, Mapping)
    rows: Sequence[Params] = params if many else [params]  # type: ignore[list-item,assignment]
    return _compiled(stmt, conn.dialect, tuple(rows[0]) if rows else None), rows, many


def _pg_run(conn: Connection, stmt: ClauseElement, params: Params | Sequence[Params]) -> Any:
    """``stmt`` run by psycopg's own cursor in the connection's transaction: the cursor, its
    rows to be read (the caller closes it)."""
    import psycopg  # the PostgreSQL driver: there when the dialect is

    made, rows, many = _prepare(conn, stmt, params)
    raw = conn.connection.driver_connection
    assert raw is not None
    cur = raw.cursor()
    try:
        if many:
            cur.executemany(made.sql, [_named(made, r) for r in rows])
        else:
            cur.execute(made.sql, _named(made, rows[0]))
    except psycopg.Error as e:
        cur.close()
        raise DBAPIError.instance(made.sql, None, e, psycopg.Error) from e
    return cur


def _driver(pooled: Any) -> sqlite3.Connection:
    """SQLite's own connection behind a SQLAlchemy connection or pool entry."""
    raw = pooled.driver_connection
    if not isinstance(raw, sqlite3.Connection):
        raise TypeError("prepared statements run on SQLite's own connection")
    return raw


def _sql(raw: sqlite3.Connection, sql: str, args: Any = (), many: bool = False) -> sqlite3.Cursor:
    """``sql`` run by the driver, its errors raised as SQLAlchemy's (``IntegrityError``, ...)."""
    try:
        return raw.executemany(sql, args) if many else raw.execute(sql, args)
    except sqlite3.Error as e:
        raise DBAPIError.instance(sql, None, e, sqlite3.Error) from e


def _run(
    conn: Connection, stmt: ClauseElement, params: Params | Sequence[Params]
) -> sqlite3.Cursor:
    made, rows, many = _prepare(conn, stmt, params)
    raw = _driver(conn.connection)
    if many:
        return _sql(raw, made.sql, [_args(made, r) for r in rows], many=True)
    return _sql(raw, made.sql, _args(made, rows[0]))


def _fast(conn: Connection) -> bool:
    return conn.dialect.name == "sqlite"


def execute(conn: Connection, stmt: ClauseElement, params: Params | Sequence[Params]) -> int:
    """Run ``stmt`` with ``params`` (one set, or a list for each row); the rows it changed
    (-1 inside :func:`pipelined` on PostgreSQL, where the statement is only sent)."""
    if _fast(conn):
        return _run(conn, stmt, params).rowcount
    cur = _pg_run(conn, stmt, params)
    if _piped(conn):  # its result comes at the next sync: the cursor stays open for it
        return -1
    try:
        return int(cur.rowcount)
    finally:
        cur.close()


def first(conn: Connection, stmt: ClauseElement, params: Params) -> tuple[Any, ...] | None:
    """The first row ``stmt`` selects (or returns), as a tuple, or None. Inside
    :func:`pipelined` on PostgreSQL this waits for every statement sent before it, and raises
    the first error among them."""
    if _fast(conn):
        row: tuple[Any, ...] | None = _run(conn, stmt, params).fetchone()
        return row
    import psycopg  # the PostgreSQL driver: there when the dialect is

    cur = _pg_run(conn, stmt, params)
    try:
        got: tuple[Any, ...] | None = cur.fetchone()
        return got
    except psycopg.Error as e:
        raise DBAPIError.instance("(results of the statements sent)", None, e, psycopg.Error) from e
    finally:
        cur.close()


def _piped(conn: Connection) -> bool:
    raw = conn.connection.driver_connection
    return bool(raw is not None and raw.pgconn.pipeline_status)


@contextlib.contextmanager
def pipelined(conn: Connection) -> Iterator[None]:
    """On PostgreSQL, the statements run by this module inside are sent without waiting for
    each one's answer (psycopg's pipeline mode) and answered together at the end, or at the
    first whose rows are read (:func:`first`): one round trip for several statements, and one
    hand-over of the interpreter lock from the thread that waits. A statement's error is raised
    there, as SQLAlchemy's (``IntegrityError``, ``DataError``...), and the statements after it
    in the block are not run; :func:`execute` returns no row count inside. Statements run
    through SQLAlchemy do not belong inside. On SQLite nothing changes: each statement is a
    call into the library, not a round trip."""
    if _fast(conn):
        yield
        return
    import psycopg  # the PostgreSQL driver: there when the dialect is

    raw = conn.connection.driver_connection
    assert raw is not None
    try:
        with raw.pipeline():
            yield
    except psycopg.Error as e:
        raise DBAPIError.instance("(statements sent together)", None, e, psycopg.Error) from e


def scalar(conn: Connection, stmt: ClauseElement, params: Params) -> Any:
    """The first column of the first row ``stmt`` selects (None when there is none)."""
    row = first(conn, stmt, params)
    return None if row is None else row[0]


def savepoint(conn: Connection, action: str) -> None:
    """``SAVEPOINT``, ``RELEASE`` or ``ROLLBACK TO`` (``action``: begin, release, rollback)
    the one savepoint of an upload in a group, on SQLite on the driver's connection: SQLAlchemy
    compiles and runs a savepoint's statements anew each time (two statements' worth of work
    per upload); on PostgreSQL as the driver's SQL through the connection. The caller keeps the
    session's objects right (computewatch.serverdb.ingest: flushed before, let go of after a
    rollback)."""
    sql = {
        "begin": "SAVEPOINT computewatch_upload",
        "release": "RELEASE computewatch_upload",
        "rollback": "ROLLBACK TO computewatch_upload",
    }[action]
    if _fast(conn):
        _sql(_driver(conn.connection), sql)
    else:
        conn.exec_driver_sql(sql)


def read_first(engine: Engine, stmt: ClauseElement, params: Params) -> tuple[Any, ...] | None:
    """The first row a one-statement read selects, on SQLite by a pooled connection of
    ``engine`` outside any transaction (the statement is its own): no session, no ``BEGIN``
    and ``ROLLBACK`` around it, as every authenticated request's token look-up needs. On
    PostgreSQL by psycopg in a connection of the pool, whose transaction is rolled back when it
    goes back."""
    if engine.dialect.name != "sqlite":
        with engine.connect() as conn:
            return first(conn, stmt, params)
    made = _compiled(stmt, engine.dialect, None)
    pooled = engine.raw_connection()
    try:
        row: tuple[Any, ...] | None = _sql(
            _driver(pooled), made.sql, _args(made, params)
        ).fetchone()
        return row
    finally:
        pooled.close()
