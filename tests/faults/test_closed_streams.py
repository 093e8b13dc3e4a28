"""Fault case 1: the supervisor's own output channels fail (closed, full, broken), the job's
exit status, its output and its run do not change.

The real CLI runs under ``sh``, which closes or redirects its descriptors as a user's shell
would. The job writes a marker when it finishes: if the supervisor exited first (the job
orphaned), the marker is missing when the supervisor's status comes back.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

CW = [sys.executable, "-m", "computewatch"]
JOB = 'sleep 0.5; echo done > "$0"; exit 6'


def _run_under_sh(cw: Any, redirect: str, *cw_args: str, marker: Path) -> int:
    """``computewatch run CW_ARGS -- sh -c JOB`` with the shell redirection ``redirect``."""
    argv = [*CW, "run", *cw_args, "--", "sh", "-c", JOB, str(marker)]
    r = subprocess.run(
        ["sh", "-c", f'"$@" {redirect}', "sh", *argv],
        env=cw.env(),
        cwd=cw.tmp,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=120,
        check=False,
    )
    return r.returncode


@pytest.mark.parametrize(
    ("redirect", "cw_args"),
    [
        (">&- 2>&-", ()),  # both closed: sys.stdout and sys.stderr are None
        ("2>&-", ()),  # stderr closed: the live view and the summary have nowhere to go
        (">&-", ("--json", "-")),  # the summary's JSON to a closed stdout
        (">/dev/full", ("--json", "-")),  # ENOSPC on stdout
        ("2>/dev/full", ()),  # ENOSPC on every write of the live view and the summary
        ("2>/dev/full", ("--live", "plain", "--interval", "0.1")),
    ],
)
def test_a_failing_output_channel_keeps_the_status_the_run_and_the_job(
    cw: Any, tmp_path: Path, redirect: str, cw_args: tuple[str, ...]
) -> None:
    marker = tmp_path / "job-finished"
    status = _run_under_sh(cw, redirect, *cw_args, marker=marker)
    assert status == 6  # the job's own
    assert marker.exists(), "the supervisor exited before its job"
    runs = cw.json("runs")
    assert len(runs) == 1
    assert (runs[0]["status"], runs[0]["exit_code"]) == ("failed", 6)


def test_a_job_started_with_stderr_closed_still_finds_it_closed(cw: Any, tmp_path: Path) -> None:
    """The supervisor fills descriptor 2 for itself, close-on-exec: the job sees what the
    caller gave it (a closed stderr, so ``echo >&2`` fails in the job)."""
    out = tmp_path / "out"
    r = subprocess.run(
        [
            "sh", "-c", '"$@" 2>&-', "sh", *CW, "run", "--quiet", "--", "sh", "-c",
            'if echo x >&2; then echo open > "$0"; else echo closed > "$0"; fi', str(out),
        ],
        env=cw.env(), cwd=cw.tmp, capture_output=True, timeout=120, check=False,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout
    assert out.read_text().strip() == "closed"
