"""Bad input to the model grants: ``governance grant|revoke|grants`` with a wrong flag, a bad
team or model name, a model without its team, an unknown model, a grant that does not exist or
a server out of reach is said in one line with its exit status (2: usage, after argparse's
usage lines; 1: refused, that line alone), never a traceback; the HTTP endpoints refuse a body
of the wrong shape (422, the field named) and a token that is not an admin's (403)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from starlette.testclient import TestClient
from tests.conftest import PY, free_loopback_port

from computewatch.server.app import create_app
from computewatch.serverdb.engine import open_database, upgrade
from computewatch.serverdb.governance_models import ModelRun
from computewatch.serverdb.tokens import create_token


def _cli(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, COMPUTEWATCH_HOME=str(home))
    for k in ("COMPUTEWATCH_SERVER", "COMPUTEWATCH_TOKEN", "COMPUTEWATCH_CONFIG"):
        env.pop(k, None)
    return subprocess.run([PY, "-m", "computewatch", *args], capture_output=True, text=True,
                          timeout=120, env=env, check=False)  # fmt: skip


def _model_run(team: str, model: str) -> ModelRun:
    return ModelRun(run_id=f"{team}-{model}", team=team, model=f"{team}/{model}",
                    base_model=None, stage="pretrain", status="completed", started_at=1.0,
                    duration_seconds=1.0, gpu_hours=1.0, devices=[], updated_at=1.0)  # fmt: skip


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'server.db'}"
    db = open_database(url)
    upgrade(db)
    with db.session() as session:
        session.add(_model_run("acme", "base-7b"))
        session.commit()
    db.dispose()
    return url


UNREACHABLE = f"http://127.0.0.1:{free_loopback_port()}"


@pytest.mark.parametrize(
    ("args", "status", "says"),
    [
        (["grant"], 2, "required"),
        (["grant", "acme/base-7b"], 2, "--to"),
        (["grant", "acme/base-7b", "--to", "a b"], 2, "team name 'a b'"),
        (["grant", "acme/base-7b", "--to", ""], 2, "team name ''"),
        (["revoke", "acme/base-7b", "--to", "beta"], 2, "--from"),
        (["grant", "base-7b", "--to", "beta", "@db"], 1, "name the model with its team"),
        (["grant", "acme/base-7b", "--to", "acme", "@db"], 1, "team acme's own model"),
        (["grant", "acme/base-7", "--to", "beta", "@db"], 1, "did you mean acme/base-7b"),
        (["grant", "bad team/x", "--to", "beta", "@db"], 1, "team name 'bad team'"),
        (["grant", "acme/\u2028", "--to", "beta", "@db"], 1, "no model named"),
        (["revoke", "acme/base-7b", "--from", "beta", "@db"], 1, "holds no grant"),
        (["grant", "acme/base-7b", "--to", "beta", "--server", UNREACHABLE, "--token", "t"], 1,
         "cannot reach the server"),
        (["grants", "--server", UNREACHABLE], 1, "cannot reach the server"),
    ],
)  # fmt: skip
def test_bad_grant_input_is_one_line(
    args: list[str], status: int, says: str, db_url: str, tmp_path: Path
) -> None:
    args = [a for a in args if a != "@db"] + (["--db", db_url] if "@db" in args else [])
    r = _cli("governance", *args, home=tmp_path / "home")
    assert r.returncode == status, r.stderr
    lines = r.stderr.strip().splitlines()
    assert says in lines[-1], r.stderr  # argparse's usage lines before its error's, else none
    assert "Traceback" not in r.stderr
    assert status == 2 or len(lines) == 1, r.stderr


def test_the_grant_endpoints_refuse_bad_bodies_and_non_admins(db_url: str) -> None:
    app = create_app(db_url)
    with app.state.db.session() as s:
        admin, _ = create_token(s, team="acme", scope="admin")
        ingest, _ = create_token(s, team="acme", scope="ingest")
    with TestClient(app) as client:
        url = "/api/v1/governance/grants"
        for body, field in (
            ({"model": "acme/base-7b"}, "team"),
            ({"model": 5, "team": "beta"}, "model"),
            ({"model": "acme/base-7b", "team": ["beta"]}, "team"),
            ({"model": "acme/base-7b", "team": "beta", "until": 1}, "until"),
            ({"model": "x" * 402, "team": "beta"}, "model"),
        ):
            for path in (url, url + "/revoke"):
                r = client.post(path, json=body, headers={"Authorization": f"Bearer {admin}"})
                assert r.status_code == 422, r.text
                assert field in r.text
        bad = {"Authorization": f"Bearer {admin}", "Content-Type": "application/json"}
        r = client.post(url, content=b"{", headers=bad)
        assert r.status_code == 422
        good = {"model": "acme/base-7b", "team": "beta"}
        r = client.post(url, json=good, headers={"Authorization": f"Bearer {ingest}"})
        assert r.status_code == 403 and "not admin" in r.text
        assert client.post(url, json=good).status_code == 401
        r = client.post(url, json={"model": "base-7b", "team": "b c"},
                        headers={"Authorization": f"Bearer {admin}"})  # fmt: skip
        assert r.status_code == 422 and "team name 'b c'" in r.json()["detail"]
        r = client.post(url + "/revoke", json=good, headers={"Authorization": f"Bearer {admin}"})
        assert r.status_code == 404 and "holds no grant" in r.json()["detail"]
        r = client.post(url, json=good, headers={"Authorization": f"Bearer {admin}"})
        assert r.status_code == 200 and r.json()["model"] == "acme/base-7b"
        again = client.post(url, json=good, headers={"Authorization": f"Bearer {admin}"})
        assert again.json() == r.json()  # granting again changes nothing
    app.state.db.dispose()
