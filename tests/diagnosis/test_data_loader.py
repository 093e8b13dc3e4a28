"""Data-loader starvation over crafted steps and `data` phases."""

from __future__ import annotations

import pytest

from computewatch.diagnosis.loader import StepTime
from computewatch.diagnosis.rules.data_loader import loader_saving


def _loop(run, wait: float, compute: float, n: int = 60, pid: int = 10) -> None:
    """``n`` steps, each waiting ``wait`` for data then computing ``compute``."""
    run.writer(pid, start=0.0)
    t = 0.0
    for _ in range(n):
        run.phase(pid, "data", t, t + wait)
        t += wait + compute
    run.steps(pid, [wait + compute] * n)


def test_starved_loop_fires_with_share_and_range(crafted):
    run = crafted()
    run.ticks(40)
    _loop(run, wait=0.3, compute=0.3)  # half of every step waits: 18 s of 36 s
    f = run.finding("data_starvation")
    assert abs(f.evidence.numbers["data_wait_share"] - 0.5) < 1e-6
    assert abs(f.at_stake.seconds - 18.0) < 1e-6
    assert f.severity == "high"  # 18 s of a 40 s run
    assert f.evidence.ranges and f.evidence.ranges[0].seconds > 30
    assert "num_workers=" in f.suggestion and "pin_memory=True" in f.suggestion
    assert "persistent_workers=True" in f.suggestion and "prefetch_factor" in f.suggestion
    # 4 allowed cores, one process: 3 workers leave a core for the loop
    assert "num_workers=3" in f.suggestion


def test_healthy_loop_does_not_fire(crafted):
    run = crafted()
    run.ticks(40)
    _loop(run, wait=0.01, compute=0.5)
    assert "data_starvation" not in run.ids()
    assert "data_starvation" in run.diagnose().checked


def test_threshold_from_configuration_is_respected(crafted):
    run = crafted()
    run.ticks(40)
    _loop(run, wait=0.3, compute=0.3)
    assert "data_starvation" not in run.ids(data_wait_share=0.6)
    assert "data_starvation" in run.ids(data_wait_share=0.4)


def test_no_data_phase_is_not_applicable(crafted):
    run = crafted()
    run.ticks(10)
    run.writer(10)
    run.steps(10, [0.1] * 50)
    d = run.diagnose()
    assert "data_starvation" in d.not_applicable
    assert "run.data" in d.not_applicable["data_starvation"]


def test_gpu_idle_while_waiting_is_quoted(crafted):
    run = crafted()
    run.gpu()
    times = run.ticks(60)
    # the loop waits 2 s then computes 2 s; the GPU is busy only while computing
    pid = 10
    run.writer(pid)
    for k in range(15):
        run.phase(pid, "data", 4 * k, 4 * k + 2)
    run.steps(pid, [4.0] * 15)
    util = [0.0 if ((t - times[0] + 1) % 4) in (1.0, 2.0) else 0.9 for t in times]
    run.series("gpu_utilization_ratio", util, gpu=run.gpu_uuid)
    f = run.finding("data_starvation")
    assert f.evidence.numbers["gpu_utilization_waiting"] < 0.2
    assert f.evidence.numbers["gpu_utilization_otherwise"] > 0.7
    assert any("while waiting for data" in line for line in f.evidence.lines)


def test_a_shared_machine_leaves_the_workers_only_the_cores_others_left_free():
    # 100 steps of 10 ms compute and 30 ms waiting for a loader that keeps a core busy, on 2
    # cores. Quiet: one worker on the free core makes a step max(10, 30) ms: 1 s saved.
    times = {1: [StepTime(1, i + 1, i * 0.04, (i + 1) * 0.04) for i in range(100)]}
    waits = {1: [0.03] * 100}
    quiet, workers = loader_saving(times, waits, 2.0, None)
    assert workers == 1 and quiet.seconds == pytest.approx(1.0, rel=0.01)
    # Other processes kept 0.9 cores busy meanwhile: the worker has a tenth of a core, which
    # loads slower than the loop loads itself: nothing to win, but a rerun on a quieter
    # machine could win what the quiet machine does (the range's high end).
    shared, _ = loader_saving(times, waits, 2.0, None, others=0.9)
    assert shared.seconds == pytest.approx(0.0, abs=1e-9)
    assert shared.high_seconds == pytest.approx(quiet.seconds, rel=0.01)
    assert "0.90 cores busy with other work" in shared.assumes
    # Half a core left free: a batch every 60 ms, slower than the 40 ms step it replaces.
    half, _ = loader_saving(times, waits, 2.0, None, others=0.5)
    assert half.seconds == pytest.approx(0.0, abs=1e-9)
    some, _ = loader_saving(times, waits, 2.0, None, others=0.2)
    assert 0 < some.seconds < quiet.seconds
    # The run's processes used 0.25 cores (10 ms of CPU a 40 ms step): at most a third of the
    # wait was loading on a core; the workers get the 0.35 cores nobody used and the loop's
    # own loading time (0.25 x 1/3 x 30/40 = 0.0625 cores): 10 ms of CPU per batch on 0.4125
    # cores is 24.2 ms, under the 40 ms step.
    used, _ = loader_saving(times, waits, 2.0, None, others=1.4, tree=0.25)
    assert "at most 33% of it on a core" in used.assumes
    assert used.seconds == pytest.approx(100 * (0.04 - 0.01 / 0.4125), rel=0.02)
