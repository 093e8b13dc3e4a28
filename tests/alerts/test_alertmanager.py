"""End to end through a real Alertmanager: a rule fires, is delivered, resolves, is delivered."""

from __future__ import annotations

import io
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from computewatch.alerts import sink_from_args
from computewatch.metrics.model import MetricSample

ALERTMANAGER = "/usr/bin/prometheus-alertmanager"
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        shutil.which(ALERTMANAGER) is None,
        reason="Debian package prometheus-alertmanager not installed",
    ),
]


@pytest.fixture
def alertmanager(
    tmp_path: Path, receiver: Any, free_port: Callable[[], int], wait_ready: Callable[..., None]
) -> Iterator[str]:
    port = free_port()
    config = tmp_path / "alertmanager.yml"
    config.write_text(
        f"""
route:
  receiver: hook
  group_by: [alertname]
  group_wait: 1s
  group_interval: 1s
  repeat_interval: 1h
receivers:
  - name: hook
    webhook_configs:
      - url: {receiver.url}/am
        send_resolved: true
"""
    )
    log_path = tmp_path / "alertmanager.log"
    log = log_path.open("w")
    proc = subprocess.Popen(
        [
            ALERTMANAGER,
            f"--config.file={config}",
            f"--storage.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--cluster.listen-address=",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, proc, log_path)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


GPU = (("gpu", "GPU-0000"), ("gpu_index", "0"), ("gpu_model", "NVIDIA H100"), ("node", "n1"))


def memory(used: float) -> list[MetricSample]:
    return [
        MetricSample("computewatch_gpu_memory_used_bytes", GPU, used),
        MetricSample("computewatch_gpu_memory_total_bytes", GPU, 80e9),
    ]


def test_builtin_rule_fires_and_resolves_through_alertmanager(
    alertmanager: str, receiver: Any
) -> None:
    out = io.StringIO()
    sink = sink_from_args(
        None, notify=[f"alertmanager:{alertmanager}"], budget_usd=None, budget_kwh=None, out=out
    )
    try:
        now = time.time()
        sink.on_metrics(now - 150, memory(79e9))  # pending: GpuMemoryHigh has for: 2m
        sink.on_metrics(now, memory(79.5e9))  # 150 s later: firing
        receiver.wait(lambda r: any(b["status"] == "firing" for b in r.bodies), timeout=60)
        sink.on_metrics(time.time(), memory(20e9))
        receiver.wait(lambda r: any(b["status"] == "resolved" for b in r.bodies), timeout=60)
    finally:
        sink.close()
    firing = next(b for b in receiver.bodies if b["status"] == "firing")
    resolved = next(b for b in receiver.bodies if b["status"] == "resolved")
    [a] = firing["alerts"]
    assert a["labels"]["alertname"] == "GpuMemoryHigh"
    assert a["labels"]["gpu"] == "GPU-0000" and a["labels"]["severity"] == "warning"
    assert a["annotations"]["summary"] == "GPU 0 on n1: memory 99.4% full"
    assert a["generatorURL"].startswith("computewatch://")
    [b] = resolved["alerts"]
    assert b["status"] == "resolved" and b["labels"] == a["labels"]
    assert receiver.paths[0] == "/am"
    assert "delivery failed" not in out.getvalue()
