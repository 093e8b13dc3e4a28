"""Governance fed by real ``computewatch run`` clients and a real server: tiers crossed at the
moment the compute crossed them (event time), deadlines counted from that moment, and an
overdue obligation said first."""

from __future__ import annotations

import datetime as dt
import json
import sqlite3
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.orm import Session
from tests.conftest import CLI, PY, TIMEOUT
from tests.server.conftest import ServerProcess, batch, flop_job

from computewatch.ledger.reports import SignatureStatus
from computewatch.serverdb.engine import open_database
from computewatch.serverdb.ingest import store_batch
from computewatch.serverdb.lineage_ingest import on_stored
from computewatch.upload.protocol import RunUpload

DAY = 86_400.0


def _backdate(db: Path, name: str, seconds: float) -> float:
    """Move a stored run ``seconds`` into the past, as if it had run then; its new end."""
    with closing(sqlite3.connect(db)) as c, c:
        c.execute(
            "UPDATE runs SET started_at = started_at - ?, ended_at = ended_at - ?, "
            "data_until = data_until - ? WHERE name = ?",
            (seconds, seconds, seconds, name),
        )
        (ended,) = c.execute("SELECT ended_at FROM runs WHERE name = ?", (name,)).fetchone()
    return float(ended)


def _status(srv: ServerProcess, admin: str, *extra: str) -> list[dict[str, Any]]:
    st = srv.cli("governance", "status", "--json", "--server", srv.url, "--token", admin, *extra)
    assert st.returncode == 0, st.stderr
    doc: list[dict[str, Any]] = json.loads(st.stdout)
    return doc


def _iso_seconds(text: str) -> float:
    return dt.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC).timestamp()


@pytest.mark.slow
def test_a_backdated_run_pushed_late_is_overdue_from_its_crossing(
    cw: CLI, server: Callable[..., ServerProcess], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    srv = server()
    ingest, admin = srv.token("lab", "ingest"), srv.token("lab", "admin")
    # 6 steps of 2e24 counted FLOP: 1.2e25, over eu-systemic-risk (1e25, 14 days)
    cw.ok("run", "--quiet", "--name", "late", "--model", "late-model", "--interval", "0.2",
          "--", PY, flop_job(tmp_path, 6, 2e24))  # fmt: skip
    ended = _backdate(cw.db, "late", 20 * DAY)
    monkeypatch.setenv("COMPUTEWATCH_SERVER", srv.url)
    monkeypatch.setenv("COMPUTEWATCH_TOKEN", ingest)
    cw.ok("push")

    [m] = _status(srv, admin)
    tiers = {t["tier"]: t for t in m["tiers"]}
    tier = tiers["eu-systemic-risk"]
    assert tier["state"] == "crossed"
    crossed = _iso_seconds(tier["crossed_at"])
    assert crossed == pytest.approx(ended, abs=2)  # when the run ended, not when it arrived
    assert _iso_seconds(tier["noticed_at"]) > crossed + 19 * DAY
    assert _iso_seconds(tier["deadline"]) == pytest.approx(crossed + 14 * DAY, abs=2)
    assert tier["days_left"] == pytest.approx(-6.0, abs=0.1) and tier["overdue"] is True
    assert "14 days from the crossing" in tier["deadline_rule"]
    [o] = [o for o in m["obligations"] if o["tier"] == "eu-systemic-risk"]
    assert o["overdue"] is True and o["days_left"] < -5.9
    assert o["crossed_at"] == tier["crossed_at"] and o["deadline"] == tier["deadline"]
    gpai = tiers["eu-gpai"]  # no deadline: dated, never overdue
    assert gpai["crossed_at"] is not None and gpai["deadline"] is None and not gpai["overdue"]

    text = srv.cli("governance", "status", "--server", srv.url, "--token", admin)
    assert text.returncode == 0, text.stderr
    first = text.stdout.splitlines()[0]
    assert first.startswith("OVERDUE: lab/late-model") and "eu-systemic-risk" in first, text.stdout

    export = tmp_path / "ledger.jsonl"
    ex = srv.cli("ledger", "export", "-o", str(export), "--server", srv.url, "--token", admin)
    assert ex.returncode == 0, ex.stderr
    replayed = srv.cli("ledger", "replay", str(export), "--json", "--at", "1800000000")
    assert replayed.returncode == 0, replayed.stderr
    status = srv.cli("governance", "status", "--json", "--at", "1800000000", "--server",
                  srv.url, "--token", admin)  # fmt: skip
    assert replayed.stdout == status.stdout  # the dates, recomputed from the export alone


@pytest.mark.slow
def test_a_lineage_cycle_is_refused_at_ingest_and_a_stored_one_breaks_nothing(
    cw: CLI,
    server: Callable[..., ServerProcess],
    make_upload: Callable[..., RunUpload],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    srv = server()
    ingest, admin = srv.token("lab", "ingest"), srv.token("lab", "admin")
    monkeypatch.setenv("COMPUTEWATCH_SERVER", srv.url)
    monkeypatch.setenv("COMPUTEWATCH_TOKEN", ingest)
    job = flop_job(tmp_path, 2, 1e20)
    cw.ok("run", "--quiet", "--name", "a", "--model", "cyc-a", "--base-model", "cyc-b",
          "--", PY, job)  # fmt: skip
    cw.ok("run", "--quiet", "--name", "b", "--model", "cyc-b", "--base-model", "cyc-a",
          "--", PY, job)  # fmt: skip
    again = cw("push", "b")
    assert again.returncode != 0
    assert "lab/cyc-b -> lab/cyc-a -> lab/cyc-b" in again.stdout + again.stderr, (
        again.stdout + again.stderr
    )
    [up] = [make_upload(gpus=1)]
    up["meta"]["governance"] = {"model": "self", "base_model": "self", "stage": "finetune"}
    r = srv.client(ingest).post("/api/v1/runs", json=batch(up))
    assert r.status_code == 422 and r.json()["error"] == "lineage", r.text
    assert "lab/self -> lab/self" in r.json()["detail"]

    models = {m["model"]: m for m in _status(srv, admin)}
    assert set(models) == {"lab/cyc-a"} and models["lab/cyc-a"]["runs"] == 1
    # a cycle stored before the check (here, past the service) breaks nobody's status
    db = open_database(srv.db_url)
    with db.session() as session:
        down = make_upload(gpus=1)
        down["meta"]["governance"] = {"model": "cyc-b", "base_model": "cyc-a",
                                      "stage": "finetune"}  # fmt: skip
        store_batch(session, "lab", batch(down), on_run=stored_without_checks)
    db.engine.dispose()
    assert srv.client(admin).get("/api/v1/governance/status").status_code == 200
    assert {m["model"] for m in _status(srv, admin)} == {"lab/cyc-a", "lab/cyc-b"}


def stored_without_checks(
    session: Session, team: str, run: RunUpload, signature: SignatureStatus
) -> None:
    """The ingest's governance record without the service's checks (as before they existed)."""
    on_stored(session, team, run, signature=signature)


@pytest.mark.slow
def test_simulated_runs_are_flagged_and_left_out_and_implausible_figures_judged_at_the_bound(
    cw: CLI, server: Callable[..., ServerProcess], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    srv = server()
    ingest, admin = srv.token("lab", "ingest"), srv.token("lab", "admin")
    monkeypatch.setenv("COMPUTEWATCH_SERVER", srv.url)
    monkeypatch.setenv("COMPUTEWATCH_TOKEN", ingest)
    job = flop_job(tmp_path, 7, 1e24)  # 7e24 counted FLOP in a second or two on 8 fake GPUs
    fake = ("--gpu-backend", "fake:8xH100-SXM", "--interval", "0.2")
    run = cw.ok("run", "--name", "sim", "--model", "sim-model", *fake, "--", PY, job)
    assert "MFU implausible (over 100%" in run.stderr, run.stderr
    got = _status(srv, admin)
    assert len(got) == 1, run.stderr
    [m] = got
    assert m["simulated_runs"] == 1 and m["simulated_counted"] is False
    assert m["judged_flop"] is None  # kept and flagged, out of the totals
    assert {t["state"] for t in m["tiers"]} == {"unknown"}
    assert m["obligations"] == []

    srv.stop()
    config = tmp_path / "server.toml"
    config.write_text("[governance]\ncount_simulated = true\n")
    monkeypatch.setenv("COMPUTEWATCH_CONFIG", str(config))
    srv.start()
    srv.wait_healthy()
    run2 = cw.ok("run", "--quiet", "--name", "sim2", "--model", "sim-model", *fake, "--", PY, job)
    # A run's end gives its upload a bounded time: on a loaded machine it may leave it for later
    # (said on stderr). `push` delivers what the server does not hold, as a user would.
    cw.ok("push")
    got = _status(srv, admin)
    assert len(got) == 1, srv.output()
    [m] = got
    assert m["simulated_runs"] == 2 and m["simulated_counted"] is True, run2.stderr
    odd = m["implausible"]
    assert len(odd) == 2 and all(x["counted_flop"] == pytest.approx(7e24) for x in odd)
    bounds = sum(x["hardware_bound_flop"] for x in odd)
    # 8 x peak (FP8, 1,979 TFLOPS) x seconds: the job lives from a few hundredths of a second (a
    # fast machine: under 1e15 FLOP, which once failed a fresh clone) to a few seconds
    assert all(1e13 < x["hardware_bound_flop"] < 1e18 for x in odd), odd
    assert m["cumulative_flop"]["counted"]["high"] == pytest.approx(bounds)
    assert m["judged_flop"] < 1e19  # judged at the bound, not at 1.4e25
    tiers = {t["tier"]: t["state"] for t in m["tiers"]}
    assert tiers["eu-systemic-risk"] == "below" and m["obligations"] == []


@pytest.mark.slow
def test_a_team_token_is_told_its_view_is_partial(
    cw: CLI, server: Callable[..., ServerProcess], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A team fine-tuning another team's model (granted) sees its own runs, and is told that
    the base model's runs are not its to see."""
    srv = server()
    admin = srv.token("lab", "admin")
    monkeypatch.setenv("COMPUTEWATCH_SERVER", srv.url)
    job = flop_job(tmp_path, 2, 1e20)
    monkeypatch.setenv("COMPUTEWATCH_TOKEN", srv.token("lab", "ingest"))
    for name in ("l1", "l2"):
        cw.ok("run", "--quiet", "--name", name, "--model", "shared-m", "--", PY, job)
    granted = srv.cli("governance", "grant", "lab/shared-m", "--to", "beta", "--server", srv.url,
                      "--token", admin)  # fmt: skip
    assert granted.returncode == 0, granted.stderr
    monkeypatch.setenv("COMPUTEWATCH_TOKEN", srv.token("beta", "ingest"))
    cw.ok("run", "--quiet", "--name", "b1", "--model", "beta-ft", "--base-model", "lab/shared-m",
          "--", PY, job)  # fmt: skip
    beta = srv.token("beta", "read")
    [m] = _status(srv, beta)
    assert m["model"] == "beta/beta-ft" and m["base_model"] == "lab/shared-m"
    assert m["runs"] == 1 and m["view"] == "partial" and m["hidden_runs"] == 0
    assert "the base model lab/shared-m's runs are another team's" in m["view_note"]
    text = srv.cli("governance", "status", "--server", srv.url, "--token", beta)
    assert text.returncode == 0 and "partial view: the base model" in text.stdout, text.stdout
    whole = {x["model"]: x for x in _status(srv, admin)}
    assert whole["lab/shared-m"]["runs"] == 2 and whole["beta/beta-ft"]["runs"] == 1
    assert whole["beta/beta-ft"]["view"] == "whole" and whole["beta/beta-ft"]["hidden_runs"] == 0


LIVE_JOB = """
import pathlib, time
import computewatch
release = pathlib.Path({release!r})
with computewatch.track() as r:
    for _ in range(3000):
        r.step(flops=1e22)
        if release.exists():
            break
        time.sleep(0.1)
"""


@pytest.mark.slow
def test_a_live_run_forecast_to_cross_opens_a_forecast_obligation_while_it_runs(
    cw: CLI, server: Callable[..., ServerProcess], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real ``run --total-steps --model`` streaming to a real server: while it runs, the
    status has its counted FLOPs so far and its forecast, and a tier its forecast high crosses
    is ``forecast`` with a ``forecast`` obligation open."""
    srv = server()
    ingest, admin = srv.token("lab", "ingest"), srv.token("lab", "admin")
    config = tmp_path / "client.toml"
    config.write_text(f'[server]\nurl = "{srv.url}"\nstream_interval = 1\n')
    monkeypatch.setenv("COMPUTEWATCH_CONFIG", str(config))
    monkeypatch.setenv("COMPUTEWATCH_TOKEN", ingest)
    release = tmp_path / "release"
    job = tmp_path / "live_job.py"
    job.write_text(LIVE_JOB.format(release=str(release)))
    # 1e22 counted FLOP a step every 0.1 s, 100,000 steps planned: about 1e27 at completion,
    # while the count so far stays far below 1e25 for the minute the test may take
    proc = cw.popen("run", "--quiet", "--name", "fc", "--model", "fc-model",
                    "--total-steps", "100000", "--", PY, job)  # fmt: skip

    def forecast_open() -> dict[str, Any] | None:
        got = [m for m in _status(srv, admin) if m["model"] == "lab/fc-model"]
        if not got:
            return None
        m = got[0]
        tiers = {t["tier"]: t for t in m["tiers"]}
        if tiers["eu-systemic-risk"]["state"] != "forecast":
            return None
        if not any(o["tier"] == "eu-systemic-risk" for o in m["obligations"]):
            return None
        return m

    try:
        m = cw.wait_for(forecast_open, timeout=90, what="a forecast obligation while it runs")
        assert proc.poll() is None  # still running
    finally:
        release.touch()
    _, err = proc.communicate(timeout=TIMEOUT)
    assert proc.returncode == 0, err
    counted = m["own_flop"]["counted"]
    assert 1e22 <= counted["value"] < 1e25  # the steps so far, counted
    assert m["forecast_additional_flop_high"] > 1e25
    [o] = [o for o in m["obligations"] if o["tier"] == "eu-systemic-risk"]
    assert o["trigger"] == "forecast" and o["state"] == "open" and o["crossed_at"] is None
    assert o["deadline"] is not None and o["days_left"] > 13.9
    tier = {t["tier"]: t for t in m["tiers"]}["eu-systemic-risk"]
    assert tier["crossed_at"] is None and tier["noticed_at"] is not None
