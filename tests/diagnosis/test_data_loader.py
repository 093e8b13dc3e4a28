"""Data-loader starvation over crafted steps and `data` phases."""

from __future__ import annotations

import pytest

from computewatch.diagnosis.loader import StepTime
from computewatch.diagnosis.rules.data_loader import Machine, loader_saving


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


def _steps(
    compute: float, wait: float, n: int = 100
) -> tuple[dict[int, list[StepTime]], dict[int, list[float]]]:
    """``n`` steps of one process, each waiting ``wait`` for data then computing ``compute``."""
    step = compute + wait
    return {1: [StepTime(1, i + 1, i * step, (i + 1) * step) for i in range(n)]}, {1: [wait] * n}


def test_other_busy_cores_take_a_fair_share_from_the_workers() -> None:
    # 100 steps of 10 ms compute and 30 ms waiting for a loader that keeps a core busy, on 2
    # cores. Quiet: one worker on the free core makes a step max(10, 30) ms: 1 s saved.
    times, waits = _steps(0.01, 0.03)
    quiet, workers = loader_saving(times, waits, Machine(2.0))
    assert workers == 1 and quiet.seconds == pytest.approx(1.0, rel=0.01)
    # Other processes kept 0.9 cores busy (the host's CPU use: 0.9 threads): the worker gets
    # 2 / (0.9 + 2) of a core, 30 ms of loading take 43 ms, more than the 40 ms step: nothing
    # to win, but a rerun on a quieter machine could win what the quiet machine does.
    shared, _ = loader_saving(times, waits, Machine(2.0, others=0.9))
    assert shared.seconds == pytest.approx(0.0, abs=1e-9)
    assert shared.high_seconds == pytest.approx(quiet.seconds, rel=0.01)
    assert "0.9 other runnable thread(s)" in shared.assumes
    # 0.2 threads: 2 / 2.2 of a core, 33 ms a batch (the loop's 10 ms slowed as much).
    some, _ = loader_saving(times, waits, Machine(2.0, others=0.2))
    assert some.seconds == pytest.approx(100 * (0.04 - 0.03 * 2.2 / 2), rel=0.01)


def test_io_waits_overlap_with_compute_on_a_machine_without_an_idle_core(crafted):
    # Each step waits 70 ms on I/O (the loop's process asleep) and computes 20 ms, on 2 cores
    # that other processes keep busy (load average 6). Waiting needs no core: workers overlap
    # it with compute whatever the load, so nearly the whole wait is won (it was 0 when the
    # model took the loading's CPU bound as work that must fit on the cores nobody used).
    run = crafted(cores=2.0)
    run.ticks(12)
    _loop(run, wait=0.07, compute=0.02, n=120)  # 10.8 s of steps, 8.4 s waiting
    run.counter("tree_cpu_seconds_total", lambda t: 0.1)
    for cpu in ("0", "1"):
        run.counter("host_cpu_seconds_total", lambda t: 1.0, cpu=cpu, mode="user")
        run.counter("host_cpu_seconds_total", lambda t: 0.0, cpu=cpu, mode="idle")
    run.series("host_load1", [6.0] * 12)
    f = run.finding("data_starvation")
    s = f.saving
    # The loop had 2 / (5.7 + 1) of a core (5.7 other threads: the load less the run's own
    # 0.3); a step is its compute at the share left beside a worker busy part of the time.
    assert 0.8 * 8.4 <= s.seconds <= 8.4
    assert f.evidence.numbers["load_average"] == pytest.approx(6.0)
    assert f.evidence.numbers["others_cores_busy"] == pytest.approx(1.9, abs=0.01)
    # a worker for the CPU work, one for each whole compute step the waiting lasts (about 60
    # of the 70 ms, 20 ms steps)
    assert (
        s.fix.startswith(("3 loader worker(s)", "4 loader worker(s)"))
        and "waits on I/O, not on a core" in f.suggestion
    )
    assert 0 < s.low_seconds <= s.seconds <= s.high_seconds
    assert "the load average 6.00" in s.assumes and "whatever the load" in s.assumes


def test_cpu_work_in_loading_gets_a_fair_share_under_load() -> None:
    # A loader that keeps a core busy (20 ms compute, 40 ms loading a step) on 2 cores with
    # load average 6, the run's tree a third of a core busy: 5 other runnable threads, the
    # loop had 2 / 6 of a core, all of the wait CPU work. One worker: the loop and the worker
    # each get 2 / 7 of a core: loading takes 40 x 7/6 ms, compute 20 x 7/6 ms in parallel, a
    # step 46.7 ms instead of 60 ms.
    times, waits = _steps(0.02, 0.04)
    m = Machine(2.0, tree=1 / 3, others=5 / 3, load=6.0, host_cores=2.0)
    s, workers = loader_saving(times, waits, m)
    assert workers == 1
    assert s.seconds == pytest.approx(100 * (0.06 - 0.04 * 7 / 6), rel=0.01)
    # Low: the run's processes in one scheduling group, which gets no more CPU than the third
    # of a core the loop had: the worker only takes the loop's time, no gain.
    assert s.low_seconds == pytest.approx(0.0, abs=1e-9)
    # High: the machine quiet for the fixed run and a quarter of the wait waiting, not CPU:
    # a step takes the 10 ms wait plus 10 ms of CPU work on a whole core.
    assert s.high_seconds == pytest.approx(100 * (0.06 - 0.02), rel=0.01)
    assert "5.0 other runnable thread(s)" in s.assumes and "0.33 of a core" in s.assumes
    assert "scheduling group" in s.assumes


def test_a_loop_with_more_cpu_than_the_load_average_gives_it_is_told_by_its_share() -> None:
    # 17 ms compute and 83 ms waiting a step, the run's tree a quarter of a core busy, the
    # load average 9 on 2 cores: a thread's fair share would be 0.22, less than the loop used
    # (a group scheduler, such as Linux's autogroup, weighs the loop's competitors by group).
    # The loop's share lies between 0.25 (the whole wait CPU work) and 1 (its compute alone
    # explains the CPU: the wait all waiting); at their geometric mean, 0.5, 40% of the wait
    # is CPU work: an I/O-bound loader, 1 + 2 workers (50 ms waiting, 17 ms compute), nearly
    # the whole wait won.
    times, waits = _steps(0.017, 0.083, 60)
    m = Machine(2.0, tree=0.25, others=1.75, load=9.0, host_cores=2.0)
    s, workers = loader_saving(times, waits, m)
    assert workers == 3 and s.part == "loop-io"
    assert 0.8 * 60 * 0.083 <= s.seconds <= 60 * 0.083
    assert "0.25-1.00 of a core when runnable" in s.assumes and "40% of it CPU work" in s.assumes
    # Low: all of it CPU work at the quarter of a core, in a group that gets no more: nothing.
    assert s.low_seconds == pytest.approx(0.0, abs=1e-9)
    assert s.high_seconds >= s.seconds


def test_a_saturated_host_without_a_load_average_takes_the_wait_as_cpu_work() -> None:
    # The host's cores all busy and no load average: the loop's share cannot be told from
    # its CPU, so the wait is taken as CPU work at the share the run got (the smaller saving).
    times, waits = _steps(0.02, 0.07)
    m = Machine(2.0, tree=0.1, others=1.9, host_cores=2.0)
    s, _ = loader_saving(times, waits, m)
    with_load, _ = loader_saving(times, waits, Machine(2.0, 0.1, 1.9, 6.0, 2.0))
    assert s.seconds < 0.5 * with_load.seconds
    assert "load average not read" in s.assumes and "taken as CPU work" in s.assumes
