"""A machine's wall clock stepped back during a run (an NTP correction): the store holds an end
before the start. The upload says the run ended when it started, and the server, which refuses
an end before the start, stores it: the run is not stuck in the spool."""

from __future__ import annotations

import json
from pathlib import Path

from fastapi.testclient import TestClient
from tests.upload.conftest import T0, stored_run

from computewatch.server.app import create_app
from computewatch.serverdb.tokens import create_token
from computewatch.store import Store
from computewatch.upload.payload import build_upload
from computewatch.upload.protocol import PROTOCOL_VERSION


def test_a_run_whose_clock_stepped_back_is_stored(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "cw.db")
    run = stored_run(store)
    store.update_run(run.key, ended_at=T0 - 30.0)  # the clock went back 60 s in a 30 s run
    up = build_upload(store, store.run_by_key(run.key), seq=1, user="alice")
    store.close()
    app = create_app(f"sqlite:///{tmp_path / 'server.db'}")
    with TestClient(app) as client:
        with app.state.db.session() as s:
            token, _ = create_token(s, team="ml", scope="ingest")
        auth = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        body = json.dumps({"protocol": PROTOCOL_VERSION, "runs": [up]})
        r = client.post("/api/v1/runs", content=body, headers=auth)
        assert r.status_code == 200, r.text
        assert r.json()["results"][0]["stored"] is True
        with app.state.db.session() as s:
            token, _ = create_token(s, team="ml", scope="read")
        got = client.get(f"/api/v1/runs/{up['id']}", headers={"Authorization": f"Bearer {token}"})
        row = got.json()["run"]
        assert row["ended_at"] == row["started_at"] == T0
