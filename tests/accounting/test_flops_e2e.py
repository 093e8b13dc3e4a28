"""Counted FLOPs and MFU end to end: ``computewatch run -- python script.py`` where the script
declares its FLOPs per step and the CPU's peak with ``track()``; the stored summary's MFU is
checked against the script's own clock."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

SCRIPT = """
import json, sys, time
import computewatch

FPS, PEAK, N = 3e9, 2e10, 12
times = []
with computewatch.track(name="flops-e2e", flops_per_step=FPS, peak_flops=PEAK,
                        recompute="full") as run:
    nxt = time.monotonic()
    for _ in range(N):
        nxt += 0.05
        time.sleep(max(0.0, nxt - time.monotonic()))
        run.step(samples=4)
        times.append(time.monotonic())
with open(sys.argv[1], "w") as f:
    json.dump({"times": times, "fps": FPS, "peak": PEAK, "n": N}, f)
"""


@pytest.mark.slow
def test_mfu_of_a_cpu_run(cw: Any, make_script: Any, tmp_path: Path) -> None:
    script = make_script("train.py", SCRIPT)
    out = tmp_path / "times.json"
    r = cw.ok("run", "--interval", "0.2", "--", sys.executable, script, out)
    got = json.loads(out.read_text())
    f = cw.show()["flops"]
    n, fps, peak, times = got["n"], got["fps"], got["peak"], got["times"]
    assert f["method"] == "counted"
    assert f["value"] == n * fps  # 12 x 3e9 = 3.6e10 FLOP
    assert f["steps_with_flops"] == n
    # MFU: the steps after the first, over the time from the first step to the last, x peak
    window = times[-1] - times[0]
    assert f["step_time_seconds"] == pytest.approx(window, abs=2e-3)
    expected = (n - 1) * fps / (window * peak)  # ~0.6 at 50 ms a step
    assert f["mfu"]["value"] == pytest.approx(expected, rel=0.02)
    assert f["flops_per_second"]["value"] == pytest.approx((n - 1) * fps / window, rel=0.02)
    assert f["peak_flops"] == peak
    assert f["hfu"]["value"] == pytest.approx(expected * 4 / 3, rel=0.02)
    # a CPU-only run: the hardware estimate beside it has nothing to estimate from
    assert f["hardware_estimate"]["value"] is None
    # the text summary says it
    assert "FLOP counted" in r.stdout + r.stderr
    assert "MFU" in cw.ok("show", "last").stdout
