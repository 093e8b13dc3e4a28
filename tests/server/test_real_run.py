"""A real run, measured by ``computewatch run`` and uploaded as the upload client builds it
(computewatch.upload.payload.build_upload), read back through the API: its summary whole, and
the figures lists and usage sort and sum on taken from it."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import pytest

from computewatch.store import Store
from computewatch.upload.payload import build_upload
from computewatch.upload.protocol import PROTOCOL_HEADER


@pytest.mark.slow
@pytest.mark.parametrize("db", ["sqlite"], indirect=True)
def test_a_measured_run_round_trips(cw: Any, server: Callable[..., Any]) -> None:
    busy = "import time\nwhile time.process_time() < 1.0: pass\n"
    cw.ok(
        "run", "--name", "real", "--tag", "project=vision", "--interval", "0.2", "--region", "FR",
        "--", sys.executable, "-c", busy, "--password=hunter2",
    )  # fmt: skip
    with Store.open(cw.db) as store:
        run = store.find_run("real")
        upload = build_upload(store, run, seq=1, user="alice")
    s = server()
    c = s.client(s.token("vision-team", "ingest"))
    r = c.post(
        "/api/v1/runs", json={"protocol": 1, "runs": [upload]}, headers={PROTOCOL_HEADER: "1"}
    )
    assert r.status_code == 200, r.text
    d = c.get(f"/api/v1/runs/{upload['id']}").json()
    summary = upload["summary"]
    assert summary is not None
    assert d["summary"] == summary
    assert "hunter2" not in str(d)
    row = d["run"]
    assert (row["name"], row["project"], row["user"], row["status"]) == (
        "real", "vision", "alice", "completed",
    )  # fmt: skip
    assert row["duration_seconds"] == pytest.approx(summary["duration_seconds"])
    assert row["cpu_hours"] == pytest.approx(summary["cpu"]["seconds_total"] / 3600)
    assert row["cpu_hours"] >= 0.9 / 3600  # the busy loop's CPU second
    assert row["kwh"] == pytest.approx(summary["energy"]["facility"]["value"])
    assert row["co2e_kg"] == pytest.approx(summary["carbon"]["total"]["value"] / 1000)
    assert d["accounting"]["carbon"]["intensity"]["region"] == "FR"
    assert upload["series"]
    assert [(x["name"], x["labels"], x["points"]) for x in d["series"]] == [
        (x["name"], x["labels"], x["points"]) for x in upload["series"]
    ]
    usage = c.get("/api/v1/usage", params={"by": "project"}).json()["rows"]
    assert usage[0]["key"] == "vision"
    assert usage[0]["kwh"]["methods"] == [summary["energy"]["facility"]["method"]]
    assert usage[0]["cpu_hours"]["value"] == pytest.approx(row["cpu_hours"])
