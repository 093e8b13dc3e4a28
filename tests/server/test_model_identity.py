"""Models per team, with real ``computewatch run`` clients streaming to a real server: a model
is ``team/name``, so two teams with one model name are two models (their totals, tiers and
obligations apart); a run naming another team's model as its own is refused, and one naming
another team's model as its base is refused until an admin of that team grants it (then its
lineage counts the base's compute); a grant by a non-admin is refused; a revoke stops new runs
only."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import CLI, PY
from tests.server.conftest import ServerProcess, batch, flop_job

from computewatch.upload.protocol import RunUpload


def _status(srv: ServerProcess, token: str) -> dict[str, dict[str, Any]]:
    st = srv.cli("governance", "status", "--json", "--server", srv.url, "--token", token)
    assert st.returncode == 0, st.stderr
    return {m["model"]: m for m in json.loads(st.stdout)}


def _gov(srv: ServerProcess, token: str, *args: str) -> Any:
    return srv.cli("governance", *args, "--server", srv.url, "--token", token)


@pytest.mark.slow
def test_two_teams_with_one_model_name_are_two_models(
    cw: CLI,
    server: Callable[..., ServerProcess],
    make_upload: Callable[..., RunUpload],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    srv = server()
    admin = srv.token("acme", "admin")
    acme, beta = srv.token("acme", "ingest"), srv.token("beta", "ingest")
    monkeypatch.setenv("COMPUTEWATCH_SERVER", srv.url)
    monkeypatch.setenv("COMPUTEWATCH_TOKEN", acme)
    cw.ok("run", "--quiet", "--name", "a1", "--model", "frontier", "--",
          PY, flop_job(tmp_path, 2, 1e20))  # fmt: skip
    monkeypatch.setenv("COMPUTEWATCH_TOKEN", beta)
    # beta's 1.2e25 counted FLOP (over eu-systemic-risk, 1e25) under the same name
    cw.ok("run", "--quiet", "--name", "b1", "--model", "frontier", "--",
          PY, flop_job(tmp_path, 6, 2e24))  # fmt: skip

    models = _status(srv, admin)
    assert set(models) == {"acme/frontier", "beta/frontier"}
    mine, theirs = models["acme/frontier"], models["beta/frontier"]
    assert mine["runs"] == 1 and theirs["runs"] == 1
    assert mine["judged_flop"] < 1e21 < 1e25 < theirs["judged_flop"]
    assert {t["tier"]: t["state"] for t in mine["tiers"]}["eu-systemic-risk"] == "below"
    assert mine["obligations"] == []  # nothing opened against acme for beta's compute
    [o] = [o for o in theirs["obligations"] if o["tier"] == "eu-systemic-risk"]
    assert o["state"] == "open"
    text = srv.cli("governance", "status", "--server", srv.url, "--token", admin)
    assert "acme/frontier: 1 runs" in text.stdout and "beta/frontier: 1 runs" in text.stdout

    # each team's token sees its own model whole, not the other's
    seen = _status(srv, srv.token("acme", "read"))
    assert list(seen) == ["acme/frontier"] and seen["acme/frontier"]["view"] == "whole"
    assert seen["acme/frontier"]["view_note"] == "every run of it is your team's"

    # a run of beta naming acme's model as its own: refused, naming the team
    cw.ok("run", "--quiet", "--name", "b2", "--model", "acme/frontier", "--",
          PY, flop_job(tmp_path, 2, 1e20))  # fmt: skip
    pushed = cw("push", "b2")
    said = pushed.stdout + pushed.stderr
    assert pushed.returncode != 0 and "403" in said, said
    assert "team beta names team acme's model 'acme/frontier'" in said, said
    assert "an ingest token is needed" not in said  # the model is refused, not the token
    up = make_upload(gpus=1)
    up["meta"]["governance"] = {"model": "acme/frontier", "stage": "pretrain"}
    r = srv.client(beta).post("/api/v1/runs", json=batch(up))
    assert r.status_code == 403 and r.json()["error"] == "model_team", r.text
    assert "a run names its own team's models only" in r.json()["detail"]
    up["meta"]["governance"] = {"model": "beta/frontier", "stage": "pretrain"}  # its own: fine
    assert srv.client(beta).post("/api/v1/runs", json=batch(up)).status_code == 200
    assert _status(srv, admin)["beta/frontier"]["runs"] == 2

    # the notification pack and the scheduler's check name one team's model
    report = tmp_path / "pack.json"
    rp = _gov(srv, admin, "report", "frontier", "-o", str(report))  # the token's team's
    assert rp.returncode == 0, rp.stderr
    assert json.loads(report.read_text())["model"] == "acme/frontier"
    rp = _gov(srv, admin, "report", "beta/frontier", "-o", str(report))
    assert rp.returncode == 0, rp.stderr
    assert json.loads(report.read_text())["model"] == "beta/frontier"
    rp = srv.cli("governance", "report", "frontier", "-o", report, "--db", srv.db_url)
    assert rp.returncode == 1, rp.stderr
    assert "2 teams have a model named 'frontier': say which" in rp.stderr


@pytest.mark.slow
def test_a_base_model_of_another_team_needs_that_teams_grant(
    cw: CLI,
    server: Callable[..., ServerProcess],
    make_upload: Callable[..., RunUpload],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    srv = server()
    admin = srv.token("acme", "admin")
    acme, beta = srv.token("acme", "ingest"), srv.token("beta", "ingest")
    monkeypatch.setenv("COMPUTEWATCH_SERVER", srv.url)
    monkeypatch.setenv("COMPUTEWATCH_TOKEN", acme)
    cw.ok("run", "--quiet", "--name", "base", "--model", "base-7b", "--",
          PY, flop_job(tmp_path, 3, 1e24))  # fmt: skip
    monkeypatch.setenv("COMPUTEWATCH_TOKEN", beta)
    ft = ("--model", "chat-7b", "--base-model", "acme/base-7b")
    cw.ok("run", "--quiet", "--name", "ft", *ft, "--", PY, flop_job(tmp_path, 2, 1e23))
    refused = cw("push", "ft")
    said = refused.stdout + refused.stderr
    assert refused.returncode != 0 and "403" in said, said
    assert "team acme has not granted to team beta" in said, said
    assert "governance grant acme/base-7b --to beta" in said, said
    assert set(_status(srv, admin)) == {"acme/base-7b"}  # nothing of it stored

    # a grant by anyone but an admin is refused
    for token in (acme, srv.token("acme", "read"), beta):
        no = _gov(srv, token, "grant", "acme/base-7b", "--to", "beta")
        assert no.returncode == 1 and "403" in no.stderr, no.stderr
        assert "is not admin" in no.stderr
    r = srv.client(acme).post("/api/v1/governance/grants",
                              json={"model": "acme/base-7b", "team": "beta"})  # fmt: skip
    assert r.status_code == 403, r.text

    typo = _gov(srv, admin, "grant", "acme/base-7", "--to", "beta")
    assert typo.returncode == 1 and "did you mean acme/base-7b" in typo.stderr, typo.stderr
    yes = _gov(srv, admin, "grant", "acme/base-7b", "--to", "beta")
    assert yes.returncode == 0, yes.stderr
    assert "team beta's runs may name acme/base-7b" in yes.stdout
    listed = _gov(srv, admin, "grants", "--json")
    assert listed.returncode == 0, listed.stderr
    [g] = json.loads(listed.stdout)
    assert (g["model"], g["team"]) == ("acme/base-7b", "beta")
    assert g["granted_by"].startswith("admin of acme")
    assert json.loads(_gov(srv, beta, "grants", "--json").stdout) == [g]  # given to beta
    assert json.loads(_gov(srv, srv.token("gamma", "read"), "grants", "--json").stdout) == []

    cw.ok("push", "ft")  # now accepted
    models = _status(srv, admin)
    chat, base = models["beta/chat-7b"], models["acme/base-7b"]
    assert chat["base_model"] == "acme/base-7b" and chat["base_known"] is True
    # SB 53: the fine-tune's cumulative compute is its own plus its base's
    own = chat["own_flop"]["counted"]["value"]
    assert own == pytest.approx(2e23)
    assert chat["cumulative_flop"]["counted"]["value"] == pytest.approx(own + 3e24)
    assert base["cumulative_flop"]["counted"]["value"] == pytest.approx(3e24)
    # beta's own view: its run, and that the base's runs are another team's
    [mine] = _status(srv, srv.token("beta", "read")).values()
    assert mine["model"] == "beta/chat-7b" and mine["view"] == "partial"

    # a revoke stops new runs; the stored one keeps its lineage
    gone = _gov(srv, admin, "revoke", "acme/base-7b", "--from", "beta")
    assert gone.returncode == 0, gone.stderr
    again = _gov(srv, admin, "revoke", "acme/base-7b", "--from", "beta")
    assert again.returncode == 1 and "holds no grant" in again.stderr
    up = make_upload(gpus=1)
    up["meta"]["governance"] = {"model": "chat-7b", "base_model": "acme/base-7b",
                                "stage": "finetune"}  # fmt: skip
    r = srv.client(beta).post("/api/v1/runs", json=batch(up))
    assert r.status_code == 403 and r.json()["error"] == "base_model_grant", r.text
    assert _status(srv, admin)["beta/chat-7b"]["runs"] == 1

    export = tmp_path / "ledger.jsonl"
    ex = srv.cli("ledger", "export", "-o", str(export), "--server", srv.url, "--token", admin)
    assert ex.returncode == 0, ex.stderr
    kinds = [json.loads(line)["kind"] for line in export.read_text().splitlines()[1:]]
    assert kinds.count("model-grant") == 1 and kinds.count("model-revoke") == 1
    replayed = srv.cli("ledger", "replay", str(export), "--json", "--at", "1800000000")
    assert replayed.returncode == 0, replayed.stderr
    status = srv.cli("governance", "status", "--json", "--at", "1800000000", "--server",
                     srv.url, "--token", admin)  # fmt: skip
    assert replayed.stdout == status.stdout  # team/name recomputed from the export alone


@pytest.mark.parametrize("db", ["sqlite"], indirect=True)
def test_a_cycle_across_teams_is_refused_with_qualified_names(
    server: Callable[..., ServerProcess], make_upload: Callable[..., RunUpload]
) -> None:
    srv = server()
    admin = srv.token("acme", "admin")
    acme, beta = srv.token("acme", "ingest"), srv.token("beta", "ingest")

    def up(model: str, base: str | None) -> dict[str, Any]:
        u = make_upload(gpus=1)
        u["meta"]["governance"] = {"model": model, "base_model": base,
                                   "stage": "finetune" if base else "pretrain"}  # fmt: skip
        return dict(batch(u))

    assert srv.client(acme).post("/api/v1/runs", json=up("a", None)).status_code == 200
    assert srv.client(beta).post("/api/v1/runs", json=up("b", None)).status_code == 200
    for model, team in (("acme/a", "beta"), ("beta/b", "acme")):
        assert _gov(srv, admin, "grant", model, "--to", team).returncode == 0
    assert srv.client(beta).post("/api/v1/runs", json=up("b", "acme/a")).status_code == 200
    r = srv.client(acme).post("/api/v1/runs", json=up("a", "beta/b"))
    assert r.status_code == 422 and r.json()["error"] == "lineage", r.text
    assert "acme/a -> beta/b -> acme/a" in r.json()["detail"]
    same = srv.client(acme).post("/api/v1/runs", json=up("acme/a", "a"))
    assert same.status_code == 422 and "acme/a -> acme/a" in same.json()["detail"]
    bad = srv.client(acme).post("/api/v1/runs", json=up("acme/", None))
    assert bad.status_code == 422 and "names a team but no model" in bad.json()["detail"]
