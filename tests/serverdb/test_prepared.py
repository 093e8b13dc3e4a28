"""The statements an upload runs on SQLite's own connection (computewatch.serverdb.prepared)
write what SQLAlchemy would write and read back, raise SQLAlchemy's errors, and on PostgreSQL
run through SQLAlchemy as before; a group's savepoints on SQLite undo a refused upload's
writes, objects and ledger entries alone."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, cast

import pytest
from sqlalchemy import Table, bindparam, insert, select, update
from sqlalchemy.exc import IntegrityError
from tests.server.conftest import batch, synthetic_upload

from computewatch.governance import service as governance_service
from computewatch.serverdb import prepared, tokens
from computewatch.serverdb.engine import Database, open_database, upgrade
from computewatch.serverdb.errors import IngestConflict
from computewatch.serverdb.ingest import Upload, store_group
from computewatch.serverdb.ledger_store import size
from computewatch.serverdb.models import Run, RunDoc, RunSeriesPart
from computewatch.upload.protocol import RunUpload

from .conftest import db, db_url  # noqa: F401  (fixtures)

_PARTS = cast(Table, RunSeriesPart.__table__)
_DOCS = cast(Table, RunDoc.__table__)
_RUNS = cast(Table, Run.__table__)


@pytest.fixture
def database(db_url: str) -> Iterator[Database]:  # noqa: F811
    d = open_database(db_url)
    upgrade(d)
    yield d
    d.dispose()


def _run_row(d: Database, rid: str) -> None:
    with d.session() as s:
        store = [Upload("a", batch(synthetic_upload(id=rid, seq=1)))]
        if d.dialect == "sqlite":
            store_group(s, store)
        else:
            from computewatch.serverdb.ingest import store_batch

            store_batch(s, "a", store[0].batch)


def test_values_written_read_back_as_sqlalchemy_writes_them(database: Database) -> None:
    _run_row(database, "r1")
    series: list[dict[str, Any]] = [
        {"name": "gpu_util", "labels": {"gpu": "0", "é": "ü"}, "bucket_seconds": 1.5,
         "points": [[1.0, 0.25, 0.5, 1e-300]], "kind": "gauge"},
    ]  # fmt: skip
    with database.session() as s:
        conn = s.connection()
        prepared.execute(conn, insert(_PARTS), {"run_id": "r1", "seq": 2**40, "series": series})
        s.commit()
    with database.session() as s:
        part = s.scalars(select(RunSeriesPart).where(RunSeriesPart.seq == 2**40)).one()
        assert part.series == series  # through SQLAlchemy's JSON type on the way out
        conn = s.connection()
        row = prepared.first(conn, select(_RUNS.c.team, _RUNS.c.seq).where(_RUNS.c.id == "r1"), {})
        assert row == ("a", 1)
        assert prepared.first(conn, select(_RUNS.c.team).where(_RUNS.c.id == "none"), {}) is None
        changed = prepared.execute(
            conn,
            update(_RUNS).where(_RUNS.c.id == bindparam("b_id")),
            {"b_id": "r1", "name": "renamed"},
        )
        assert changed == 1
        assert prepared.scalar(conn, select(_RUNS.c.name).where(_RUNS.c.id == "r1"), {}) == (
            "renamed"
        )


def test_a_driver_error_is_sqlalchemys(database: Database) -> None:
    _run_row(database, "r1")
    with database.session() as s, pytest.raises(IntegrityError):
        prepared.execute(
            s.connection(), insert(_DOCS), {"run_id": "r1", "summary": None, "meta": {}}
        )


@pytest.fixture
def sqlite(tmp_path: Any) -> Iterator[Database]:
    d = open_database(f"sqlite:///{tmp_path / 'group.db'}")
    upgrade(d)
    yield d
    d.dispose()


def test_a_column_sqlalchemy_must_read_is_refused_on_sqlite(sqlite: Database) -> None:
    with sqlite.session() as s, pytest.raises(TypeError, match="needs SQLAlchemy"):
        prepared.first(s.connection(), select(_PARTS.c.series), {})


def test_a_refusal_after_the_runs_writes_undoes_only_that_upload(
    sqlite: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hook refuses the second upload after its run, documents, series and ledger entry
    were written and flushed: its savepoint takes them back, the first and third stay (with
    their ledger entries), and the session goes on working."""
    with sqlite.session() as s:
        before = size(s)
    real = governance_service.on_run_stored

    def refuse_middle(session: Any, team: str, run: RunUpload, signature: Any) -> None:
        real(session, team, run, signature)
        session.flush()
        if run["id"] == "two":
            raise IngestConflict("refused after its writes")

    uploads = [
        Upload("a", batch(synthetic_upload(id="one", seq=1))),
        Upload("a", batch(synthetic_upload(id="two", seq=1))),
        Upload("a", batch(synthetic_upload(id="three", seq=1))),
    ]
    with sqlite.session() as s:
        outcomes = store_group(s, uploads, on_run=refuse_middle)
    assert outcomes[0] == [{"id": "one", "seq": 1, "stored": True}]
    assert isinstance(outcomes[1], IngestConflict)
    assert outcomes[2] == [{"id": "three", "seq": 1, "stored": True}]
    with sqlite.session() as s:
        assert set(s.scalars(select(Run.id))) == {"one", "three"}
        assert set(s.scalars(select(RunDoc.run_id))) == {"one", "three"}
        assert set(s.scalars(select(RunSeriesPart.run_id))) == {"one", "three"}
        assert size(s) == before + 2


def test_a_group_of_one_refused_stores_nothing(
    sqlite: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(session: Any, team: str, run: RunUpload, signature: Any) -> None:
        raise IngestConflict("refused")

    with sqlite.session() as s:
        outcomes = store_group(s, [Upload("a", batch(synthetic_upload(id="alone")))], on_run=refuse)
    assert len(outcomes) == 1 and isinstance(outcomes[0], IngestConflict)
    with sqlite.session() as s:
        assert list(s.scalars(select(Run.id))) == []
        assert list(s.scalars(select(RunSeriesPart.run_id))) == []


def test_a_token_looked_up_outside_a_session_is_what_authenticate_says(
    database: Database,
) -> None:
    """The look-up every request makes (tokens.look_up: on SQLite one statement on a pooled
    connection) answers as :func:`tokens.authenticate` does: the token's record, None for an
    unknown, revoked, empty or overlong token."""
    with database.session() as s:
        live, info = tokens.create_token(s, team="a", scope="ingest", name="ci")
        gone, gone_info = tokens.create_token(s, team="a", scope="read")
        tokens.revoke_token(s, gone_info.id)
        s.commit()
    for secret in (live, gone, "cw_unknown", "", "x" * 201):
        with database.session() as s:
            expected = tokens.authenticate(s, secret)
        assert tokens.look_up(database.engine, secret) == expected
    assert tokens.look_up(database.engine, live) == info
