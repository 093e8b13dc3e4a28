"""End to end: a real Prometheus scrapes a real agent (fake GPUs) and answers PromQL queries."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

PROMETHEUS = "/usr/bin/prometheus"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not os.path.exists(PROMETHEUS), reason="Debian package prometheus missing"),
]

BUSY = textwrap.dedent(
    """
    import time
    while True:
        t = time.monotonic()
        while time.monotonic() - t < 0.05:
            pass
        time.sleep(0.05)
    """
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def query(base: str, promql: str) -> list[dict[str, Any]]:
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            doc = json.load(r)
    except (OSError, urllib.error.URLError):
        return []
    assert doc["status"] == "success", doc
    result: list[dict[str, Any]] = doc["data"]["result"]
    return result


@pytest.fixture
def busy_child() -> Iterator[subprocess.Popen[bytes]]:
    env = dict(os.environ, COMPUTEWATCH_TAGS="team=nlp,project=llm")
    p = subprocess.Popen([sys.executable, "-c", BUSY], env=env)
    yield p
    p.kill()
    p.wait(timeout=10)


def test_prometheus_scrapes_the_agent(cw: Any, tmp_path: Path, busy_child: Any) -> None:
    agent_port, prom_port = free_port(), free_port()
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
    prom = subprocess.Popen(
        [
            PROMETHEUS,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{prom_port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{prom_port}"
    try:
        mem = cw.wait_for(
            lambda: query(base, "computewatch_gpu_memory_total_bytes"),
            timeout=90,
            what="GPU series in Prometheus",
        )
        assert len(mem) == 2
        for series in mem:
            m = series["metric"]
            assert m["gpu_model"] == "NVIDIA H100 80GB HBM3" and m["simulated"] == "true"
            assert m["node"] == "test-node" and m["gpu"].startswith("GPU-")
            assert float(series["value"][1]) == 80 * 2**30
        q = 'computewatch_job_cpu_seconds_total{team="nlp"} > 0'
        cpu = cw.wait_for(lambda: query(base, q), timeout=60, what="the tagged child's CPU")
        assert cpu[0]["metric"]["job"].startswith("process:")
        info = query(base, 'computewatch_job_info{team="nlp"}')
        assert info and info[0]["metric"]["project"] == "llm"
        assert info[0]["metric"]["kind"] == "process"
        energy_rate = cw.wait_for(
            lambda: query(base, "rate(computewatch_gpu_energy_joules_total[5s]) > 0"),
            timeout=60,
            what="a GPU energy rate",
        )
        assert len(energy_rate) == 2
        up = query(base, 'up{job="computewatch"}')  # the target's own series keep its job
        assert up and up[0]["value"][1] == "1"
    finally:
        prom.terminate()
        prom.wait(timeout=30)
        agent.terminate()
        agent.wait(timeout=30)
    assert agent.returncode == 0
