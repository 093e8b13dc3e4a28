"""The dashboard's fleet page: ``computewatch fleet``'s report rendered by the server from a
real Prometheus (tests/fleet's synthetic 12 hours of agents' metrics, backfilled with promtool)
when ``[server] prometheus_url`` is set; admin only; drawn in Chromium with the network limited
to the server."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from tests.fleet.test_fleet_report import Prom, prom  # noqa: F401 - the fixture, used below
from tests.server.conftest import ServerProcess
from tests.server.web.conftest import Opened


@pytest.mark.slow
@pytest.mark.parametrize("db", ["sqlite"], indirect=True)
def test_fleet_page(
    prom: Prom,  # noqa: F811 - the fixture imported above
    server: Callable[..., ServerProcess],
    open_page: Callable[..., Opened],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = tmp_path / "config.toml"
    config.write_text(f'[server]\nprometheus_url = "{prom.url}"\n')
    monkeypatch.setenv("COMPUTEWATCH_CONFIG", str(config))
    s = server()
    admin = s.token("ops", "admin")
    reader = s.token("ml", "read")
    hours = (time.time() - prom.t0) / 3600 + 0.5
    o = open_page(s.url, admin)
    assert o.page.locator("nav.top a[href='/fleet']").count() == 1
    o.goto(f"/fleet?hours={hours:.2f}&by=team")
    page = o.page
    page.wait_for_function("window.computewatchCharts && window.computewatchCharts.length")
    data = page.evaluate("JSON.parse(document.getElementById('cw-data').textContent)")
    assert {"fleet_util", "fleet_held", "fleet_gpus"} <= {c["id"] for c in data["charts"]}
    assert page.locator("table").count() >= 1
    o.check_clean()
    r = httpx.get(s.url + "/fleet", headers={"Authorization": f"Bearer {reader}"})
    assert r.status_code == 403 and "admin" in r.text
    r = httpx.get(s.url + "/fleet?by=colour", headers={"Authorization": f"Bearer {admin}"})
    assert r.status_code == 400
