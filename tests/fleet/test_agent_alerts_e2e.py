"""``computewatch agent --alerts FILE --notify ...``: the node agent, a real child process with
fake GPUs, evaluates alert rules after its ticks and delivers them to a real webhook."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

GIB = 2**30


def start_agent(cw: Any, port: int, rules: Path, *extra: str) -> Any:
    proc = cw.popen(
        "agent", "--listen", f"127.0.0.1:{port}", "--interval", "0.2", "--node", "n1",
        "--alerts", rules, *extra,
    )  # fmt: skip
    return proc


def stop(proc: Any) -> str:
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    return str(err)


def test_agent_fires_rules_on_its_gpus_to_a_webhook_and_the_terminal(
    cw: Any, tmp_path: Path, free_port: Callable[[], int], receiver: Any
) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text(
        "builtin: false\n"
        "rules:\n"
        "  - name: GpuBig\n"
        "    expr: computewatch_gpu_memory_total_bytes > 40e9\n"
        "    severity: info\n"
        '    message: "GPU {labels.gpu_index} on {labels.node}: {value:.0f} bytes"\n'
    )
    proc = start_agent(
        cw, free_port(), rules, "--gpu-backend", "fake:2xH100-SXM",
        "--notify", "terminal", "--notify", f"webhook:{receiver.url}/hook",
    )  # fmt: skip
    # Both fake GPUs' alerts fire on the first tick, in one batch or two.
    receiver.wait(lambda r: len(r.alerts()) >= 2, timeout=60)
    err = stop(proc)
    alerts = receiver.alerts()
    assert len(alerts) == 2, alerts  # firing once each; the condition still held at the end
    assert set(receiver.paths) == {"/hook"}
    assert all(d["source"] == "computewatch" and d["status"] == "firing" for d in receiver.bodies)
    by_index = {a["labels"]["gpu_index"]: a for a in alerts}
    assert sorted(by_index) == ["0", "1"]
    for index, a in by_index.items():
        assert a["status"] == "firing" and a["endsAt"] is None
        assert a["rule"] == "GpuBig" and a["severity"] == "info"
        labels = a["labels"]
        assert labels["alertname"] == "GpuBig" and labels["severity"] == "info"
        assert labels["node"] == "n1" and labels["simulated"] == "true"
        assert labels["gpu_model"] == "NVIDIA H100 80GB HBM3"
        assert a["value"] == 80 * GIB  # the H100-SXM preset's memory
        assert a["annotations"]["summary"] == f"GPU {index} on n1: {80 * GIB} bytes"
    assert by_index["0"]["fingerprint"] != by_index["1"]["fingerprint"]
    lines = [ln for ln in err.splitlines() if "alert [" in ln]
    assert len(lines) == 2, err
    assert all("[FIRING] GpuBig (info): GPU " in ln and "on n1" in ln for ln in lines), err
    assert "RESOLVED" not in err


BURNER = """
import os, sys
while not os.path.exists(sys.argv[1]):
    sum(range(10000))
"""


def test_agent_fires_and_resolves_a_job_rule(
    cw: Any, tmp_path: Path, free_port: Callable[[], int], receiver: Any
) -> None:
    job = f"burner-{uuid.uuid4().hex[:8]}"  # unique: other tests' processes run on this node
    rules = tmp_path / "rules.yaml"
    # A process busy-looping uses about one core; 0.1 holds even on a loaded 2-core machine.
    # The 3 s window holds many 0.2 s ticks, so a late tick cannot leave it with fewer than the
    # two points rate() needs (which would resolve the alert early).
    rules.write_text(
        "builtin: false\n"
        "rules:\n"
        "  - name: JobBusy\n"
        f'    expr: rate(computewatch_job_cpu_seconds_total{{job="{job}"}}[3s]) > 0.1\n'
        '    message: "{labels.job} of {labels.team} uses {value:.2f} cores"\n'
    )
    proc = start_agent(
        cw, free_port(), rules, "--gpu-backend", "none",
        "--notify", f"webhook:{receiver.url}/hook",
    )  # fmt: skip
    script = tmp_path / "burner.py"
    script.write_text(BURNER)
    stop_file = tmp_path / "stop"
    env = dict(os.environ, COMPUTEWATCH_TAGS=f"job={job},team=ml")
    burner = subprocess.Popen([sys.executable, str(script), str(stop_file)], env=env)
    try:
        receiver.wait(lambda r: any(a["status"] == "firing" for a in r.alerts()), timeout=90)
        stop_file.touch()  # the job's processes end; its counter stays, so its rate drops to 0
        burner.wait(timeout=60)
        receiver.wait(lambda r: any(a["status"] == "resolved" for a in r.alerts()), timeout=90)
    finally:
        stop_file.touch()
        if burner.poll() is None:
            burner.kill()
            burner.wait()
    stop(proc)
    alerts = receiver.alerts()
    assert [a["status"] for a in alerts] == ["firing", "resolved"], alerts
    fired, resolved = alerts
    assert fired["fingerprint"] == resolved["fingerprint"]
    assert fired["labels"]["job"] == job and fired["labels"]["team"] == "ml"
    assert fired["labels"]["node"] == "n1" and fired["labels"]["alertname"] == "JobBusy"
    assert fired["severity"] == "warning"  # the default
    assert fired["value"] > 0.1
    assert fired["annotations"]["summary"].startswith(f"{job} of ml uses ")
    assert resolved["endsAt"] is not None and fired["endsAt"] is None
    assert [d["status"] for d in receiver.bodies] == ["firing", "resolved"]
