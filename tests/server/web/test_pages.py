"""The dashboard in Debian's Chromium (Playwright) against a real ``computewatch server`` on
SQLite, seeded through its API: login, every page with its data and no console error, the Now
page updating live when a run is uploaded, team isolation, the CSV export, the comparison's
efficiency table, escaping of a hostile run name, and budgets with their alert delivered to a
local webhook receiver."""

from __future__ import annotations

import csv
import io
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from tests.conftest import Receiver
from tests.server.conftest import ServerProcess, batch, started_this_month
from tests.server.web.conftest import EVENTS_OPEN, Opened, seeded_upload

from computewatch.server.budgets import MIN_FORECAST_ELAPSED_S, period_bounds
from computewatch.upload.protocol import PROTOCOL_HEADER, RunUpload

HOSTILE = "<script>alert(1)</script>"


@dataclass
class Seeded:
    server: ServerProcess
    admin: str
    ml_read: str
    ml_ingest: str
    cv_ingest: str
    runs: dict[str, RunUpload]


def post(server: ServerProcess, token: str, *runs: RunUpload) -> None:
    r = httpx.post(
        server.url + "/api/v1/runs",
        json=batch(*runs),
        headers={"Authorization": f"Bearer {token}", PROTOCOL_HEADER: "1"},
        timeout=60,
    )
    assert r.status_code == 200, r.text
    assert all(x["stored"] for x in r.json()["results"]), r.text


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Seeded]:
    """One server for the read-only tests of this module, with runs of two teams."""
    d = tmp_path_factory.mktemp("dash")
    s = ServerProcess(f"sqlite:///{d / 'server.db'}", d / "home")
    try:
        admin = s.token("ops", "admin")
        ml_read = s.token("ml", "read")
        ml_ingest = s.token("ml", "ingest")
        cv_ingest = s.token("cv", "ingest")
        now = time.time()
        runs = {
            "a": seeded_upload(
                "aaaa0001", name="bert-base", user="alice", started_at=now - 3 * 86400,
                kwh=4.0, cost=20.0, steps=1000, samples=32_000, tokens=16_384_000,
                tags={"env": "prod", "model": "bert"},
            ),
            "b": seeded_upload(
                "aaaa0002", name=HOSTILE, user="bob", started_at=now - 2 * 86400,
                kwh=2.0, cost=None, steps=500, samples=None, tokens=None,
                tags={"env": "dev"},
            ),
            "r": seeded_upload(
                "aaaa0003", name="llama-running", user="alice", status="running",
                started_at=now - 1800, duration=1800, utilization=0.01, kwh=0.5, cost=3.0,
            ),
            "cv": seeded_upload(
                "cccc0001", name="resnet-cv", user="carol", project="vision",
                started_at=now - 86400, kwh=1.5, cost=7.5,
            ),
        }  # fmt: skip
        post(s, ml_ingest, runs["a"], runs["b"], runs["r"])
        post(s, cv_ingest, runs["cv"])
        yield Seeded(s, admin, ml_read, ml_ingest, cv_ingest, runs)
    finally:
        s.close()


def texts(opened: Opened, selector: str) -> list[str]:
    found: list[str] = opened.page.locator(selector).all_inner_texts()
    return found


# -- login and the pages ---------------------------------------------------------------------


def test_login_redirects_and_sets_a_session(
    seeded: Seeded, open_page: Callable[..., Opened]
) -> None:
    o = open_page(seeded.server.url)
    o.goto("/runs?team=ml")
    assert o.page.url.startswith(seeded.server.url + "/login?next=")
    o.page.fill("#token", seeded.admin)
    with o.page.expect_navigation():
        o.page.click("button[type=submit]")
    assert o.page.url == seeded.server.url + "/runs?team=ml"
    assert set(texts(o, "#runs tbody tr td:nth-child(3) .team")) == {"ml"}
    cookies = {c["name"]: c for c in o.page.context.cookies()}
    session = cookies["computewatch_session"]
    assert session["httpOnly"] and seeded.admin not in session["value"]
    o.check_clean()


def test_a_wrong_token_is_refused(seeded: Seeded, open_page: Callable[..., Opened]) -> None:
    o = open_page(seeded.server.url)
    o.goto("/login")
    o.page.fill("#token", "cw_not-a-token")
    with o.page.expect_navigation():
        o.page.click("button[type=submit]")
    assert "Unknown or revoked token" in o.page.content()
    assert "computewatch_session" not in {c["name"] for c in o.page.context.cookies()}


def test_every_page_renders_its_data(seeded: Seeded, open_page: Callable[..., Opened]) -> None:
    o = open_page(seeded.server.url, seeded.admin)
    o.goto("/")
    assert texts(o, "#running tbody tr td:first-child a") == ["llama-running"]
    assert "idle while held" in o.page.locator("#running").inner_text()
    nodes = texts(o, "#nodes tbody tr td:first-child")
    assert nodes == ["node-1"]
    o.goto("/runs")
    names = texts(o, "#runs tbody tr td:nth-child(2)")
    assert names[0] == "llama-running" and set(names) == {
        "llama-running", "resnet-cv", HOSTILE, "bert-base",
    }  # fmt: skip
    o.goto("/usage?by=project")
    rows = {r.split("\t")[0]: r for r in texts(o, "#usage tbody tr")}
    assert set(rows) == {"llm", "vision"}
    o.goto("/budgets")
    assert o.page.locator("#no-budgets").count() == 1
    assert o.page.locator("#new-budget").count() == 1  # admin may create
    o.check_clean()


def test_bearer_token_on_pages_and_no_token(seeded: Seeded) -> None:
    r = httpx.get(
        seeded.server.url + "/runs", headers={"Authorization": f"Bearer {seeded.ml_read}"}
    )
    assert r.status_code == 200 and "bert-base" in r.text and "resnet-cv" not in r.text
    r = httpx.get(seeded.server.url + "/usage", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/login?next=/usage"
    r = httpx.get(seeded.server.url + "/runs", headers={"Authorization": "Bearer cw_nope"})
    assert r.status_code == 303  # a bad token is no login: to the form


def test_run_page_charts_sections_and_escaping(
    seeded: Seeded, open_page: Callable[..., Opened]
) -> None:
    o = open_page(seeded.server.url, seeded.admin)
    o.goto("/runs/aaaa0002")
    page = o.page
    assert page.locator("h1").inner_text() == HOSTILE
    assert page.title() == f"run {HOSTILE} · computewatch"
    assert page.locator("script:not([src]):not([type])").count() == 0  # no script got in
    page.wait_for_function("window.computewatchCharts && window.computewatchCharts.length >= 3")
    titles = texts(o, "figure.chart figcaption strong")
    assert titles == ["GPU utilization", "GPU power", "CPU (process tree)"]
    canvas = page.locator("figure.chart canvas").first.bounding_box()
    assert canvas is not None and canvas["width"] > 100
    assert page.locator("#section-energy").count() == 1
    assert page.locator("#section-cost").count() == 1
    assert "measured" in page.locator("#section-energy").inner_text()
    assert texts(o, "#section-phases tbody tr td:first-child") == ["forward", "data"]
    assert "Data loading takes 30% of each step" in page.locator("#section-diagnosis").inner_text()
    assert page.locator("#section-gpus tbody tr").count() == 2
    assert "not signed" in page.locator("main").inner_text()  # uploaded without a report
    o.goto("/runs?q=script")  # listed, escaped, in the runs table too
    assert texts(o, "#runs tbody tr td:nth-child(2)") == [HOSTILE]
    o.check_clean()


def test_runs_filters_sort_and_pages(seeded: Seeded, open_page: Callable[..., Opened]) -> None:
    o = open_page(seeded.server.url, seeded.admin)

    def names(path: str) -> list[str]:
        o.goto(path)
        # The list is live (a running run): a refresh may be swapping it in as it is read.
        o.page.wait_for_selector("#runs tbody tr td:nth-child(2)")
        return texts(o, "#runs tbody tr td:nth-child(2)")

    assert names("/runs?user=alice&sort=name&order=asc") == ["bert-base", "llama-running"]
    assert names("/runs?tag=model%3Dbert") == ["bert-base"]
    assert names("/runs?status=running") == ["llama-running"]
    assert names("/runs?project=vision") == ["resnet-cv"]
    assert names("/runs?team=cv") == ["resnet-cv"]
    assert names("/runs?sort=energy&order=desc")[0] == "bert-base"
    first = names("/runs?limit=3")
    assert len(first) == 3
    o.page.click("#next-page")
    o.page.wait_for_load_state("load")
    rest = texts(o, "#runs tbody tr td:nth-child(2)")
    assert len(rest) == 1 and set(first + rest) == {
        "llama-running", "resnet-cv", HOSTILE, "bert-base",
    }  # fmt: skip
    o.page.click("#first-page")
    o.page.wait_for_load_state("load")
    assert texts(o, "#runs tbody tr td:nth-child(2)") == first
    r = httpx.get(
        seeded.server.url + "/runs?since=yesterday",
        headers={"Authorization": f"Bearer {seeded.admin}"},
    )
    assert r.status_code == 400 and "since: a date YYYY-MM-DD" in r.text
    o.check_clean()


def test_compare_from_the_list_and_its_efficiency_table(
    seeded: Seeded, open_page: Callable[..., Opened]
) -> None:
    o = open_page(seeded.server.url, seeded.admin)
    o.goto("/runs?project=llm&status=completed")
    page = o.page
    for rid in ("aaaa0001", "aaaa0002"):
        page.check(f"input[name=run][value={rid}]")
    with page.expect_navigation():
        page.click("button.compare")
    assert "/compare?" in page.url
    rows = {r.split("\t")[0]: r.split("\t")[1:] for r in texts(o, "#efficiency tbody tr")}
    # status, steps, samples, tokens, energy, cost, energy/step, cost/step, energy/1k samples,
    # cost/1k samples, energy/1M tokens, cost/1M tokens
    assert rows["bert-base"] == [
        "completed", "1,000", "32,000", "16,384,000", "4 kWh", "$20.00",
        "4.0 Wh", "$0.02", "125.0 Wh", "$0.625", "244.1 Wh", "$1.22",
    ]  # fmt: skip
    assert rows[HOSTILE] == [
        "completed", "500", "n/a", "n/a", "2 kWh", "n/a",
        "4.0 Wh", "n/a", "n/a", "n/a", "n/a", "n/a",
    ]  # fmt: skip
    page.wait_for_function("window.computewatchCharts && window.computewatchCharts.length >= 2")
    legends = page.locator("figure.chart").first.locator(".u-legend .u-series").all_inner_texts()
    assert any("bert-base" in t for t in legends) and any(HOSTILE in t for t in legends)
    o.check_clean()


def test_team_isolation(seeded: Seeded, open_page: Callable[..., Opened]) -> None:
    o = open_page(seeded.server.url, seeded.ml_read)
    o.goto("/runs")
    assert "resnet-cv" not in texts(o, "#runs tbody tr td:nth-child(2)")
    assert set(texts(o, "#runs tbody tr td:nth-child(3) .team")) == {"ml"}
    assert texts(o, "select[name=team] option") == ["any", "ml"]
    o.goto("/usage?by=team")
    assert [r.split("\t")[0] for r in texts(o, "#usage tbody tr")] == ["ml"]
    assert o.page.locator("#new-budget").count() == 0
    o.check_clean()
    h = {"Authorization": f"Bearer {seeded.ml_read}"}
    r = httpx.get(seeded.server.url + "/runs/cccc0001", headers=h)
    assert r.status_code == 404 and "resnet-cv" not in r.text
    r = httpx.get(seeded.server.url + "/compare?ids=aaaa0001,cccc0001", headers=h)
    assert "resnet-cv" not in r.text and "Not found (or not yours): cccc0001" in r.text
    r = httpx.get(seeded.server.url + "/usage.csv?by=project", headers=h)
    assert "vision" not in r.text
    r = httpx.get(seeded.server.url + "/fleet", headers=h)
    assert r.status_code == 404  # no Prometheus configured for this server
    r = httpx.post(
        seeded.server.url + "/budgets",
        headers=h,
        data={"scope_kind": "team", "scope_name": "ml", "metric": "kwh", "amount": "1",
              "period": "month"},
    )  # fmt: skip
    assert r.status_code == 403


def test_usage_csv(seeded: Seeded) -> None:
    h = {"Authorization": f"Bearer {seeded.admin}"}
    r = httpx.get(seeded.server.url + "/usage.csv?by=team", headers=h)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/csv")
    assert 'filename="computewatch-usage-by-team.csv"' in r.headers["content-disposition"]
    rows = list(csv.DictReader(io.StringIO(r.text)))
    by = {row["group"]: row for row in rows}
    assert set(by) == {"ml", "cv"}
    assert list(rows[0]) == [
        "group", "bucket", "runs", "gpu_hours", "idle_gpu_hours", "cpu_hours", "kwh", "kwh_low",
        "kwh_high", "kwh_methods", "cost_usd", "cost_low_usd", "cost_high_usd", "cost_methods",
        "co2e_kg", "co2e_low_kg", "co2e_high_kg", "mean_utilization", "mean_mfu",
    ]  # fmt: skip
    ml = by["ml"]
    assert ml["runs"] == "3"
    assert float(ml["kwh"]) == pytest.approx(6.5)
    assert float(ml["cost_usd"]) == pytest.approx(23.0)
    assert ml["kwh_methods"] == "measured"
    assert ml["bucket"] == ""
    r = httpx.get(seeded.server.url + "/usage.csv?by=user&bucket=day", headers=h)
    rows = list(csv.DictReader(io.StringIO(r.text)))
    assert {row["group"] for row in rows} == {"alice", "bob", "carol"}
    assert all(len(row["bucket"]) == 10 for row in rows)
    r = httpx.get(seeded.server.url + "/usage.csv?by=colour", headers=h)
    assert r.status_code == 400


# -- live updates ----------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("db", ["sqlite"], indirect=True)
def test_now_page_updates_live(
    server: Callable[..., ServerProcess], open_page: Callable[..., Opened]
) -> None:
    s = server()
    admin = s.token("ops", "admin")
    ingest = s.token("ml", "ingest")
    o = open_page(s.url, admin)
    o.goto("/")
    assert o.page.locator("#none-running").count() == 1
    o.page.wait_for_function(EVENTS_OPEN)
    up = seeded_upload("live0001", name="just-started", status="running", duration=120)
    post(s, ingest, up)
    o.page.wait_for_selector("#running tr[data-run=live0001]", timeout=30_000)
    assert o.page.evaluate("window.computewatchEvents.received") >= 1
    # The run's own page follows it too: it ends while we look at it.
    o.goto("/runs/live0001")
    assert o.page.locator(".cards .card .value").first.inner_text() == "running"
    o.page.wait_for_function(EVENTS_OPEN)
    done = {**up, "seq": 2, "final": True, "status": "completed", "ended_at": time.time()}
    post(s, ingest, done)  # type: ignore[arg-type]
    o.page.wait_for_function(
        "document.querySelector('.cards .card .value').textContent === 'completed'",
        timeout=30_000,
    )
    o.goto("/")
    assert o.page.locator("#none-running").count() == 1
    o.check_clean()


# -- budgets ---------------------------------------------------------------------------------


def _forecast_alert_expected(used: float, amount: float) -> bool:
    """Whether a monthly budget of ``amount`` with ``used`` spent gets a forecast alert in the
    next minute (docs/dashboard.md: a forecast from the period's first hour on, ``used x period
    / elapsed``, alerting above the amount while the use is below it). Within a minute of a
    moment where that changes, it waits the moment out, so that the server's evaluations a few
    seconds later agree with the answer."""
    while True:
        now = time.time()
        start, end = period_bounds("month", now)
        edges = (start + MIN_FORECAST_ELAPSED_S, start + used / amount * (end - start))
        wait = max((edge + 5 - now for edge in edges if edge - 60 <= now < edge + 5), default=0)
        if wait <= 0:
            elapsed = now - start
            return elapsed >= MIN_FORECAST_ELAPSED_S and used * (end - start) / elapsed > amount
        time.sleep(wait)


@pytest.mark.slow
@pytest.mark.parametrize("db", ["sqlite"], indirect=True)
def test_budget_progress_and_alert_once(
    server: Callable[..., ServerProcess],
    open_page: Callable[..., Opened],
    receiver: Receiver,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = tmp_path / "config.toml"
    config.write_text(
        f'[server]\nbudget_notify = ["webhook:{receiver.url}/budgets"]\nbudget_interval = 1\n'
    )
    monkeypatch.setenv("COMPUTEWATCH_CONFIG", str(config))
    s = server()
    admin = s.token("ops", "admin")
    ingest = s.token("ml", "ingest")
    # 9 kWh of a 10 kWh monthly budget: the forecast (9 kWh x month / elapsed) passes 10 kWh
    # from the month's first hour until 90% of it has gone; then a forecast alert goes out too.
    forecast = _forecast_alert_expected(used=9.0, amount=10.0)
    started = started_this_month(7200.0)  # budgets take the runs started in their period
    post(s, ingest, seeded_upload("bud00001", name="big", kwh=9.0, cost=40.0, started_at=started))
    o = open_page(s.url, admin)
    o.goto("/budgets")
    page = o.page
    page.fill("input[name=scope_name]", "ml")
    page.select_option("select[name=metric]", "kwh")
    page.fill("input[name=amount]", "10")
    page.fill("input[name=thresholds]", "50, 100")
    with page.expect_navigation():
        page.click("#new-budget button[type=submit]")
    row = page.locator("#budgets tbody tr").first
    assert "team ml" in row.inner_text()
    assert row.locator("td.used").inner_text() == "9 kWh (90%)"
    assert row.locator(".progress").get_attribute("aria-valuenow") == "90.0"
    receiver.wait(lambda r: len(r.bodies) >= 1)
    alerts = receiver.alerts()
    first = ["0.5", "forecast"] if forecast else ["0.5"]  # one evaluation: one body
    assert [a["labels"]["threshold"] for a in alerts] == first
    assert alerts[0]["rule"] == "BudgetThresholdReached"
    assert "team ml: kwh budget 50% reached" in alerts[0]["annotations"]["summary"]
    assert receiver.paths == ["/budgets"]
    # Later evaluations of the same period send nothing more.
    seen = int(page.locator("#budget-method").get_attribute("data-evaluations") or 0)

    def evaluations() -> int:
        r = httpx.get(s.url + "/budgets?partial=1", headers={"Authorization": f"Bearer {admin}"})
        return int(r.text.split('data-evaluations="')[1].split('"')[0])

    deadline = time.monotonic() + 30
    while evaluations() < seen + 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert evaluations() >= seen + 2
    assert len(receiver.bodies) == 1
    # Crossing 100% is delivered once.
    post(s, ingest, seeded_upload("bud00002", name="more", kwh=2.0, cost=1.0, started_at=started))
    receiver.wait(lambda r: len(r.bodies) >= 2)
    assert [a["labels"]["threshold"] for a in receiver.alerts()] == [*first, "1"]
    # A restarted server remembers what was sent (the database keeps it).
    s.restart()
    deadline = time.monotonic() + 30
    while evaluations() < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert evaluations() >= 2
    assert len(receiver.bodies) == 2
    o = open_page(s.url, admin)  # the restart ended the old page's event stream
    o.goto("/budgets")
    assert "110%" in o.page.locator("#budgets td.used").inner_text()
    with o.page.expect_navigation():
        o.page.click("button.delete")
    assert o.page.locator("#no-budgets").count() == 1
    o.check_clean()


def test_json_is_not_html_injection(seeded: Seeded) -> None:
    """The chart data embedded in a page cannot end its script element."""
    r = httpx.get(
        seeded.server.url + "/compare?ids=aaaa0001,aaaa0002",
        headers={"Authorization": f"Bearer {seeded.admin}"},
    )
    body = r.text.split('<script type="application/json" class="cw-charts">')[1]
    data = body.split("</script>")[0]
    assert "<script>" not in data and json.loads(data)[0]["series"][1]["label"] == HOSTILE


@pytest.mark.slow
@pytest.mark.parametrize("db", ["postgresql"], indirect=True)
def test_live_across_server_processes(
    server: Callable[..., ServerProcess], open_page: Callable[..., Opened]
) -> None:
    """On PostgreSQL, a page served by one server process updates when the upload reaches
    another process on the same database (LISTEN/NOTIFY)."""
    a = server()
    b = server(db_url=a.db_url)
    admin = a.token("ops", "admin")
    ingest = a.token("ml", "ingest")
    o = open_page(a.url, admin)
    o.goto("/")
    o.page.wait_for_function(EVENTS_OPEN)
    post(b, ingest, seeded_upload("fan00001", name="elsewhere", status="running", duration=60))
    o.page.wait_for_selector("#running tr[data-run=fan00001]", timeout=30_000)
    o.check_clean()


@pytest.mark.slow
@pytest.mark.parametrize("db", ["sqlite"], indirect=True)
def test_a_refresh_after_logout_goes_to_the_login_form(
    server: Callable[..., ServerProcess], open_page: Callable[..., Opened]
) -> None:
    s = server()
    admin = s.token("ops", "admin")
    o = open_page(s.url, admin)
    o.goto("/usage")
    o.page.context.clear_cookies()  # the session is gone (logged out elsewhere, expired)
    with o.page.expect_navigation():
        o.page.evaluate("htmx.trigger(document.getElementById('usage-body'), 'cw-refresh')")
    o.page.wait_for_url("**/login?next=%2Fusage")
    assert o.page.locator("#token").count() == 1


@pytest.mark.slow
@pytest.mark.parametrize("db", ["sqlite"], indirect=True)
def test_budget_forms_need_the_pages_anti_forgery_token(
    server: Callable[..., ServerProcess], open_page: Callable[..., Opened]
) -> None:
    """A form post with the session cookie alone (as another site's page could make) is
    refused; the token the page's hidden field holds lets it through, as a browser sends it."""
    s = server()
    admin = s.token("ops", "admin")
    o = open_page(s.url, admin)
    o.goto("/budgets")
    token = o.page.locator("#new-budget input[name=csrf]").get_attribute("value")
    assert token and o.page.locator("nav form input[name=csrf]").get_attribute("value") == token
    form = {"scope_kind": "team", "scope_name": "ml", "metric": "kwh", "amount": "10",
            "period": "month", "thresholds": "80"}  # fmt: skip
    request = o.page.request
    same = {"Origin": s.url}  # as the browser sends with a form of this server's page
    for sent in ({}, {"csrf": "0" * 40}):
        r = request.post(s.url + "/budgets", form={**form, **sent}, headers=same, max_redirects=0)
        assert r.status == 403 and "anti-forgery token" in r.text(), r.text()
    r = request.post(
        s.url + "/budgets", form={**form, "csrf": token}, headers=same, max_redirects=0
    )
    assert r.status == 303
    o.goto("/budgets")
    delete = o.page.locator("#budgets form")
    action = delete.get_attribute("action") or ""
    assert delete.locator("input[name=csrf]").get_attribute("value") == token
    r = request.post(s.url + action, form={}, headers=same, max_redirects=0)
    assert r.status == 403 and "anti-forgery token" in r.text()
    with o.page.expect_navigation():
        o.page.click("button.delete")
    assert o.page.locator("#no-budgets").count() == 1
    o.check_clean()
