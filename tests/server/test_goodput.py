"""Goodput from the server: the three-run lineage of tests/goodput uploaded as its runs would
upload it (each summary's ``diagnosis.goodput``), read back by ``computewatch goodput
--server``, on the usage page and on a run's page."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from tests.conftest import CW, TIMEOUT
from tests.goodput.test_lineage import KWH, PRICE, SPAN, STATUS, W0, by_hand, make_lineage
from tests.server.conftest import ServerProcess, batch, synthetic_upload

from computewatch.goodput import run_time
from computewatch.store import Store
from computewatch.upload.protocol import RunUpload


@pytest.fixture
def db() -> str:
    return "sqlite"  # what is checked here is the same on PostgreSQL (tests/serverdb)


def _uploads(tmp_path: Path) -> list[RunUpload]:
    store = Store.open(make_lineage(tmp_path / "local.db"))
    try:
        out = []
        for run in store.list_runs():
            start, end = SPAN[run.id]
            up = synthetic_upload(
                id=run.id, started_at=W0 + start, duration=end - start, gpus=2, kwh=KWH,
                cost=PRICE, status=STATUS[run.id],
            )  # fmt: skip
            up["status"] = STATUS[run.id]
            summary = up["summary"]
            assert summary is not None
            summary["diagnosis"] = {
                "schema_version": 2,
                "findings": [],
                "goodput": run_time(store, run).as_json(),  # type: ignore[typeddict-item]
            }
            up["meta"]["governance"] = {"model": "llm", "base_model": None,
                                        "stage": "pretrain", "parameters": None}  # fmt: skip
            out.append(up)
        return out
    finally:
        store.close()


def test_goodput_from_the_server(server: Callable[..., ServerProcess], tmp_path: Path) -> None:
    srv = server()
    ingest, read = srv.token("lab", "ingest"), srv.token("lab", "read")
    other = srv.token("other-team", "read")
    r = srv.client(ingest).post("/api/v1/runs", json=batch(*_uploads(tmp_path)))
    assert r.status_code == 200, r.text
    env = srv.env()
    env.pop("COMPUTEWATCH_SERVER", None)
    env.pop("COMPUTEWATCH_TOKEN", None)
    out = subprocess.run(
        [*CW, "goodput", "--model", "llm", "--json", "--server", srv.url, "--token", read],
        capture_output=True, text=True, env=env, timeout=TIMEOUT, check=False, cwd=srv.home,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    hand = by_hand()
    assert doc["total_seconds"] == pytest.approx(325.0)
    assert doc["goodput"]["seconds"] == pytest.approx(hand["goodput"], abs=1e-3)
    for cat, b in doc["badput"].items():
        assert b["seconds"] == pytest.approx(hand[cat], abs=1e-3), cat
    assert [r["run_id"] for r in doc["runs"]] == ["runA", "runB", "runC"]
    # another team sees none of these runs
    none = srv.client(other).get("/api/v1/goodput", params={"model": "llm"})
    assert none.status_code == 200 and none.json()["runs"] == []
    bad = srv.client(read).get("/api/v1/goodput")
    assert bad.status_code == 400
    usage = srv.client(read).get("/usage")
    assert usage.status_code == 200 and "Goodput by model" in usage.text
    assert "model lab/llm" in usage.text and "lost_progress" in usage.text
    page = srv.client(read).get("/runs/runB")
    assert page.status_code == 200 and 'id="section-goodput"' in page.text
