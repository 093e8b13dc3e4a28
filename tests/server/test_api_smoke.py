"""The server end to end: a real ``computewatch server`` on SQLite and on PostgreSQL."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from computewatch.upload.protocol import PROTOCOL_HEADER


def test_ingest_then_list_and_show(
    server: Callable[..., Any], make_upload: Any, make_batch: Any
) -> None:
    s = server()
    token = s.token("ml", "ingest")
    c = s.client(token)
    run = make_upload()
    r = c.post("/api/v1/runs", json=make_batch(run), headers={PROTOCOL_HEADER: "1"})
    assert r.status_code == 200, r.text
    assert r.json() == {
        "protocol": 1,
        "results": [{"id": run["id"], "seq": 1, "stored": True}],
        "features": ["series_base"],
    }
    page = c.get("/api/v1/runs").json()
    assert [x["id"] for x in page["runs"]] == [run["id"]]
    assert page["runs"][0]["team"] == "ml"
    detail = c.get(f"/api/v1/runs/{run['id']}").json()
    assert detail["run"]["kwh"] == 1.0
    assert detail["series"][0]["name"] == "gpu.utilization"
    assert s.stop() == 0  # SIGTERM: a clean stop
    out = s.output()
    assert "Traceback" not in out and "Logging error" not in out
    assert token not in out
