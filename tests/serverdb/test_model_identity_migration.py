"""Migration 0008 (models per team): from 0007 up, every ``model_runs`` row's model and base
model are qualified with the row's team, an obligation's model with the team that first
declared the name (the log's first run entry naming it, else the earliest run), and
``model_grants`` exists as the models declare it; down to 0007 the names are bare again and
the table gone; up again works (SQLite and PostgreSQL)."""

from __future__ import annotations

import json
from typing import Any

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import text
from tests.serverdb.conftest import migrate_to

from computewatch.serverdb.engine import Database, current_tables, open_database
from computewatch.serverdb.models import Base


def _model_run(run_id: str, team: str, model: str, base: str | None, started: float) -> str:
    return (
        "INSERT INTO model_runs (run_id, team, model, base_model, stage, status, started_at, "
        "duration_seconds, gpu_hours, devices, updated_at) VALUES "
        f"('{run_id}', '{team}', '{model}', {'NULL' if base is None else repr(base)}, "
        f"'pretrain', 'completed', {started}, 1.0, 1.0, '[]', 1.0)"
    )


def _obligation(oid: int, model: str, tier: str, state: str = "open") -> str:
    return (
        "INSERT INTO obligations (id, model, tier, trigger, rule, threshold, opened_at, state) "
        f"VALUES ({oid}, '{model}', '{tier}', 'crossed', 'r', 1e25, 1.0, '{state}')"
    )


def _entry(seq: int, team: str, model: str) -> tuple[str, dict[str, Any]]:
    body = json.dumps({"run_id": f"r{seq}", "team": team, "figures": {"model": model}})
    return (
        "INSERT INTO ledger_entries (seq, time, kind, body) VALUES "
        "(:seq, '2026-12-01T00:00:00.000000Z', 'run', :body)",
        {"seq": seq, "body": body},
    )


def _rows(db: Database, sql: str) -> list[tuple[Any, ...]]:
    with db.engine.connect() as conn:
        return [tuple(r) for r in conn.execute(text(sql))]


def test_0007_to_0008_and_back(db_url: str) -> None:
    db = open_database(db_url)
    try:
        migrate_to(db, "0007")
        assert "model_grants" not in current_tables(db)
        with db.engine.begin() as conn:
            for sql in (
                # acme ran acme-70b first; beta later under the same name (one model then)
                _model_run("a1", "acme", "acme-70b", None, 10.0),
                _model_run("b1", "beta", "acme-70b", None, 20.0),
                _model_run("b2", "beta", "chat", "acme-70b", 30.0),
                _model_run("c1", "gamma", "org/kept", None, 40.0),  # a '/' already: kept
                _model_run("d1", "delta", "solo", None, 50.0),
                _obligation(1, "acme-70b", "us-frontier"),
                _obligation(2, "solo", "eu-systemic-risk"),
                _obligation(3, "late", "eu-systemic-risk", "done"),
            ):
                conn.execute(text(sql))
            for sql, params in (_entry(1, "gamma", "other"), _entry(2, "acme", "acme-70b"),
                                _entry(3, "beta", "acme-70b")):  # fmt: skip
                conn.execute(text(sql), params)
            conn.execute(text(_model_run("l1", "zeta", "late", None, 5.0)))  # no log entry

        migrate_to(db, "0008")
        assert "model_grants" in current_tables(db)
        got = _rows(db, "SELECT run_id, model, base_model FROM model_runs ORDER BY run_id")
        assert got == [
            ("a1", "acme/acme-70b", None),
            ("b1", "beta/acme-70b", None),
            ("b2", "beta/chat", "beta/acme-70b"),
            ("c1", "org/kept", None),
            ("d1", "delta/solo", None),
            ("l1", "zeta/late", None),
        ]
        assert _rows(db, "SELECT id, model FROM obligations ORDER BY id") == [
            (1, "acme/acme-70b"),  # the team that first declared it (the log says acme)
            (2, "delta/solo"),  # no log entry: its runs' team
            (3, "zeta/late"),
        ]
        with db.engine.connect() as conn:

            def grants(
                obj: Any, name: str | None, type_: str, reflected: bool, compare_to: Any
            ) -> bool:
                table = obj if type_ == "table" else getattr(obj, "table", None)
                return getattr(table, "name", name) == "model_grants"

            ctx = MigrationContext.configure(
                conn, opts={"include_object": grants, "compare_type": True}
            )
            assert compare_metadata(ctx, Base.metadata) == []
        with db.engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO model_grants (model, team, granted_at, granted_by) "
                    "VALUES ('acme/acme-70b', 'beta', 1.0, 'database')"
                )
            )
            conn.execute(text(_obligation(4, "beta/acme-70b", "us-frontier")))

        migrate_to(db, "0007", down=True)
        assert "model_grants" not in current_tables(db)
        got = _rows(db, "SELECT run_id, model, base_model FROM model_runs ORDER BY run_id")
        assert got == [
            ("a1", "acme-70b", None),
            ("b1", "acme-70b", None),
            ("b2", "chat", "acme-70b"),
            ("c1", "org/kept", None),
            ("d1", "solo", None),
            ("l1", "late", None),
        ]
        assert _rows(db, "SELECT id, model FROM obligations ORDER BY id") == [
            (1, "acme-70b"),
            (2, "solo"),
            (3, "late"),
            (4, "beta/acme-70b"),  # a second open one of that name and tier: kept apart
        ]
        migrate_to(db, "0008")
        assert _rows(db, "SELECT model FROM model_runs WHERE run_id = 'b2'") == [("beta/chat",)]
    finally:
        db.dispose()
