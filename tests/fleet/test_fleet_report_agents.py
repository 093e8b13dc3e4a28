"""End to end: two real agents (each with its own fake GPUs and node name) and two tagged child
processes, scraped every second by a real Prometheus for about a minute; then
``computewatch fleet --by team`` reports both teams, on both nodes, with the fleet's GPUs."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

SCRAPE_SECONDS = 60

pytestmark = pytest.mark.slow


@pytest.fixture
def tagged_children(busy_process: Callable[[str], subprocess.Popen[bytes]]) -> dict[str, int]:
    return {team: busy_process(f"team={team}").pid for team in ("nlp", "vision")}


def test_two_agents_scraped_then_reported_by_team(
    cw: Any,
    tmp_path: Path,
    tagged_children: dict[str, int],
    free_port: Callable[[], int],
    prometheus: Callable[..., Any],
) -> None:
    ports = [free_port(), free_port()]
    # node-1's simulated GPUs run the nlp child, node-2's the vision child.
    agents = [
        cw.popen(
            "agent", "--listen", f"127.0.0.1:{port}", "--gpu-backend", "fake:2xH100-SXM",
            "--interval", "0.5", "--node", f"node-{i + 1}",
            "--fake-gpu-pid", str(tagged_children[team]),
        )
        for i, (port, team) in enumerate(zip(ports, ("nlp", "vision"), strict=True))
    ]  # fmt: skip
    config = tmp_path / "prometheus.yml"
    targets = ", ".join(f'"127.0.0.1:{p}"' for p in ports)
    config.write_text(
        "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: computewatch\n"
        f"    honor_labels: true\n    static_configs:\n      - targets: [{targets}]\n"
    )
    try:
        with prometheus(config, tmp_path / "tsdb") as prom:
            base = prom.url
            cw.wait_for(
                lambda: len(prom.query('up{job="computewatch"} == 1')) == 2,
                timeout=90,
                what="both agents scraped",
            )
            started = time.monotonic()
            cw.wait_for(
                lambda: len(prom.query('computewatch_job_info{team=~"nlp|vision"}')) >= 4,
                timeout=90,
                what="both teams on both nodes",
            )
            time.sleep(max(0.0, SCRAPE_SECONDS - (time.monotonic() - started)))
            r = cw("fleet", "--prometheus", base, "--since", "5m", "--by", "team", "--json")
            assert r.returncode == 0, r.stderr
            report = json.loads(r.stdout)
            text = cw("fleet", "--prometheus", base, "--since", "5m", "--by", "gpu-model")
    finally:
        for a in agents:
            a.terminate()
            a.wait(timeout=30)
    groups = {g["group"]: g for g in report["groups"]}
    assert {"nlp", "vision"} <= set(groups)
    for team in ("nlp", "vision"):
        g = groups[team]
        assert g["nodes"] == ["node-1", "node-2"], g  # each agent sees both children
        assert g["energy_kwh"]["value"] > 0  # their CPU time, attributed by both agents
        # Two simulated GPUs held on one node for most of the scrape window.
        assert 0 < g["gpu_hours"]["value"] <= 2 * 5 / 60, g
        assert g["simulated"] is True
    gpus = report["fleet"]["gpus"]
    assert report["fleet"]["gpu_count"] == 4
    assert {g["node"] for g in gpus} == {"node-1", "node-2"}
    assert {g["gpu_model"] for g in gpus} == {"NVIDIA H100 80GB HBM3 (simulated)"}
    assert any("simulated" in n for n in report["notes"])
    assert text.returncode == 0, text.stderr
    assert "NVIDIA H100 80GB HBM3 (simulated)" in text.stdout
    assert all(a.returncode == 0 for a in agents)
