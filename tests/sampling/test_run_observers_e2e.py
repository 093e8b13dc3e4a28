"""``computewatch run --prometheus`` and ``--alerts`` end to end: a real run, scraped over HTTP
while it runs, and alert rules that fire and resolve, delivered to a local webhook."""

from __future__ import annotations

import socket
import sys
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

STEPPER = """
import time, computewatch
with computewatch.track(name="observed") as run:
    end = time.monotonic() + {busy}
    while time.monotonic() < end:
        time.sleep(0.01)
        run.step(samples=4)
    time.sleep({idle})
"""


def _scrape(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return str(r.read().decode())
    except OSError:
        return None


def _value(text: str, name: str) -> float | None:
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return None


def test_prometheus_endpoint_serves_the_run_while_it_runs(
    cw: Any, make_script: Callable[[str, str], Path], free_port: Callable[[], int]
) -> None:
    script = make_script("stepper.py", STEPPER.format(busy=4, idle=0.5))
    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    p = cw.popen(
        "run", "--quiet", "--interval", "0.2", "--prometheus", f"127.0.0.1:{port}",
        "--gpu-backend", "fake:1xH100-SXM", "--", sys.executable, script,
    )  # fmt: skip
    text = cw.wait_for(
        lambda: (t := _scrape(url)) and (_value(t, "computewatch_job_steps_total") or 0) > 10 and t,
        timeout=60,
        what="steps on /metrics",
    )
    _, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    run_id = cw.show()["id"]
    assert f'job="{run_id}"' in text
    assert 'kind="computewatch"' in text
    assert "# TYPE computewatch_job_cpu_seconds_total counter" in text
    assert 'computewatch_gpu_memory_total_bytes{accelerator="gpu",gpu="GPU-' in text
    assert 'simulated="true"' in text
    assert _scrape(url) is None  # the endpoint closes with the run


def test_a_port_in_use_stops_before_the_command_runs(
    cw: Any, make_script: Callable[[str, str], Path], tmp_path: Path
) -> None:
    marker = tmp_path / "ran"
    script = make_script("touch.py", f"open({str(marker)!r}, 'w').close()")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = cw("run", "--prometheus", f"127.0.0.1:{port}", "--", sys.executable, script)
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and "--prometheus" in r.stderr
    assert "Traceback" not in r.stderr
    assert not marker.exists()


def test_alert_rules_fire_and_resolve_during_a_run(
    cw: Any, make_script: Callable[[str, str], Path], tmp_path: Path, receiver: Any
) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text(
        "builtin: false\n"
        "rules:\n"
        "  - name: Stepping\n"
        "    expr: rate(computewatch_job_steps_total[3s]) > 5\n"
        "    severity: info\n"
        '    message: "{labels.job} steps at {value:.0f}/s"\n'
    )
    # A 3 s window with ticks every 0.2 s: a tick or two late on a loaded machine still leaves
    # two points in it, where a 1 s window would lose the rate (resolve) and fire again. The idle
    # end (5 s) outlasts the window, so the rate falls to zero before the run ends.
    script = make_script("stepper.py", STEPPER.format(busy=4, idle=5))
    r = cw(
        "run", "--quiet", "--interval", "0.2", "--alerts", rules, "--notify", "terminal",
        "--notify", f"webhook:{receiver.url}/hook", "--", sys.executable, script,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    run_id = cw.show()["id"]
    lines = [ln for ln in r.stderr.splitlines() if "alert [" in ln]
    assert any("[FIRING] Stepping (info)" in ln and run_id in ln for ln in lines), r.stderr
    assert any("[RESOLVED] Stepping" in ln for ln in lines), r.stderr
    alerts = receiver.alerts()
    states = [a["status"] for a in alerts if a["rule"] == "Stepping"]
    assert states == ["firing", "resolved"], alerts
    fired, resolved = alerts
    assert fired["labels"]["job"] == run_id and fired["fingerprint"] == resolved["fingerprint"]
    assert fired["value"] > 5


def test_energy_budget_alert_in_a_run(
    cw: Any, make_script: Callable[[str, str], Path], receiver: Any
) -> None:
    script = make_script("stepper.py", STEPPER.format(busy=2, idle=0.5))
    r = cw(
        "run", "--quiet", "--interval", "0.2", "--gpu-backend", "fake:1xH100-SXM",
        "--budget-kwh", "0.00001", "--notify", f"webhook:{receiver.url}/hook", "--",
        sys.executable, script,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    budget = [a for a in receiver.alerts() if a["rule"] == "JobEnergyBudgetExceeded"]
    assert budget and budget[0]["status"] == "firing", receiver.alerts()
    assert "kWh" in budget[0]["annotations"]["summary"]
    assert budget[0]["value"] >= 0.00001


def test_a_bad_rules_file_stops_before_the_command_runs(
    cw: Any, make_script: Callable[[str, str], Path], tmp_path: Path
) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text("rules:\n  - name: Bad\n    expr: computewatch_gpu_utilization_ratio >\n")
    marker = tmp_path / "ran"
    script = make_script("touch.py", f"open({str(marker)!r}, 'w').close()")
    r = cw("run", "--alerts", rules, "--", sys.executable, script)
    assert r.returncode == 2
    assert f"{rules}:3" in r.stderr and "Traceback" not in r.stderr
    assert not marker.exists()
