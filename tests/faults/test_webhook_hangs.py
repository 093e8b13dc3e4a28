"""A webhook that accepts the connection and never answers never holds the job: ``computewatch
run`` returns the command's exit status and stores the run, and ``computewatch agent`` stops on
SIGTERM, both while the receiver is still holding the request (docs/alerts.md: what is queued
is delivered for up to 5 seconds per target at the end, then left)."""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

RULES = (
    "builtin: false\n"
    "rules:\n"
    "  - name: GpuBig\n"
    "    expr: computewatch_gpu_memory_total_bytes > 40e9\n"  # true on the first tick
    "    severity: info\n"
    '    message: "GPU {labels.gpu_index}: {value:.0f} bytes"\n'
)


def _held(receiver: Any) -> bool:
    """A request arrived and none was answered: the receiver is still holding it."""
    with receiver.arrived:
        return receiver.requests >= 1 and not receiver.bodies and not receiver.hold.is_set()


def test_run_returns_the_exit_status_while_the_webhook_hangs(
    cw: Any, make_script: Callable[[str, str], Path], tmp_path: Path, receiver: Any
) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES)
    receiver.hold.clear()
    # The job waits until the alert's POST has reached the receiver, then fails with 3.
    script = make_script("job.py", "import sys, time\ntime.sleep(float(sys.argv[1]))\nsys.exit(3)")
    p = cw.popen(
        "run", "--quiet", "--interval", "0.2", "--gpu-backend", "fake:1xH100-SXM",
        "--alerts", rules, "--notify", f"webhook:{receiver.url}/hook", "--",
        sys.executable, script, "1.5",
    )  # fmt: skip
    receiver.wait(lambda r: r.requests >= 1, timeout=60)
    _, err = p.communicate(timeout=120)
    # The supervisor is gone and the receiver has not answered yet.
    assert _held(receiver), (receiver.requests, receiver.bodies)
    assert p.returncode == 3, err
    assert "not delivered at exit" in err, err
    assert "Traceback" not in err
    shown = cw.show()
    assert shown["exit_code"] == 3 and shown["status"] == "failed", shown


def test_agent_stops_on_sigterm_while_the_webhook_hangs(
    cw: Any, tmp_path: Path, free_port: Callable[[], int], receiver: Any
) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES)
    receiver.hold.clear()
    proc = cw.popen(
        "agent", "--listen", f"127.0.0.1:{free_port()}", "--interval", "0.2", "--node", "n1",
        "--gpu-backend", "fake:1xH100-SXM", "--alerts", rules,
        "--notify", f"webhook:{receiver.url}/hook",
    )  # fmt: skip
    try:
        receiver.wait(lambda r: r.requests >= 1, timeout=60)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert _held(receiver), (receiver.requests, receiver.bodies)
    assert proc.returncode == 0, err
    assert "not delivered at exit" in err, err
    assert "Traceback" not in err
