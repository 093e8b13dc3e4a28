"""Fuzzing ``POST /api/v1/runs`` in-process (FastAPI's TestClient on a SQLite file): any body,
and valid batches with any field replaced by any JSON value, answer 200 or a 4xx with a reason,
never a 500; a refused batch leaves the database as it was, an accepted one stores every run
whole (its tags and series with it)."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import func, select
from tests.server.conftest import batch, synthetic_upload

from computewatch.server.app import create_app
from computewatch.serverdb.models import Run, RunChange, RunSeriesPart, RunTag
from computewatch.serverdb.series import read_series
from computewatch.serverdb.tokens import create_token
from computewatch.upload.protocol import RUN_STATUSES

BASE = settings.get_profile("computewatch-fuzz")  # tests/fuzz/conftest.py


def fuzz(n: int) -> settings:
    return settings(BASE, max_examples=n * BASE.max_examples)


FIELDS = [
    "id", "seq", "final", "name", "status", "exit_code", "started_at", "ended_at", "host",
    "user", "project", "tags", "command", "summary", "meta", "series", "series_base",
]  # fmt: skip


class Ingest:
    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self.client = TestClient(app, raise_server_exceptions=False)
        self.headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}

    def snapshot(self) -> tuple[Any, ...]:
        with self.app.state.db.session() as s:
            return (
                sorted(s.execute(select(Run.id, Run.seq)).all()),
                s.scalar(select(func.count()).select_from(RunTag)),
                s.scalar(select(func.count()).select_from(RunSeriesPart)),
                s.scalar(select(func.count()).select_from(RunChange)),
            )

    def post(self, body: bytes) -> Any:
        return self.client.post("/api/v1/runs", content=body, headers=self.headers)

    def check(self, body: bytes, sent: Any = None) -> None:
        before = self.snapshot()
        r = self.post(body)
        assert r.status_code < 500, r.text
        if r.status_code != 200:
            doc = r.json()
            assert doc["error"] and doc["detail"], doc
            assert self.snapshot() == before
            return
        results = r.json()["results"]
        assert isinstance(sent, dict)
        runs = sent["runs"]
        assert len(results) == len(runs)
        with self.app.state.db.session() as s:
            for run, res in zip(runs, results, strict=True):
                row = s.get(Run, run["id"])
                assert row is not None and row.seq >= run["seq"]
                assert row.status in RUN_STATUSES  # the schema's promises, as stored
                assert row.ended_at is None or row.ended_at >= row.started_at
                if res["stored"] and row.seq == run["seq"] and run.get("series_base") is None:
                    tags = s.scalar(select(func.count()).where(RunTag.run_id == run["id"]))
                    series = len(read_series(s, [run["id"]])[run["id"]])
                    names = {(x["name"], tuple(sorted(x["labels"].items()))) for x in run["series"]}
                    assert (tags, series) == (len(run["tags"]), len(names))


@pytest.fixture(scope="module")
def ingest() -> Iterator[Ingest]:
    with tempfile.TemporaryDirectory() as d:
        app = create_app(f"sqlite:///{Path(d) / 'server.db'}")
        with app.state.db.session() as s:
            token, _ = create_token(s, team="fuzz", scope="ingest")
        i = Ingest(app, token)
        with i.client:
            yield i


def _dumps(v: Any) -> bytes:
    return json.dumps(v, allow_nan=True).encode("utf-8", "surrogatepass")


@fuzz(150)
@given(data=st.data())
def test_any_json_body(ingest: Ingest, fz: ModuleType, data: st.DataObject) -> None:
    body = data.draw(fz.values)
    ingest.check(_dumps(body))


@fuzz(100)
@given(raw=st.binary(max_size=200))
def test_any_bytes(ingest: Ingest, raw: bytes) -> None:
    ingest.check(raw)


@fuzz(300)
@given(data=st.data())
def test_valid_batches_with_one_field_replaced(
    ingest: Ingest, fz: ModuleType, data: st.DataObject
) -> None:
    runs = [synthetic_upload() for _ in range(data.draw(st.integers(1, 3)))]
    doc: Any = batch(*runs)
    target = data.draw(st.integers(0, len(runs) - 1))
    field = data.draw(st.sampled_from([*FIELDS, "protocol", "runs"]))
    value = data.draw(fz.values)
    if field == "protocol":
        doc["protocol"] = value
    elif field == "runs":
        doc["runs"] = value
    else:
        doc["runs"][target][field] = value
    ingest.check(_dumps(doc), doc)


@fuzz(150)
@given(data=st.data())
def test_valid_batches_with_nested_junk(
    ingest: Ingest, fz: ModuleType, data: st.DataObject
) -> None:
    run: Any = synthetic_upload()
    where = data.draw(st.sampled_from(["summary", "meta", "series", "tags"]))
    value = data.draw(fz.values)
    if where == "summary":
        key = data.draw(st.sampled_from(["gpus", "cpu", "energy", "carbon", "cost", "flops",
                                         "duration_seconds", "diagnosis", "command"]))  # fmt: skip
        run["summary"][key] = value
    elif where == "meta":
        run["meta"][data.draw(fz.nasty_text)] = value
    elif where == "series":
        run["series"][0][data.draw(st.sampled_from(["name", "labels", "bucket_seconds"]))] = value
        run["series"][0]["points"].append(data.draw(st.lists(fz.scalars, max_size=5)))
    else:
        run["tags"][data.draw(fz.nasty_text)] = value
    doc = batch(run)
    ingest.check(_dumps(doc), doc)


_T0 = 1_796_000_000.0


@fuzz(60)
@given(data=st.data())
def test_continuations_add_up_as_documented(ingest: Ingest, data: st.DataObject) -> None:
    """A run uploaded whole, then any sequence of continuations (right or wrong base, series
    old and new, points overlapping or not) and whole uploads: the stored series are always
    what the protocol says (a continuation of the latest merges, any other changes nothing)."""
    from computewatch.serverdb.series import merge_parts, read_series

    run: Any = synthetic_upload()
    rid = run["id"]
    names = ["a", "b", "c"]

    def series(start: int) -> list[dict[str, Any]]:
        chosen = data.draw(st.lists(st.sampled_from(names), unique=True, max_size=3))
        out = []
        for name in chosen:
            n = data.draw(st.integers(0, 4))
            first = start + data.draw(st.integers(-2, 2))
            out.append(
                {
                    "name": name,
                    "labels": {},
                    "bucket_seconds": 0.0,
                    "kind": "gauge",
                    "points": [[_T0 + max(0, first) + i, 1.0, 2.0, 3.0] for i in range(n)],
                }
            )
        return out  # fmt: skip

    held: list[Any] = []
    latest = 0
    for seq in range(1, data.draw(st.integers(2, 8)) + 1):
        up = {**run, "seq": seq, "series": series(seq * 3)}
        if seq > 1 and data.draw(st.booleans()):
            up["series_base"] = data.draw(st.sampled_from([latest, max(1, seq - 2), seq - 1]))
        r = ingest.post(_dumps(batch(up)))
        assert r.status_code == 200, r.text
        (res,) = r.json()["results"]
        base = up.get("series_base")
        if base is None:
            assert res == {"id": rid, "seq": seq, "stored": True}
            held, latest = [up["series"]], seq
        elif base == latest:
            assert res == {"id": rid, "seq": seq, "stored": True}
            held.append(up["series"])
            latest = seq
        else:
            assert res == {"id": rid, "seq": seq, "stored": False, "needs_full": True}
        with ingest.app.state.db.session() as s:
            got = read_series(s, [rid])[rid]
        assert json.loads(json.dumps(got)) == json.loads(json.dumps(merge_parts(held)))
