"""A run's page shows the reproducibility record uploaded with it (environment and
hyperparameters), as `show` and the report do."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from tests.server.conftest import batch

from computewatch.server.app import create_app
from computewatch.serverdb.tokens import create_token
from computewatch.upload.protocol import RunUpload


@pytest.mark.parametrize("db", ["sqlite"], indirect=True)
def test_the_run_page_shows_the_record(
    db_url: str, make_upload: Callable[..., RunUpload], tmp_path: Path
) -> None:
    app = create_app(db_url)
    with TestClient(app) as client, app.state.db.session() as s:
        token, _ = create_token(s, team="lab", scope="ingest")
        auth = {"Authorization": f"Bearer {token}"}
        up = make_upload()
        up["meta"] = {
            "config": {"lr": 0.00025, "optimizer": "adamw"},
            "environment": {"python": "3.11.7", "git": {"commit": "0123abcd" * 5,
                            "branch": "main", "dirty": True, "diff_sha256": "f" * 64}},
        }  # fmt: skip
        assert client.post("/api/v1/runs", json=batch(up), headers=auth).status_code == 200
        page = client.get(f"/runs/{up['id']}", headers=auth)
        assert page.status_code == 200, page.text
        html = page.text
        assert 'id="section-repro"' in html
        assert "adamw" in html and "0.00025" in html and "0123abcd" in html
        bare = make_upload(meta={})  # a run uploaded without a record: no empty section
        client.post("/api/v1/runs", json=batch(bare), headers=auth)
        assert 'id="section-repro"' not in client.get(f"/runs/{bare['id']}", headers=auth).text
