"""Faults of the dashboard: a bad budget alert target in the configuration stops the server
with one line; uploads with summaries of unexpected shapes still give their run's page; bad
form and query input gives a message, never a traceback or a 500; a budget target that never
answers holds neither the pages nor the server's stop."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from tests.conftest import CLI, CW, Receiver, free_loopback_port
from tests.server.conftest import batch, started_this_month, synthetic_upload

from computewatch.server.app import create_app
from computewatch.serverdb.tokens import create_token


@pytest.fixture
def app_client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Any, str, str]]:
    monkeypatch.setenv("COMPUTEWATCH_CONFIG", str(tmp_path / "none.toml"))
    (tmp_path / "none.toml").write_text("")
    app = create_app(f"sqlite:///{tmp_path / 'server.db'}")
    with app.state.db.session() as s:
        admin, _ = create_token(s, team="ops", scope="admin")
        ingest, _ = create_token(s, team="ml", scope="ingest")
    with TestClient(app) as c:
        yield c, admin, ingest


def test_bad_budget_target_is_one_line(cw: CLI, tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text('[server]\nbudget_notify = ["pager:http://x"]\n')
    r = subprocess.run(
        [*CW, "server", "--db", f"sqlite:///{tmp_path / 's.db'}", "--listen",
         f"127.0.0.1:{free_loopback_port()}"],
        capture_output=True, text=True, timeout=120, env=cw.env(COMPUTEWATCH_CONFIG=str(config)),
        check=False,
    )  # fmt: skip
    assert r.returncode != 0
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert lines[-1].startswith("computewatch: [server] budget_notify:"), r.stderr
    assert "Traceback" not in r.stderr


def test_odd_summaries_still_give_a_page(app_client: tuple[Any, str, str]) -> None:
    c, admin, ingest = app_client
    odd = synthetic_upload("odd00001", name="odd")
    assert odd["summary"] is not None
    odd["summary"].update(
        {
            "gpus": "not a list",
            "energy": {"facility": {"value": "lots", "unit": 3, "method": None}},
            "cost": [1, 2, 3],
            "phases": {"by_name": {"fwd": "fast", "bwd": {"seconds": "x", "share": None}}},
            "diagnosis": {"findings": [{"evidence": ["not", "a", "dict"], "title": None}]},
            "steps": {"count": -5, "samples_total": "many"},
            "notes": 7,
        }
    )
    bare = synthetic_upload("bare0001", name="bare", summary=None, series=[])
    r = c.post("/api/v1/runs", json=batch(odd, bare), headers={"Authorization": f"Bearer {ingest}"})
    assert r.status_code == 200, r.text
    h = {"Authorization": f"Bearer {admin}"}
    for rid in ("odd00001", "bare0001"):
        page = c.get(f"/runs/{rid}", headers=h)
        assert page.status_code == 200, page.text
        assert "Traceback" not in page.text
    # the odd finding (no title, evidence not a mapping) is shown with what it has: n/a for
    # its title and severity, no evidence lines; the rest of the diagnosis section stands
    page_text = c.get("/runs/odd00001", headers=h).text
    assert "<h3>n/a <small>(n/a)</small></h3><ul></ul>" in page_text
    cmp = c.get("/compare?ids=odd00001,bare0001", headers=h)
    assert cmp.status_code == 200 and cmp.text.count("n/a") >= 10


def test_bad_input_gives_messages(app_client: tuple[Any, str, str]) -> None:
    c, admin, _ = app_client
    h = {"Authorization": f"Bearer {admin}"}
    for path, status, text in [
        ("/runs?sort=colour", 400, "sort: one of"),
        ("/runs?cursor=garbage", 400, "cursor"),
        ("/runs?tag=novalue", 400, "tag: KEY=VALUE"),
        ("/runs?until=31/12/2026", 400, "until: a date YYYY-MM-DD"),
        ("/usage?bucket=year", 400, "bucket: one of"),
        ("/compare?ids=onlyone", 400, "two runs or more"),
        ("/runs/nope", 404, "No run"),
    ]:
        r = c.get(path, headers=h)
        assert r.status_code == status, (path, r.status_code)
        assert text in r.text, (path, r.text[-500:])
    for form, message in [
        ({"amount": "lots"}, "budget amount: a number"),
        ({"amount": "-3"}, "budget amount: a positive number"),
        ({"thresholds": "eighty"}, "alert thresholds: percentages"),
        ({"metric": "flops"}, "budget metric"),
        ({"scope_name": ""}, "budget scope name"),
    ]:
        data = {"scope_kind": "team", "scope_name": "ml", "metric": "kwh", "amount": "5",
                "period": "month", "thresholds": "80"} | form  # fmt: skip
        r = c.post("/budgets", data=data, headers=h)
        assert r.status_code == 200 and message in r.text, (form, r.text[-800:])
    r = c.post(
        "/budgets",
        data={"scope_kind": "team", "scope_name": "ml", "metric": "kwh", "amount": "5",
              "period": "month"},
        headers={**h, "Origin": "http://evil.example"},
    )  # fmt: skip
    assert r.status_code == 403


@pytest.mark.slow
def test_a_hanging_budget_target_holds_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, receiver: Receiver
) -> None:
    receiver.hold.clear()  # accepts and never answers
    config = tmp_path / "config.toml"
    config.write_text(
        f'[server]\nbudget_notify = ["webhook:{receiver.url}"]\nbudget_interval = 1\n'
    )
    monkeypatch.setenv("COMPUTEWATCH_CONFIG", str(config))
    from tests.server.conftest import ServerProcess

    s = ServerProcess(f"sqlite:///{tmp_path / 's.db'}", tmp_path / "home")
    try:
        admin = s.token("ops", "admin")
        ingest = s.token("ml", "ingest")
        h = {"Authorization": f"Bearer {admin}"}
        httpx.post(
            s.url + "/api/v1/runs",
            json=batch(
                synthetic_upload("hang0001", kwh=9.0, started_at=started_this_month(3600.0))
            ),
            headers={"Authorization": f"Bearer {ingest}"},
        ).raise_for_status()
        httpx.post(
            s.url + "/budgets",
            data={"scope_kind": "team", "scope_name": "ml", "metric": "kwh", "amount": "1",
                  "period": "month"},
            headers=h,
        )  # fmt: skip
        with receiver.arrived:
            assert receiver.arrived.wait_for(lambda: receiver.requests >= 1, 30)
        # the target holds its request for 60 s: the page does not wait for it
        r = httpx.get(s.url + "/budgets", headers=h, timeout=30)
        assert r.status_code == 200 and "900%" in r.text
        assert s.stop() is not None
    finally:
        receiver.hold.set()
        s.close()
