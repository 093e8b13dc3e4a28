"""Step-time regression, drift and outlier steps over crafted step series."""

from __future__ import annotations

import random


def _noisy(base: float, n: int, rng: random.Random, jitter: float = 0.05) -> list[float]:
    return [base * (1 + rng.uniform(-jitter, jitter)) for _ in range(n)]


def test_slowdown_halfway_is_found_at_the_right_step(crafted):
    rng = random.Random(1)
    run = crafted()
    run.ticks(10)
    run.writer(10)
    durations = _noisy(0.02, 50, rng) + _noisy(0.04, 50, rng)  # steps 51.. take twice as long
    ends = run.steps(10, durations)
    f = run.finding("step_regression")
    n = f.evidence.numbers
    assert n["kind"] == "regression"
    assert abs(n["step"] - 51) <= 2
    assert abs(n["at_seconds"] - ends[50]) < 0.2
    assert abs(n["before_seconds"] - 0.02) < 0.002 and abs(n["after_seconds"] - 0.04) < 0.004
    assert n["p_value"] < 1e-6
    assert abs(f.at_stake.seconds - 50 * 0.02) < 0.1
    assert "step 5" in f.title


def test_the_evidence_writes_step_times_in_the_views_units(crafted):
    run = crafted()
    run.ticks(10)
    run.writer(10)
    # a warm-up step (skipped), 50 steps around 20 ms, then 50 around 60 ms from step 52 on
    run.steps(10, [0.02] + [0.019, 0.021] * 25 + [0.058, 0.062] * 25)
    f = run.finding("step_regression")
    assert f.evidence.numbers["step"] == 52
    # medians 0.02 s and 0.06 s, below a second: milliseconds with one decimal
    # (units.format_seconds, as the report and `show` write every short span)
    assert f.evidence.lines[0].startswith("step time rose from 20.0 ms to 60.0 ms (medians, 3.00x)")


def test_steady_steps_do_not_fire(crafted):
    rng = random.Random(2)
    run = crafted()
    run.ticks(10)
    run.writer(10)
    run.steps(10, _noisy(0.05, 100, rng, jitter=0.2))
    ids = run.ids()
    assert "step_regression" not in ids
    assert "outlier_steps" not in ids
    assert {"step_regression", "outlier_steps"} <= set(run.diagnose().checked)


def test_minimum_change_from_configuration_is_respected(crafted):
    rng = random.Random(3)
    run = crafted()
    run.ticks(10)
    run.writer(10)
    run.steps(10, _noisy(0.2, 50, rng) + _noisy(0.3, 50, rng))  # +50 %
    assert "step_regression" in run.ids()
    assert "step_regression" not in run.ids(regression_min_change=0.6)


def test_a_gradual_rise_is_drift(crafted):
    rng = random.Random(4)
    run = crafted()
    run.ticks(10)
    run.writer(10)
    run.steps(10, [0.02 * (1 + i / 100) * (1 + rng.uniform(-0.02, 0.02)) for i in range(200)])
    f = run.finding("step_regression")
    assert f.evidence.numbers["kind"] == "drift"
    assert 2.5 < f.evidence.numbers["ratio"] < 3.2


def test_a_speedup_is_not_a_regression(crafted):
    rng = random.Random(5)
    run = crafted()
    run.ticks(10)
    run.writer(10)
    run.steps(10, _noisy(0.04, 50, rng) + _noisy(0.02, 50, rng))
    assert "step_regression" not in run.ids()


def test_outlier_steps_are_counted_with_the_worst_listed(crafted):
    rng = random.Random(6)
    run = crafted()
    run.ticks(10)
    run.writer(10)
    durations = _noisy(0.05, 200, rng)
    for i in (40, 80, 120, 160):  # a checkpoint every 40 steps
        durations[i] = 1.0
    durations[120] = 2.0
    run.steps(10, durations)
    f = run.finding("outlier_steps")
    assert f.evidence.numbers["outliers"] == 4
    assert f.evidence.numbers["worst_step"] == 121  # 1-based
    assert abs(f.evidence.numbers["worst_seconds"] - 2.0) < 1e-9
    assert any("recur every 40 steps" in line for line in f.evidence.lines)
    assert "step 121" in f.evidence.lines[1]
    assert abs(f.at_stake.seconds - (0.95 * 3 + 1.95)) < 0.05
    assert "step_regression" not in run.ids()  # four spikes are not a lasting change


def test_outlier_ratio_from_configuration_is_respected(crafted):
    rng = random.Random(7)
    run = crafted()
    run.ticks(10)
    run.writer(10)
    durations = _noisy(0.5, 100, rng)
    durations[50] = 2.0
    run.steps(10, durations)
    assert "outlier_steps" in run.ids()
    assert "outlier_steps" not in run.ids(outlier_min_ratio=5.0)


def test_too_few_steps_is_not_applicable(crafted):
    run = crafted()
    run.ticks(5)
    run.writer(10)
    run.steps(10, [0.1] * 10)
    assert "fewer than 20" in run.diagnose().not_applicable["step_regression"]


def _checkpoint_stalls(run, rng: random.Random) -> None:
    """200 steps of ~50 ms with four 1-2 s stalls, over 20 ticks of 1 s."""
    run.ticks(20)
    run.writer(10)
    durations = _noisy(0.05, 200, rng)
    for i in (40, 80, 120, 160):
        durations[i] = 1.0
    run.steps(10, durations)


def test_stalls_while_other_processes_fill_the_machine_are_not_the_loops_to_win(crafted):
    """On 2 CPUs kept busy, the run's processes getting one of them and other processes the
    other: outlier steps are what sharing the machine costs, not work the loop can move off
    (asynchronous saves, gc.freeze). The saving is 0; its range still says what moving the
    stalls' work would give, were it the loop's own."""
    run = crafted(cores=2)
    _checkpoint_stalls(run, random.Random(8))
    for cpu in ("0", "1"):
        run.counter("host_cpu_seconds_total", lambda t: 1.0, cpu=cpu, mode="user")
        run.counter("host_cpu_seconds_total", lambda t: 0.0, cpu=cpu, mode="idle")
    run.counter("tree_cpu_seconds_total", lambda t: 1.0)
    f = run.finding("outlier_steps")
    assert f.saving.seconds == 0 and f.saving.low_seconds == 0
    assert f.saving.high_seconds > 3.5  # the four stalls' excess, were they the loop's own
    assert "other processes" in f.saving.assumes
    assert any("other processes kept 1.00 cores busy" in line for line in f.evidence.lines)
    assert f.severity == "low"


def test_stalls_on_a_machine_the_run_has_to_itself_are_the_loops_to_win(crafted):
    """The same stalls with the run's processes keeping both CPUs busy: its own work."""
    run = crafted(cores=2)
    _checkpoint_stalls(run, random.Random(8))
    for cpu in ("0", "1"):
        run.counter("host_cpu_seconds_total", lambda t: 1.0, cpu=cpu, mode="user")
    run.counter("tree_cpu_seconds_total", lambda t: 2.0)
    f = run.finding("outlier_steps")
    assert f.saving.seconds > 3.5
    assert not any("other processes" in line for line in f.evidence.lines)


def test_a_regression_when_another_job_fills_the_machine_is_not_the_jobs_to_win(crafted):
    """Steps twice as slow from the moment other processes take one of the 2 CPUs the run had
    to itself: another job arrived. Nothing in the job to change; the range keeps the loss."""
    rng = random.Random(9)
    run = crafted(cores=2)
    run.ticks(20)
    run.writer(10)
    ends = run.steps(10, _noisy(0.1, 60, rng) + _noisy(0.2, 50, rng))
    at = ends[60]

    def others(t: float) -> float:
        return 1.0 if t >= at else 0.0

    for cpu in ("0", "1"):
        run.counter("host_cpu_seconds_total", lambda t: 1.0, cpu=cpu, mode="user")
    run.counter("tree_cpu_seconds_total", lambda t: 2.0 - others(t))
    f = run.finding("step_regression")
    assert f.saving.seconds == 0 and f.saving.high_seconds > 3
    assert any("another job arrived" in line for line in f.evidence.lines)


def test_a_regression_on_a_machine_already_shared_is_the_jobs_own(crafted):
    """The same slowdown with other processes' use unchanged across it: the job's own."""
    rng = random.Random(9)
    run = crafted(cores=2)
    run.ticks(20)
    run.writer(10)
    run.steps(10, _noisy(0.1, 60, rng) + _noisy(0.2, 50, rng))
    for cpu in ("0", "1"):
        run.counter("host_cpu_seconds_total", lambda t: 1.0, cpu=cpu, mode="user")
    run.counter("tree_cpu_seconds_total", lambda t: 1.0)
    f = run.finding("step_regression")
    assert f.saving.seconds > 3


def _shared_regression(crafted, tree_before: float, tree_after: float, slower: float = 2.0):
    """110 steps, ``slower`` times as slow from step 61, on 2 CPUs kept busy throughout: the
    run's processes ``tree_before`` cores before the change, ``tree_after`` after, others the
    rest."""
    rng = random.Random(10)
    run = crafted(cores=2)
    run.ticks(20)
    run.writer(10)
    ends = run.steps(10, _noisy(0.1, 60, rng) + _noisy(0.1 * slower, 50, rng))
    for cpu in ("0", "1"):
        run.counter("host_cpu_seconds_total", lambda t: 1.0, cpu=cpu, mode="user")
    run.counter("tree_cpu_seconds_total", lambda t: tree_after if t >= ends[60] else tree_before)
    return run.finding("step_regression")


def test_a_machine_already_shared_that_fills_further_slows_the_steps_it_explains(crafted):
    """The run had 1.2 of the 2 CPUs, then 0.8 as others took 0.4 more: two thirds of the CPU,
    steps 1.5 times as slow. Nothing in the job to win."""
    f = _shared_regression(crafted, 1.2, 0.8, slower=1.5)
    assert f.saving.seconds == 0
    assert any("another job arrived" in line for line in f.evidence.lines)


def test_a_slowdown_with_the_cores_kept_is_the_jobs_own(crafted):
    """The run went from 1.2 to 1.1 cores (others 0.1 more) while its steps took twice as
    long: the machine's sharing barely moved. The job's own."""
    f = _shared_regression(crafted, 1.2, 1.1)
    assert f.saving.seconds > 3
    assert not any("another job arrived" in line for line in f.evidence.lines)
