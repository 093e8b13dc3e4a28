"""A run's series as parts: a full upload replaces them, an upload that continues the latest
one (``series_base``) appends its new points, reading merges them, compaction keeps the merge
bounded, and migration 0007 turns the old per-series rows into one part per run (and back)."""

from __future__ import annotations

import json
import sqlite3
import uuid
from pathlib import Path
from typing import Any

from sqlalchemy import func, select
from starlette.testclient import TestClient
from tests.serverdb.conftest import migrate_to

from computewatch.server.app import create_app
from computewatch.serverdb.engine import open_database, upgrade
from computewatch.serverdb.models import RunSeriesPart
from computewatch.serverdb.series import COMPACT_AFTER, merge_parts, read_series
from computewatch.serverdb.tokens import create_token
from computewatch.upload.protocol import FEATURE_SERIES_BASE, PROTOCOL_HEADER

T0 = 1_796_000_000.0


def _series(
    name: str, start: int, n: int, *, labels: dict[str, str] | None = None
) -> dict[str, Any]:
    return {
        "name": name,
        "labels": labels or {},
        "bucket_seconds": 0.0,
        "points": [[T0 + i, float(i), float(i), float(i)] for i in range(start, start + n)],
        "kind": "gauge",
    }


def test_a_later_part_replaces_points_from_its_first_time_on() -> None:
    full = [_series("gpu", 0, 10), _series("cpu", 0, 10)]
    delta = [_series("gpu", 9, 3)]  # the open bucket 9 again, then 10 and 11
    delta[0]["points"][0][3] = 99.0  # bucket 9 filled further
    merged = merge_parts([full, delta, [_series("mem", 0, 2)]])
    assert [s["name"] for s in merged] == ["gpu", "cpu", "mem"]
    gpu = merged[0]["points"]
    assert [p[0] - T0 for p in gpu] == list(range(12))
    assert gpu[9][3] == 99.0
    assert len(merged[1]["points"]) == 10  # left out of the delta: kept
    same_name = merge_parts([[_series("gpu", 0, 2, labels={"gpu": "0"})],
                             [_series("gpu", 0, 2, labels={"gpu": "1"})]])  # fmt: skip
    assert len(same_name) == 2  # labels tell series apart


class _Server:
    def __init__(self, url: str) -> None:
        self.app = create_app(url)
        with self.app.state.db.session() as s:
            token, _ = create_token(s, team="lab", scope="ingest")
        self.headers = {"Authorization": f"Bearer {token}", PROTOCOL_HEADER: "1"}
        self.client = TestClient(self.app)

    def post(self, run: dict[str, Any]) -> dict[str, Any]:
        r = self.client.post(
            "/api/v1/runs", json={"protocol": 1, "runs": [run]}, headers=self.headers
        )
        assert r.status_code == 200, r.text
        doc: dict[str, Any] = r.json()
        return doc

    def series(self, run_id: str) -> list[dict[str, Any]]:
        with self.app.state.db.session() as s:
            return [dict(x) for x in read_series(s, [run_id])[run_id]]

    def parts(self, run_id: str) -> int:
        with self.app.state.db.session() as s:
            n = s.scalar(select(func.count()).where(RunSeriesPart.run_id == run_id))
            return int(n or 0)


def _run(
    run_id: str, seq: int, series: list[dict[str, Any]], base: int | None = None
) -> dict[str, Any]:
    run: dict[str, Any] = {
        "id": run_id, "seq": seq, "final": False, "name": "r", "status": "running",
        "exit_code": None, "started_at": T0, "ended_at": None, "host": "h", "user": "u",
        "project": None, "tags": {"k": "v"}, "command": ["python"], "summary": None, "meta": {},
        "series": series,
    }  # fmt: skip
    if base is not None:
        run["series_base"] = base
    return run


def test_uploads_that_continue_the_latest_append_and_others_are_sent_back(db_url: str) -> None:
    srv = _Server(db_url)
    rid = uuid.uuid4().hex
    with srv.client:
        doc = srv.post(_run(rid, 1, [_series("gpu", 0, 10), _series("cpu", 0, 10)]))
        assert FEATURE_SERIES_BASE in doc["features"]
        assert doc["results"] == [{"id": rid, "seq": 1, "stored": True}]
        doc = srv.post(_run(rid, 2, [_series("gpu", 9, 3)], base=1))
        assert doc["results"] == [{"id": rid, "seq": 2, "stored": True}]
        got = srv.series(rid)
        assert [len(s["points"]) for s in got] == [12, 10]
        # a base that is not the run's latest: nothing stored, the whole state asked for
        doc = srv.post(_run(rid, 3, [_series("gpu", 11, 3)], base=1))
        assert doc["results"] == [{"id": rid, "seq": 3, "stored": False, "needs_full": True}]
        assert [len(s["points"]) for s in srv.series(rid)] == [12, 10]
        doc = srv.post(_run(uuid.uuid4().hex, 2, [_series("gpu", 0, 1)], base=1))  # unknown run
        assert doc["results"][0]["needs_full"] is True
        # a full upload replaces every part
        srv.post(_run(rid, 3, [_series("gpu", 0, 2)]))
        assert [len(s["points"]) for s in srv.series(rid)] == [2]
        assert srv.parts(rid) == 1
        # a base at or after seq is malformed
        r = srv.client.post(
            "/api/v1/runs",
            json={"protocol": 1, "runs": [_run(rid, 4, [], base=4)]},
            headers=srv.headers,
        )
        assert r.status_code == 422 and "series_base" in r.text


def test_many_appends_stay_few_parts_and_read_the_same(db_url: str) -> None:
    """On SQLite and PostgreSQL (whose appends go in one round trip with the upload's other
    writes, and whose compaction reads the parts outside it)."""
    srv = _Server(db_url)
    rid = uuid.uuid4().hex
    with srv.client:
        srv.post(_run(rid, 1, [_series("gpu", 0, 1)]))
        for seq in range(2, 2 * COMPACT_AFTER + 5):
            srv.post(_run(rid, seq, [_series("gpu", seq - 2, 2)], base=seq - 1))
            assert srv.parts(rid) <= COMPACT_AFTER + 1
        points = srv.series(rid)[0]["points"]
        assert [p[0] - T0 for p in points] == list(range(2 * COMPACT_AFTER + 4))


def _to(url: str, revision: str, down: bool = False) -> None:
    db = open_database(url)
    try:
        migrate_to(db, revision, down=down)
    finally:
        db.dispose()


def test_migration_0007_moves_each_runs_series_into_one_part(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'server.db'}"
    _to(url, "0006")
    conn = sqlite3.connect(tmp_path / "server.db")
    with conn:
        for rid, seq in (("a", 3), ("b", 1)):
            conn.execute(
                "INSERT INTO runs (id, team, user, host, status, started_at, started_day, seq, "
                "final, updated_at, gpu_count, gpu_hours, command, tags) "
                "VALUES (?, 't', 'u', 'h', 'running', 0, '1970-01-01', ?, 0, 0, 0, 0, '[]', '{}')",
                (rid, seq),
            )
        rows = [("a", "gpu", {"gpu": "0"}, [[1.0, 1, 1, 1]]), ("a", "cpu", {}, [[1.0, 2, 2, 2]]),
                ("b", "gpu", {}, [[5.0, 3, 3, 3], [6.0, 4, 4, 4]])]  # fmt: skip
        for rid, name, labels, points in rows:
            conn.execute(
                "INSERT INTO run_series (run_id, name, labels, bucket_seconds, points) "
                "VALUES (?, ?, ?, 0, ?)",
                (rid, name, json.dumps(labels), json.dumps(points)),
            )
    conn.close()
    db = open_database(url)
    upgrade(db)
    with db.session() as s:
        got = read_series(s, ["a", "b"])
        seqs = dict(s.execute(select(RunSeriesPart.run_id, RunSeriesPart.seq)).all())
    db.dispose()
    assert seqs == {"a": 3, "b": 1}
    assert [(x["name"], x["labels"], x["points"]) for x in got["a"]] == [
        ("gpu", {"gpu": "0"}, [[1.0, 1, 1, 1]]), ("cpu", {}, [[1.0, 2, 2, 2]]),
    ]  # fmt: skip
    assert got["b"][0]["points"] == [[5.0, 3, 3, 3], [6.0, 4, 4, 4]]
    _to(url, "0006", down=True)
    conn = sqlite3.connect(tmp_path / "server.db")
    back = conn.execute(
        "SELECT run_id, name, points FROM run_series ORDER BY run_id, id"
    ).fetchall()
    conn.close()
    assert [(r, n, json.loads(p)) for r, n, p in back] == [
        ("a", "gpu", [[1.0, 1, 1, 1]]), ("a", "cpu", [[1.0, 2, 2, 2]]),
        ("b", "gpu", [[5.0, 3, 3, 3], [6.0, 4, 4, 4]]),
    ]  # fmt: skip


def test_last_points_from_the_newest_part_or_the_merge(tmp_path: Path) -> None:
    from computewatch.serverdb.series import last_points

    srv = _Server(f"sqlite:///{tmp_path / 'server.db'}")
    a, b, c = (uuid.uuid4().hex for _ in range(3))
    with srv.client:
        srv.post(_run(a, 1, [_series("gpu", 0, 5), _series("cpu", 0, 5)]))
        srv.post(_run(a, 2, [_series("gpu", 4, 3)], base=1))  # cpu had no new points
        srv.post(_run(b, 1, [_series("gpu", 0, 2)]))
        srv.post(_run(c, 1, [_series("cpu", 0, 2)]))
        srv.post(_run(c, 2, [_series("cpu", 1, 2)], base=1))  # no gpu at all
        with srv.app.state.db.session() as s:
            got = last_points(s, [a, b, c], ["gpu", "cpu"])
    assert got[a] == {("gpu", ()): [T0 + 6, 6.0, 6.0, 6.0], ("cpu", ()): [T0 + 4, 4.0, 4.0, 4.0]}
    assert got[b] == {("gpu", ()): [T0 + 1, 1.0, 1.0, 1.0]}
    assert got[c] == {("cpu", ()): [T0 + 2, 2.0, 2.0, 2.0]}
