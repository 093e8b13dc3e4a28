"""End to end: two real agents (each with its own fake GPUs and node name) and two tagged child
processes, scraped every second by a real Prometheus for about a minute; then
``computewatch fleet --by team`` reports both teams, on both nodes, with the fleet's GPUs."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from computewatch.sources.rapl import rapl_status
from computewatch.testing.fake_nvml import ManualClock, from_preset

SCRAPE_SECONDS = 60
CPU_TDP_WATTS = 10.0

pytestmark = pytest.mark.slow


def _held_lines(port: int) -> str:
    """An agent's exported lines about jobs, GPU processes and its own notes (a failure's
    evidence: which jobs it holds, on which GPUs, and what it could not read)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            text = r.read().decode()
    except OSError as e:
        return f"127.0.0.1:{port}: {e}"
    wanted = ("computewatch_job_info", "computewatch_job_gpu", "computewatch_job_processes",
              "computewatch_process_gpu", "computewatch_gpu_other_processes", "note", "skipped",
              "error")  # fmt: skip
    lines = [
        ln for ln in text.splitlines() if not ln.startswith("#") and any(w in ln for w in wanted)
    ]
    return f"127.0.0.1:{port}:\n  " + "\n  ".join(lines[:80])


def _mean_fake_power_watts(preset: str, start: float, end: float) -> float:
    """The mean power of a fake preset's GPUs between two monotonic times (the agents' fakes run
    on the same system-wide clock and seed, so they draw exactly this trace), every 0.1 s."""
    clock = ManualClock(start)
    nvml = from_preset(preset, clock=clock)
    nvml.nvmlInit()
    handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
    readings = []
    while clock.now < end:
        readings += [nvml.nvmlDeviceGetPowerUsage(h) / 1000 for h in handles]
        clock.advance(0.1)
    return sum(readings) / len(readings)


@pytest.fixture
def tagged_children(busy_process: Callable[[str], subprocess.Popen[bytes]]) -> dict[str, int]:
    """Team name -> PID of the two tagged children. The names are unique: the agents read the
    whole node, where other tests' tagged processes run too (one tagged ``team=nlp`` would be
    counted in this test's nlp job)."""
    suffix = uuid.uuid4().hex[:8]
    return {t: busy_process(f"team={t}").pid for t in (f"nlp-{suffix}", f"vision-{suffix}")}


def test_two_agents_scraped_then_reported_by_team(
    cw: Any,
    tmp_path: Path,
    tagged_children: dict[str, int],
    free_port: Callable[[], int],
    prometheus: Callable[..., Any],
) -> None:
    ports = [free_port(), free_port()]
    # CPU energy is modeled (no readable RAPL) from this TDP: small, so that the GPUs' energy,
    # which is known from the fake's power trace, is most of each team's energy.
    config_file = tmp_path / "agent.toml"
    config_file.write_text(f"[energy]\ncpu_tdp_watts = {CPU_TDP_WATTS}\n")
    # node-1's simulated GPUs run the nlp child, node-2's the vision child.
    teams = list(tagged_children)
    any_team = "|".join(teams)
    agents = [
        cw.popen(
            "agent", "--listen", f"127.0.0.1:{port}", "--gpu-backend", "fake:2xH100-SXM",
            "--interval", "0.5", "--node", f"node-{i + 1}", "--config", config_file,
            "--fake-gpu-pid", str(tagged_children[team]),
        )
        for i, (port, team) in enumerate(zip(ports, teams, strict=True))
    ]  # fmt: skip
    config = tmp_path / "prometheus.yml"
    targets = ", ".join(f'"127.0.0.1:{p}"' for p in ports)
    config.write_text(
        "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: computewatch\n"
        f"    honor_labels: true\n    static_configs:\n      - targets: [{targets}]\n"
    )
    try:
        before_prometheus = time.monotonic()  # no sample of any series is older
        with prometheus(config, tmp_path / "tsdb") as prom:
            base = prom.url
            cw.wait_for(
                lambda: len(prom.query('up{job="computewatch"} == 1')) == 2,
                timeout=90,
                what="both agents scraped",
            )
            started = time.monotonic()
            cw.wait_for(
                lambda: len(prom.query(f'computewatch_job_info{{team=~"{any_team}"}}')) == 4,
                timeout=90,
                what="both teams on both nodes",
            )
            # ... and each team's GPUs already counted (a held-time series with a scraped
            # sample above zero), so that the window below starts with both teams on their GPUs
            # even when an agent's first ticks come late on a loaded machine.
            held = f'computewatch_job_gpu_seconds_total{{team=~"{any_team}"}}'
            counted = f"sum by (team) ({held}) > 0"
            deadline = time.monotonic() + 90
            while len(prom.query(counted)) != 2:
                if time.monotonic() > deadline:  # what each agent exports now, to find why
                    pytest.fail(
                        "timed out after 90 s waiting for both teams' GPUs counted; the "
                        "children: "
                        + json.dumps(tagged_children)
                        + "; the agents now:\n"
                        + "\n".join(_held_lines(p) for p in ports)
                    )
                time.sleep(0.2)
            time.sleep(max(0.0, SCRAPE_SECONDS - (time.monotonic() - started)))
            asked = time.monotonic()
            r = cw("fleet", "--prometheus", base, "--since", "5m", "--by", "team", "--json")
            answered = time.monotonic()
            assert r.returncode == 0, r.stderr
            report = json.loads(r.stdout)
            text = cw("fleet", "--prometheus", base, "--since", "5m", "--by", "gpu-model")
    finally:
        for a in agents:
            a.terminate()
            a.wait(timeout=30)
    groups = {g["group"]: g for g in report["groups"]}
    assert set(teams) <= set(groups)
    # Each series was scraped from before `started` (both teams were visible then) to within a
    # scrape interval (1 s) of `asked`, its last value at most a tick (0.5 s) old, and increase()
    # extrapolates at most half an interval past either end: the window each team's counters
    # cover is between these two spans (3 s of slack below: 1 s scrape + 0.5 s tick + up to
    # 1.5 s late on a loaded machine; measured here: 60.8 s within [58.5, 66.8]).
    span_low = asked - started - 3.0
    span_high = answered - before_prometheus + 0.5
    rapl, _ = rapl_status()
    power_w = _mean_fake_power_watts("2xH100-SXM", before_prometheus, answered)
    for team in teams:
        g = groups[team]
        assert g["nodes"] == ["node-1", "node-2"], g  # each agent sees both children
        # The team's child holds both simulated GPUs of one node (2 GPU-seconds a second).
        gpu_hours = g["gpu_hours"]["value"]
        assert 2 * span_low / 3600 <= gpu_hours <= 2 * span_high / 3600, (g, span_low, span_high)
        # Energy: those GPUs' energy (the child is their only process, so all of it), whose
        # power per GPU-hour is the fake's mean power over the window (the agent reads it every
        # 0.5 s: 3 % covers the difference from this 0.1 s average), plus the child's share of
        # each node's CPU energy: at most the whole modeled TDP on both nodes.
        cpu_w = 2 * CPU_TDP_WATTS if not rapl else 2 * 500.0  # readable RAPL: a whole package
        gpu_kwh = gpu_hours * power_w / 1000
        energy = g["energy_kwh"]["value"]
        assert 0.97 * gpu_kwh <= energy <= 1.03 * gpu_kwh + cpu_w * span_high / 3.6e6, (
            g,
            gpu_kwh,
        )
        assert g["simulated"] is True
    gpus = report["fleet"]["gpus"]
    assert report["fleet"]["gpu_count"] == 4
    assert {g["node"] for g in gpus} == {"node-1", "node-2"}
    assert {g["gpu_model"] for g in gpus} == {"NVIDIA H100 80GB HBM3 (simulated)"}
    assert any("simulated" in n for n in report["notes"])
    assert text.returncode == 0, text.stderr
    assert "NVIDIA H100 80GB HBM3 (simulated)" in text.stdout
    assert all(a.returncode == 0 for a in agents)
