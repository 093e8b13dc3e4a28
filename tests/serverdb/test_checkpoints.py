"""SQLite's write-ahead log copied into the database file by the server's own thread, not by
the commit that crosses SQLite's 1,000-page mark (which on the server is often its event
loop's: an fsync there stalls every request)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from computewatch.server import app as app_module
from computewatch.serverdb.engine import Database, open_database

from .conftest import db, db_url  # noqa: F401  (fixtures)

PAGE = 4096


def _writes(d: Database, transactions: int) -> None:
    """``transactions`` commits of about 30 pages each."""
    with d.engine.connect() as conn:
        conn.execute(text("CREATE TABLE IF NOT EXISTS filler (x BLOB)"))
        conn.commit()
        for _ in range(transactions):
            conn.execute(text("INSERT INTO filler VALUES (:x)"), [{"x": os.urandom(PAGE)}] * 30)
            conn.commit()


def _wal_pages(path: Path) -> float:
    wal = path.with_name(path.name + "-wal")
    return wal.stat().st_size / PAGE if wal.exists() else 0.0


@pytest.fixture
def sqlite_file(tmp_path: Path) -> Path:
    return tmp_path / "server.db"


def _autocheckpoint(d: Database) -> int:
    with d.engine.connect() as conn:
        return int(conn.execute(text("PRAGMA wal_autocheckpoint")).scalar_one())


def test_commits_leave_the_log_to_the_checkpoint_call(sqlite_file: Path) -> None:
    d = open_database(f"sqlite:///{sqlite_file}", background_checkpoints=True)
    try:
        assert d.background_checkpoints and _autocheckpoint(d) == 0
        _writes(d, 100)  # about 3,000 pages: past SQLite's mark of 1,000, no commit copied them
        grown = _wal_pages(sqlite_file)
        assert grown > 2_500
        d.checkpoint()
        _writes(d, 100)  # the log starts again from its beginning after the checkpoint
        assert _wal_pages(sqlite_file) < grown * 1.2
        with d.engine.connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM filler")).scalar_one() == 6_000
    finally:
        d.dispose()


def test_without_it_sqlite_checkpoints_at_each_commit_past_the_mark(sqlite_file: Path) -> None:
    d = open_database(f"sqlite:///{sqlite_file}")
    try:
        assert not d.background_checkpoints and _autocheckpoint(d) == 1000
        _writes(d, 100)
        assert _wal_pages(sqlite_file) < 1_200
    finally:
        d.dispose()


@pytest.fixture
def database(db_url: str) -> Iterator[Database]:  # noqa: F811
    d = open_database(db_url, background_checkpoints=True)
    yield d
    d.dispose()


def test_postgresql_has_none_to_make(database: Database) -> None:
    assert database.background_checkpoints == (database.dialect == "sqlite")
    database.checkpoint()  # nothing on PostgreSQL, a checkpoint on SQLite: no error either way


def test_the_server_checkpoints_from_a_thread_while_it_runs(
    sqlite_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    real = Database.checkpoint

    def counted(self: Database) -> None:
        import threading

        calls.append(threading.current_thread().name)
        real(self)

    monkeypatch.setattr(Database, "checkpoint", counted)
    monkeypatch.setattr(app_module, "CHECKPOINT_SECONDS", 0.02)
    app = app_module.create_app(db_url=f"sqlite:///{sqlite_file}")
    assert app.state.db.background_checkpoints
    with TestClient(app) as client:
        deadline = time.monotonic() + 30
        while len(calls) < 3 and time.monotonic() < deadline:
            assert client.get("/healthz").status_code == 200
            time.sleep(0.05)
    assert len(calls) >= 3
    assert all(name != "MainThread" for name in calls)
