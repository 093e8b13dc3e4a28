"""The Governance page (``/governance``) as an auditor and a team see it: each declared model's
compute, its tiers' states and deadlines, the obligations (overdue first), the goodput of its
runs, and a team's partial view; in Debian's Chromium at 1,280 and 1,920 px, nothing scrolls
sideways."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.server.conftest import ServerProcess
from tests.server.web.conftest import Opened, seeded_upload
from tests.server.web.test_pages import post

from computewatch.upload.protocol import RunUpload

WIDTHS = (1280, 1920)
FITS = "document.documentElement.scrollWidth <= document.documentElement.clientWidth"


@dataclass
class Governed:
    server: ServerProcess
    admin: str
    lab: str
    other: str


def _governed(run_id: str, model: str, flop: float, *, stage: str = "pretrain",
              forecast: float | None = None, **kw: Any) -> RunUpload:  # fmt: skip
    up = seeded_upload(run_id, name=run_id, **kw)
    summary = up["summary"]
    assert summary is not None
    summary["flops"] = {"value": flop, "low": flop * 0.85, "high": flop * 1.15, "unit": "FLOP",
                        "method": "estimated", "assumptions": [], "source": "test"}  # fmt: skip
    if forecast is not None:
        summary["forecast"] = {
            "flops": {"value": forecast, "low": forecast * 0.9, "high": forecast * 1.1,
                      "unit": "FLOP", "method": "estimated", "assumptions": [], "source": "test"}
        }  # fmt: skip
    up["meta"]["governance"] = {"model": model, "base_model": None, "stage": stage,
                                "parameters": None}  # fmt: skip
    return up


@pytest.fixture(scope="module")
def governed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Governed]:
    """A server whose lab team trained one model over the EU's general-purpose tier in three
    runs (a crash and two resumes) and runs another forecast over the systemic-risk tier; a
    second team ran the first model too, which the lab's token does not see."""
    d = tmp_path_factory.mktemp("governance")
    config = d / "config.toml"
    config.write_text("[governance]\ncount_simulated = true\n")  # the test runs' devices
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("COMPUTEWATCH_CONFIG", str(config))
        s = ServerProcess(f"sqlite:///{d / 'server.db'}", d / "home")
        try:
            admin = s.token("ops", "admin")
            lab = s.token("lab", "ingest")
            other = s.token("vision", "ingest")
            now = time.time()
            post(
                s, lab,
                _governed("pre-1", "acme-7b", 2e24, started_at=now - 5 * 86400,
                          status="failed"),
                _governed("pre-2", "acme-7b", 3e24, started_at=now - 4 * 86400),
                _governed("pre-3", "acme-7b", 1e24, started_at=now - 3 * 86400),
                _governed("big-1", "acme-70b", 2e24, forecast=1.2e25, status="running",
                          started_at=now - 3600, duration=1800),
            )  # fmt: skip
            post(s, other, _governed("vis-1", "eye-1b", 1e21, started_at=now - 86400))
            yield Governed(s, admin, lab, other)
        finally:
            s.close()


def _page(g: Governed, token: str) -> str:
    r = httpx.get(
        g.server.url + "/governance", headers={"Authorization": f"Bearer {token}"}, timeout=60
    )
    assert r.status_code == 200, r.text[:2000]
    return r.text


def _row(html: str, model: str) -> str:
    m = re.search(rf'<tr data-model="{re.escape(model)}">(.*?)</tr>', html, re.S)
    assert m, model
    return m.group(1)


def test_models_tiers_and_obligations_with_their_deadlines(governed: Governed) -> None:
    html = _page(governed, governed.admin)
    base = _row(html, "lab/acme-7b")
    assert ">3<" in base  # three runs: the crash and both resumes count
    assert "12.00 GPU-h" in base  # 3 runs x 2 GPUs x 2 h
    assert "6.9e+24 FLOP (hardware)" in base or "6.9e+24 FLOP" in base
    assert re.search(r"eu-gpai</span> crossed", base), base
    assert re.search(r"eu-systemic-risk</span> approaching", base), base
    big = _row(html, "lab/acme-70b")
    assert re.search(r"eu-systemic-risk</span> forecast.*due \d{4}-\d\d-\d\d \d\d:\d\d UTC "
                     r"\(1[34]\.\d days left\)", big), big  # fmt: skip
    assert "on simulated devices (counted)" in big
    assert "/api/v1/governance/models/lab/acme-70b/report" in big
    # the obligations: the forecast's, open, with its deadline
    assert 'id="obligations"' in html
    assert re.search(r"lab/acme-70b</td><td class=\"id\">eu-systemic-risk</td><td>forecast</td>"
                     r"<td class=\"id\">open</td>", html), html  # fmt: skip
    assert re.search(r"\d+ models?, \d+ obligations? open", html)
    assert (
        "overdue"
        not in re.sub(r"<[^>]+>", "", html.split('id="obligations"')[1]).split("A crossed tier")[0]
    )  # none is overdue yet
    # goodput of each model's runs
    assert 'id="section-goodput"' in html and "model lab/acme-7b" in html
    # the page is a replay: the JSON report linked from it answers
    r = httpx.get(governed.server.url + "/api/v1/governance/models/lab/acme-70b/report",
                  headers={"Authorization": f"Bearer {governed.admin}"}, timeout=60)  # fmt: skip
    assert r.status_code == 200 and r.json()["model"] == "lab/acme-70b"


def test_a_team_sees_its_own_models_and_its_share_only(governed: Governed) -> None:
    lab = _page(governed, governed.lab)
    assert 'data-model="lab/acme-7b"' in lab and "vision/eye-1b" not in lab
    vision = _page(governed, governed.other)
    assert 'data-model="vision/eye-1b"' in vision and "lab/acme" not in vision
    assert "No obligation has opened" in vision


def test_no_declared_model_says_how_to_declare_one(tmp_path: Path) -> None:
    s = ServerProcess(f"sqlite:///{tmp_path / 'empty.db'}", tmp_path / "home")
    try:
        token = s.token("ops", "admin")
        g = Governed(s, token, token, token)
        html = _page(g, token)
        assert 'id="no-models"' in html and "--model NAME" in html
    finally:
        s.close()


def test_the_partial_refresh_is_the_page_body(governed: Governed) -> None:
    r = httpx.get(governed.server.url + "/governance?partial=1",
                  headers={"Authorization": f"Bearer {governed.admin}"}, timeout=60)  # fmt: skip
    assert r.status_code == 200
    assert 'id="models"' in r.text and "<nav" not in r.text


@pytest.mark.parametrize("width", WIDTHS)
def test_the_page_fits_in_chromium(
    governed: Governed, open_page: Callable[..., Opened], width: int, tmp_path: Path
) -> None:
    o = open_page(governed.server.url, governed.admin)
    o.page.set_viewport_size({"width": width, "height": 900})
    o.goto("/governance")
    o.page.screenshot(path=str(tmp_path / f"governance-{width}.png"), full_page=True)
    assert o.page.evaluate(FITS), width
    for table in o.page.locator(".scroll > table.grid").all():
        assert table.evaluate("t => t.scrollWidth <= t.parentElement.clientWidth"), (
            width, table.get_attribute("id"),
        )  # fmt: skip
    here = o.page.locator('nav.top a[aria-current="page"]')
    assert here.inner_text() == "Governance"
    o.check_clean()


def test_a_browser_without_a_session_is_sent_to_login(governed: Governed) -> None:
    r = httpx.get(governed.server.url + "/governance", timeout=60)
    assert r.status_code == 303 and r.headers["location"] == "/login?next=/governance"
