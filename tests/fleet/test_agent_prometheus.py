"""End to end: a real Prometheus scrapes a real agent (fake GPUs) and answers PromQL queries."""

from __future__ import annotations

import subprocess
import textwrap
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow


@pytest.fixture
def team() -> str:
    """A team name of this test alone: the agent reads the whole node, where other tests'
    tagged processes run too."""
    return f"nlp-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def busy_child(
    busy_process: Callable[[str], subprocess.Popen[bytes]], team: str
) -> subprocess.Popen[bytes]:
    return busy_process(f"team={team},project=llm")


def test_prometheus_scrapes_the_agent(
    cw: Any,
    tmp_path: Path,
    busy_child: Any,
    team: str,
    free_port: Callable[[], int],
    prometheus: Callable[..., Any],
) -> None:
    agent_port = free_port()
    agent = cw.popen(
        "agent",
        "--listen",
        f"127.0.0.1:{agent_port}",
        "--gpu-backend",
        "fake:2xH100-SXM",
        "--interval",
        "0.5",
        "--node",
        "test-node",
    )
    config = tmp_path / "prometheus.yml"
    config.write_text(
        textwrap.dedent(
            f"""
            global:
              scrape_interval: 1s
              evaluation_interval: 1s
            scrape_configs:
              - job_name: computewatch
                honor_labels: true  # our job label is the workload's, not the scrape job's
                static_configs:
                  - targets: ["127.0.0.1:{agent_port}"]
            """
        )
    )
    try:
        with prometheus(config, tmp_path / "tsdb") as prom:
            query = prom.query
            mem = cw.wait_for(
                lambda: query("computewatch_gpu_memory_total_bytes"),
                timeout=90,
                what="GPU series in Prometheus",
            )
            assert len(mem) == 2
            for series in mem:
                m = series["metric"]
                assert m["gpu_model"] == "NVIDIA H100 80GB HBM3" and m["simulated"] == "true"
                assert m["node"] == "test-node" and m["gpu"].startswith("GPU-")
                assert float(series["value"][1]) == 80 * 2**30
            q = f'computewatch_job_cpu_seconds_total{{team="{team}"}} > 0'
            cpu = cw.wait_for(lambda: query(q), timeout=60, what="the tagged child's CPU")
            assert cpu[0]["metric"]["job"].startswith("process:")
            info = query(f'computewatch_job_info{{team="{team}"}}')
            assert len(info) == 1 and info[0]["metric"]["project"] == "llm"
            assert info[0]["metric"]["kind"] == "process"
            energy_rate = cw.wait_for(
                lambda: query("rate(computewatch_gpu_energy_joules_total[5s]) > 0"),
                timeout=60,
                what="a GPU energy rate",
            )
            assert len(energy_rate) == 2
            up = query('up{job="computewatch"}')  # the target's own series keep its job
            assert up and up[0]["value"][1] == "1"
    finally:
        agent.terminate()
        agent.wait(timeout=30)
    assert agent.returncode == 0
