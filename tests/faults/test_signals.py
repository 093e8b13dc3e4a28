"""A signal sent to the supervisor while its own threads run (the ``--prometheus`` server)
reaches the job, never ends the supervisor first: the job is not orphaned, and its status and
its run stay."""

from __future__ import annotations

import signal
import subprocess
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

JOB = 'echo $$ > "$1"; trap \'echo term > "$0"; exit 143\' TERM; while :; do sleep 0.1; done'


def test_sigterm_with_the_metrics_server_running_is_forwarded(
    cw: Any, tmp_path: Path, free_port: Callable[[], int]
) -> None:
    port = free_port()
    marker = tmp_path / "job-got-sigterm"
    p = cw.popen(
        "run", "--quiet", "--interval", "0.2", "--prometheus", f"127.0.0.1:{port}",
        "--", "sh", "-c", JOB, str(marker), str(tmp_path / "job.pid"),
    )  # fmt: skip

    def serving() -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                return b"computewatch_job_info" in r.read()
        except OSError:
            return False

    cw.wait_for(serving, timeout=60, what="the run's metrics")
    p.send_signal(signal.SIGTERM)
    try:
        _, err = p.communicate(timeout=60)
    except subprocess.TimeoutExpired:  # the supervisor died and left its job running
        cw.kill_pid_file(tmp_path / "job.pid")
        p.kill()
        raise
    assert p.returncode == 143, err  # the job's status: it got SIGTERM and exited 143
    assert marker.read_text() == "term\n"
    summary = cw.show()
    assert (summary["status"], summary["exit_code"]) == ("interrupted", 143)
