"""Migration 0005 (node keys, run signatures): from 0004 up to 0005 gives exactly the tables the
models declare, with runs stored before it kept (and shown as ``unsigned``); down to 0004 removes
them and leaves the runs; up again works (SQLite and PostgreSQL)."""

from __future__ import annotations

from typing import Any

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import text
from tests.serverdb.conftest import migrate_to

from computewatch.serverdb.engine import Database, current_tables, open_database
from computewatch.serverdb.models import Base
from computewatch.serverdb.node_keys import run_signature

NEW = {"node_keys", "run_signatures"}


def _version(db: Database) -> str:
    with db.engine.connect() as conn:
        return str(conn.execute(text("SELECT version_num FROM alembic_version")).scalar())


def test_0004_to_0005_and_back(db_url: str) -> None:
    db = open_database(db_url)
    try:
        migrate_to(db, "0004")
        assert _version(db) == "0004" and not NEW & set(current_tables(db))
        with db.engine.begin() as conn:  # a run stored before signatures existed
            conn.execute(
                text(
                    'INSERT INTO runs (id, team, "user", project, host, name, status, '
                    "exit_code, started_at, started_day, ended_at, gpu_count, gpu_hours, seq, "
                    "final, updated_at, command, tags) VALUES ('old-run', 't', 'u', NULL, 'h', "
                    "NULL, 'completed', 0, 1.0, '1970-01-01', 2.0, 0, 0.0, 1, :final, 2.0, "
                    "'[]', '{}')"
                ),
                {"final": True},
            )
        migrate_to(db, "0005")
        assert _version(db) == "0005" and set(current_tables(db)) >= NEW
        with db.engine.connect() as conn:

            def ours(
                obj: Any, name: str | None, type_: str, reflected: bool, compare_to: Any
            ) -> bool:
                table = obj if type_ == "table" else getattr(obj, "table", None)
                return getattr(table, "name", name) in NEW

            ctx = MigrationContext.configure(
                conn, opts={"include_object": ours, "compare_type": True}
            )
            diffs = compare_metadata(ctx, Base.metadata)
        assert diffs == [], diffs
        with db.session() as session:
            assert run_signature(session, "old-run").status == "unsigned"
        migrate_to(db, "0004", down=True)
        assert _version(db) == "0004" and not NEW & set(current_tables(db))
        with db.engine.connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM runs")).scalar() == 1
        migrate_to(db, "head")
        assert set(current_tables(db)) >= NEW
    finally:
        db.dispose()
