"""Account caps fed by real ``computewatch run`` clients and a real server: every run counts
against a FLOP cap whatever it declares (evaluation and inference left out), reported with its
method mix; verification needs evidence; account names follow the team-name rule; the HTTP
check types its fields strictly; runs on simulated devices count as the server says."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import CLI, PY
from tests.server.conftest import ServerProcess, batch, flop_job, started_this_month

from computewatch.upload.protocol import RunUpload


def _check(srv: ServerProcess, admin: str, account: str, *extra: str) -> dict[str, Any]:
    r = srv.cli("accounts", "check", account, "--gpus", "1", "--hours", "0.01", "--json",
             "--server", srv.url, "--token", admin, *extra)  # fmt: skip
    assert r.returncode in (0, 1), r.stderr
    doc: dict[str, Any] = json.loads(r.stdout)
    assert (r.returncode == 0) == (doc["decision"] == "allow")
    return doc


def _clean(r: subprocess.CompletedProcess[str]) -> str:
    """Standard error of a refused command: one message, no traceback."""
    assert r.returncode != 0 and "Traceback" not in r.stderr, r.stderr
    return r.stderr


@pytest.mark.slow
def test_a_flop_cap_counts_undeclared_runs_and_leaves_out_eval(
    cw: CLI, server: Callable[..., ServerProcess], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    srv = server()
    ingest, admin = srv.token("beta", "ingest"), srv.token("ops", "admin")
    db = ("--db", srv.db_url)
    assert "team name 'bad name!'" in _clean(
        srv.cli("accounts", "add", "bad name!", "--legal-name", "Bad Ltd", *db)
    )
    added = srv.cli("accounts", "add", "beta", "--legal-name", "Beta Ltd",
                 "--flop-per-month", "1e21", *db)  # fmt: skip
    assert added.returncode == 0, added.stderr
    assert _check(srv, admin, "beta")["decision"] == "allow"

    monkeypatch.setenv("COMPUTEWATCH_SERVER", srv.url)
    monkeypatch.setenv("COMPUTEWATCH_TOKEN", ingest)
    cw.ok("run", "--quiet", "--name", "ev", "--model", "beta-m", "--stage", "eval",
          "--", PY, flop_job(tmp_path, 2, 1e24))  # fmt: skip
    doc = _check(srv, admin, "beta")
    assert doc["decision"] == "allow", doc  # 2e24 of evaluation: not training compute
    assert doc["used_this_month"]["left_out"] == {"eval": 1}
    assert doc["used_flop_high_this_month"] == 0.0

    cw.ok("run", "--quiet", "--name", "undeclared", "--", PY, flop_job(tmp_path, 5, 1e24))
    doc = _check(srv, admin, "beta")
    assert doc["decision"] == "deny", doc  # 5e24 counted, no --model: over the 1e21 cap
    use = doc["used_this_month"]
    assert use["undeclared_runs"] == 1 and use["runs"] == 1
    assert use["flop_by_method"]["counted"] == pytest.approx(5e24, rel=0.01)
    assert doc["used_flop_high_this_month"] == pytest.approx(5e24, rel=0.01)
    said = doc["reasons"][0]
    assert said.startswith("FLOP cap") and "counted" in said and "1 of 1 runs undeclared" in said

    # verification rests on evidence; 'set --status verified' is not a way round it
    refused = _clean(srv.cli("accounts", "set", "beta", "--status", "verified", *db))
    assert "accounts verify beta --evidence TEXT --by WHO" in refused
    assert "--evidence" in _clean(srv.cli("accounts", "verify", "beta", *db))
    shown = json.loads(srv.cli("accounts", "show", "beta", "--json", *db).stdout)
    assert shown["status"] == "unverified" and shown["verified_at"] is None
    ok = srv.cli("accounts", "verify", "beta", "--evidence", "certificate of incorporation "
              "12345 checked", "--by", "kim", "--valid-days", "30", *db)  # fmt: skip
    assert ok.returncode == 0 and "re-verification due" in ok.stdout, ok.stderr
    shown = json.loads(srv.cli("accounts", "show", "beta", "--json", *db).stdout)
    assert shown["status"] == "verified" and shown["verified_at"] is not None
    assert shown["reverify_due"] is not None and shown["reverify_due"] > shown["verified_at"]
    pii = json.loads(srv.cli("accounts", "show", "beta", "--pii", "--json", *db).stdout)["pii"]
    assert pii["verified_by"] == "kim" and "12345" in pii["verification_evidence"]


BAD_BODIES = [
    ('{"gpus": "8", "hours": 1}', "gpus"),
    ('{"gpus": 8, "hours": "1"}', "hours"),
    ('{"gpus": 8, "hours": NaN}', "hours"),
    ('{"gpus": 8, "hours": Infinity}', "hours"),
    ('{"gpus": true, "hours": 1}', "gpus"),
    ('{"gpus": 8, "hours": 1, "gpu": "H100"}', "gpu"),
]


@pytest.mark.parametrize("db", ["sqlite"], indirect=True)
def test_the_http_check_types_its_fields_strictly(server: Callable[..., ServerProcess]) -> None:
    srv = server()
    c = srv.client(srv.token("ops", "admin"))
    for body, field in BAD_BODIES:
        r = c.post("/api/v1/accounts/beta/check", content=body,
                   headers={"content-type": "application/json"})  # fmt: skip
        assert r.status_code == 422, (body, r.text)
        assert r.json()["detail"].startswith(f"{field}: "), (body, r.text)
        assert "8784" not in r.text  # NaN is not "over the limit": it is not a number
    r = c.post("/api/v1/accounts/beta/check", json={"gpus": 8, "hours": 2})  # whole hours
    assert r.status_code == 200 and r.json()["decision"] == "deny", r.text  # no such account


@pytest.mark.parametrize("db", ["sqlite"], indirect=True)
def test_the_check_counts_simulated_runs_as_the_server_says(
    server: Callable[..., ServerProcess],
    make_upload: Callable[..., RunUpload],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A model trained on simulated devices: with ``count_simulated`` its compute takes an
    unverified account's job past 1e25, and the month's use counts the run."""
    config = tmp_path / "server.toml"
    config.write_text("[governance]\ncount_simulated = true\n")
    monkeypatch.setenv("COMPUTEWATCH_CONFIG", str(config))
    srv = server()
    ingest, admin = srv.token("gamma", "ingest"), srv.token("ops", "admin")
    added = srv.cli("accounts", "add", "gamma", "--legal-name", "Gamma", "--db", srv.db_url)
    assert added.returncode == 0, added.stderr
    up = make_upload(gpus=8, gpu_model="H100-SXM", started_at=started_this_month(3600.0))
    summary = up["summary"]
    assert summary is not None
    summary["flops"] = {"value": 2e25, "low": 1.8e25, "high": 2.2e25, "unit": "FLOP",
                        "method": "estimated", "assumptions": [], "source": "test"}  # fmt: skip
    up["meta"]["governance"] = {"model": "sim-m", "base_model": None, "stage": "pretrain",
                                "parameters": None}  # fmt: skip
    assert srv.client(ingest).post("/api/v1/runs", json=batch(up)).status_code == 200
    doc = _check(srv, admin, "gamma", "--model", "sim-m")
    assert doc["decision"] == "deny" and "eu-systemic-risk" in doc["reasons"][0], doc
    assert doc["used_this_month"]["left_out"] == {} and doc["used_this_month"]["runs"] == 1
