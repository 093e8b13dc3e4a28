"""Data-loader starvation over crafted steps and `data` phases."""

from __future__ import annotations


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
