"""Inference end to end: a script serving 200 fake requests with ``run.request()`` under
``computewatch run`` gets the right counts, latency percentiles that match its sleeps, and
energy and cost per request and per 1M tokens with their method."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

SERVE = """
import time
import computewatch

with computewatch.track(name="serve") as run:
    @run.request("embed")
    def embed():
        time.sleep(0.001)

    for i in range(200):
        if i % 10 == 9:
            embed()
            continue
        try:
            with run.request("generate", tokens_in=12) as r:
                time.sleep(0.03 if i % 5 == 0 else 0.005)
                if i % 10 == 7:
                    raise RuntimeError("model overloaded")
                r.tokens_out = 40
        except RuntimeError:
            pass
"""


def test_served_requests_are_summarised_and_accounted(
    cw: Any, make_script: Callable[[str, str], Path], tmp_path: Path
) -> None:
    script = make_script("serve.py", SERVE)
    config = tmp_path / "config.toml"
    config.write_text("[cost]\nusd_per_hour = 3.6\n")
    run = cw.ok("run", "--config", config, "--", sys.executable, script)
    assert "requests" in run.stdout + run.stderr  # the summary printed at the end
    s = cw.show()
    rq = s["requests"]
    assert rq["count"] == 200
    assert rq["errors"] == 20
    gen, emb = rq["by_name"]["generate"], rq["by_name"]["embed"]
    assert (gen["count"], gen["errors"], emb["count"], emb["errors"]) == (180, 20, 20, 0)
    lat = rq["latency_seconds"]
    # 40 of 200 requests sleep 30 ms, 140 sleep 5 ms, 20 sleep 1 ms.
    assert 0.005 <= lat["p50"] < 0.03
    assert lat["p90"] >= 0.03 and lat["p99"] >= 0.03 and lat["max"] >= lat["p99"]
    assert gen["latency_seconds"]["p50"] >= 0.005
    assert emb["latency_seconds"]["max"] < gen["latency_seconds"]["max"]
    assert rq["tokens_in_total"] == 180 * 12
    assert rq["tokens_out_total"] == 160 * 40
    assert rq["requests_per_second"] == pytest.approx(200 / rq["span_seconds"], rel=1e-3)
    assert rq["tokens_per_second"] == pytest.approx(6400 / rq["span_seconds"], rel=1e-3)
    tokens = 180 * 12 + 160 * 40
    fac, cost = s["energy"]["facility"], s["cost"]["total"]
    e_req, e_tok = rq["energy_per_request"], rq["energy_per_1m_tokens"]
    c_req, c_tok = rq["cost_per_request"], rq["cost_per_1m_tokens"]
    assert e_req["value"] == pytest.approx(fac["value"] / 200, rel=1e-4)
    assert e_req["method"] == fac["method"] and e_req["unit"] == "kWh"
    assert e_tok["value"] == pytest.approx(fac["value"] / tokens * 1e6, rel=1e-4)
    assert c_req["value"] == pytest.approx(cost["value"] / 200, rel=1e-4)
    assert c_tok["value"] == pytest.approx(cost["value"] / tokens * 1e6, rel=1e-4)
    assert c_req["method"] == "modeled" and c_req["unit"] == "USD"
    assert all("allocated evenly" in f["assumptions"][0] for f in (e_req, e_tok, c_req, c_tok))
    text = cw.ok("show", "last").stdout
    assert "200 requests, 20 errors" in text
    assert "per 1M tokens" in text and "cost $" in text
    out = tmp_path / "report.html"
    cw.ok("report", "last", "-o", out)
    page = out.read_text()
    assert 'id="section-steps"' in page and "energy per 1M tokens" in page
