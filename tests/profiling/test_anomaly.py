"""Capture on anomaly: when the step-time regression detector fires during ``computewatch
run``, one py-spy sample of the job (and a PyTorch Profiler window in a ``computewatch.torch``
loop), at most once per interval, named in the step-regression finding."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from computewatch.profiling.anomaly import TORCH_REQUEST, AnomalyCapture, read_torch_request
from computewatch.profiling.artifacts import MANIFEST_SUFFIX

READY = "print('ready', flush=True)\n"
SPIN = READY + "import time\nwhile True:\n    sum(range(10000))\n    time.sleep(0.001)\n"


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_one_capture_per_interval_off_the_callers_thread(tmp_path: Path) -> None:
    job = subprocess.Popen([sys.executable, "-c", SPIN], stdout=subprocess.PIPE, text=True)
    try:
        assert job.stdout is not None and job.stdout.readline() == "ready\n"
        clock = Clock()
        log = io.StringIO()
        cap = AnomalyCapture(tmp_path / "a", lambda: [job.pid], min_interval=600, seconds=1,
                             log=log, clock=clock)  # fmt: skip
        assert cap.trigger("step time regression of r1: 80% slower")
        assert not cap.trigger("again, while the first runs")
        cap.wait(60)
        clock.now = 599.0
        assert not cap.trigger("again, within the interval")
        clock.now = 601.0
        assert cap.trigger("again, after the interval", tmp_path / "b")
        cap.wait(60)
    finally:
        job.kill()
        job.communicate()
    manifests = sorted((tmp_path / "a").glob(f"*{MANIFEST_SUFFIX}"))
    assert len(manifests) == 1 and len(list((tmp_path / "b").glob(f"*{MANIFEST_SUFFIX}"))) == 1
    doc = json.loads(manifests[0].read_text())
    assert doc["tool"] == "py-spy" and doc["trigger"] == "anomaly"
    assert doc["note"] == "step time regression of r1: 80% slower"
    assert Path(doc["files"]["svg"]).exists() and Path(doc["files"]["speedscope"]).exists()
    assert "py-spy sample" in log.getvalue()
    assert read_torch_request(tmp_path / "a") == (20, "step time regression of r1: 80% slower")
    assert read_torch_request(tmp_path / "a") is None  # taken once
    assert not (tmp_path / "a" / TORCH_REQUEST).exists()


JOB = """
import time, computewatch, computewatch.torch  # torch itself loads with the profiler window

def work():
    return sum(i * i for i in range(2000))

class Loader:
    def __iter__(self):
        # About 8x slower after 3 s, for 120 slow steps (6 s of them), counted rather than
        # timed: loading torch for the profiler window can take seconds on a busy machine, and
        # a time limit would then leave too few slow steps to name the regression.
        t0, slow_steps = time.monotonic(), 0
        while slow_steps < 120:
            slow = time.monotonic() - t0 > 3.0
            slow_steps += slow
            time.sleep(0.05 if slow else 0.005)
            yield [1.0] * 8

with computewatch.track() as run:
    for batch in computewatch.torch.steps(run, Loader()):
        work()
"""


@pytest.mark.slow
def test_regression_during_a_run_captures_and_names_it(
    cw: Any, make_script: Any, tmp_path: Path
) -> None:
    cfg = tmp_path / "cw.toml"
    cfg.write_text(
        "[profiling]\ncapture_on_regression = true\ncapture_seconds = 1\n"
        "regression_warmup = 0.5\nregression_baseline = 1.5\nregression_window = 1.0\n"
        "regression_threshold = 0.5\n"
    )
    job = make_script("train.py", JOB)
    r = cw("run", "--interval", "0.25", "--config", str(cfg), "--", sys.executable, str(job))
    assert r.returncode == 0, r.stderr
    assert "step time regression of" in r.stderr and "py-spy sample" in r.stderr
    shown = cw.json("show", "last")
    arts = shown["artifacts"]
    spy = [a for a in arts if a["tool"] == "py-spy"]
    assert len(spy) == 1  # once per interval (default 30 min)
    assert spy[0]["trigger"] == "anomaly" and "slower than its baseline" in spy[0]["note"]
    torch_windows = [a for a in arts if a["tool"] == "torch-profiler"]
    assert len(torch_windows) == 1 and torch_windows[0]["trigger"] == "anomaly"
    assert Path(torch_windows[0]["files"]["chrome_trace"]).exists()
    findings = {f["id"]: f for f in shown["diagnosis"]["findings"]}
    assert "step_regression" in findings, shown["diagnosis"]
    lines = findings["step_regression"]["evidence"]["lines"]
    assert any(spy[0]["files"]["svg"] in line for line in lines)
