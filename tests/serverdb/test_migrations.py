"""The schema: Alembic's ``upgrade head`` from an empty database on SQLite and PostgreSQL gives
exactly the tables the models declare, and running it again changes nothing."""

from __future__ import annotations

from typing import Any

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import text

from computewatch.serverdb.engine import current_tables, open_database, upgrade
from computewatch.serverdb.models import Base

OURS = {"runs", "run_docs", "run_tags", "run_series_parts", "run_changes", "tokens", "web_sessions"}
OURS |= {"budgets"}


def test_upgrade_from_empty_matches_the_models(db_url: str) -> None:
    db = open_database(db_url)
    try:
        assert current_tables(db) == []
        upgrade(db)
        tables = set(current_tables(db))
        assert OURS | {"alembic_version"} <= tables
        with db.engine.connect() as conn:
            first = conn.execute(text("SELECT version_num FROM alembic_version")).scalar()

            def ours(
                obj: Any, name: str | None, type_: str, reflected: bool, compare_to: Any
            ) -> bool:
                table = obj if type_ == "table" else getattr(obj, "table", None)
                return getattr(table, "name", name) in OURS

            ctx = MigrationContext.configure(
                conn, opts={"include_object": ours, "compare_type": True}
            )
            diffs = compare_metadata(ctx, Base.metadata)
        assert diffs == [], diffs
        upgrade(db)  # again: nothing to do
        assert set(current_tables(db)) == tables
        with db.engine.connect() as conn:
            assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar() == first
    finally:
        db.dispose()


def test_sqlite_runs_in_wal_mode_with_a_busy_timeout(tmp_path: Any) -> None:
    db = open_database(f"sqlite:///{tmp_path / 'deep' / 'server.db'}")
    try:
        upgrade(db)
        with db.engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
            assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 10_000
            assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        assert (tmp_path / "deep").stat().st_mode & 0o777 == 0o700
    finally:
        db.dispose()
