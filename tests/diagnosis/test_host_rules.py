"""Host rules over crafted series: one saturated core, memory pressure and swapping, I/O."""

from __future__ import annotations

GIB = 2**30


def _host_cpu(run, busy, iowait=lambda cpu, t: 0.0, cpus: int = 4) -> None:
    """Per-core counters: ``busy(cpu, t)`` user time per second, the rest idle."""
    for c in range(cpus):
        run.counter("host_cpu_seconds_total", lambda t, c=c: busy(c, t), cpu=str(c), mode="user")
        run.counter(
            "host_cpu_seconds_total", lambda t, c=c: iowait(c, t), cpu=str(c), mode="iowait"
        )
        run.counter(
            "host_cpu_seconds_total",
            lambda t, c=c: max(1 - busy(c, t) - iowait(c, t), 0),
            cpu=str(c),
            mode="idle",
        )


def test_one_saturated_core_while_others_idle(crafted):
    run = crafted(cores=4)
    run.ticks(60)
    run.counter("tree_cpu_seconds_total", lambda t: 1.0)
    _host_cpu(run, lambda c, t: 1.0 if c == 2 else 0.03)
    f = run.finding("cpu_bound")
    assert f.evidence.numbers["busiest_cpu"] == "2"
    assert f.evidence.numbers["single_core_share"] > 0.9
    assert f.evidence.numbers["other_cores_busy_median"] < 0.1
    assert "DataLoader workers" in f.suggestion


def test_all_cores_busy_is_not_cpu_bound(crafted):
    run = crafted(cores=4)
    run.ticks(60)
    run.counter("tree_cpu_seconds_total", lambda t: 3.6)
    _host_cpu(run, lambda c, t: 0.9)
    assert "cpu_bound" not in run.ids()
    assert "cpu_bound" in run.diagnose().checked


def test_cpu_bound_share_from_configuration(crafted):
    run = crafted(cores=4)
    run.ticks(100)
    run.counter("tree_cpu_seconds_total", lambda t: 1.0 if t < 20 else 0.2)
    _host_cpu(run, lambda c, t: (1.0 if t < 20 else 0.2) if c == 0 else 0.02)
    assert "cpu_bound" not in run.ids()  # 20 % of the run, default 30 %
    f = run.finding("cpu_bound", cpu_bound_share=0.15)
    assert f.evidence.ranges[0].start <= 1 and 19 <= f.evidence.ranges[0].end <= 21


def test_one_allowed_core_is_not_applicable(crafted):
    run = crafted(cores=1)
    run.ticks(10)
    assert "one core" in run.diagnose().not_applicable["cpu_bound"]


def test_swapping_is_high_severity(crafted):
    run = crafted()
    run.ticks(60)
    run.series("host_memory_total_bytes", lambda t: 16 * GIB)
    run.series("host_memory_available_bytes", lambda t: 0.5 * GIB if t > 30 else 4 * GIB)
    run.series("host_swap_used_bytes", lambda t: 0 if t < 30 else (t - 30) * 0.1 * GIB)
    f = run.finding("host_memory_pressure")
    assert f.severity == "high" and "swapping" in f.title
    assert f.evidence.numbers["swap_growth_bytes"] > 2.5 * GIB
    assert f.evidence.numbers["memory_available_min_share"] < 0.05
    assert 28 <= f.at_stake.seconds <= 31


def test_enough_memory_does_not_fire(crafted):
    run = crafted()
    run.ticks(60)
    run.series("host_memory_total_bytes", lambda t: 16 * GIB)
    run.series("host_memory_available_bytes", lambda t: 8 * GIB)
    run.series("host_swap_used_bytes", lambda t: 1 * GIB)
    assert "host_memory_pressure" not in run.ids()
    assert "host_memory_pressure" in run.ids(memory_available_low=0.6)


def test_cgroup_limit_counts_as_pressure(crafted):
    run = crafted()
    run.ticks(60)
    run.series("host_memory_total_bytes", lambda t: 64 * GIB)
    run.series("host_memory_available_bytes", lambda t: 40 * GIB)
    run.series("cgroup_memory_max_bytes", lambda t: 8 * GIB)
    run.series("cgroup_memory_current_bytes", lambda t: 7.9 * GIB)
    f = run.finding("host_memory_pressure")
    assert "cgroup memory peak 7.9 GiB of its 8.0 GiB limit" in " ".join(f.evidence.lines)


def _io_run(crafted, slow_steps: bool):
    run = crafted(cores=4)
    run.ticks(60)
    waiting = lambda t: 30 <= t < 60  # noqa: E731
    _host_cpu(
        run,
        lambda c, t: 0.2 if c == 0 else 0.0,
        iowait=lambda c, t: 0.6 if waiting(t) and c == 0 else 0,
    )
    run.counter("host_disk_read_bytes_total", lambda t: 200e6 if waiting(t) else 1e6, device="sda")
    run.writer(10)
    fast, slow = [0.5] * 58, [1.0 if slow_steps else 0.5] * (29 if slow_steps else 58)
    run.steps(10, fast + slow)
    return run


def test_io_bound_when_steps_slow_down_with_iowait(crafted):
    run = _io_run(crafted, slow_steps=True)
    f = run.finding("io_bound")
    assert f.evidence.numbers["iowait_share_median"] > 0.7
    assert f.evidence.numbers["disk_read_bytes_per_second_median"] > 100e6
    assert f.evidence.numbers["step_slowdown"] > 1.5
    assert f.evidence.ranges[0].start >= 29
    assert "shards" in f.suggestion


def test_iowait_without_slower_steps_does_not_fire(crafted):
    run = _io_run(crafted, slow_steps=False)
    assert "io_bound" not in run.ids()
    assert "io_bound" in run.diagnose().checked


def test_cpu_bound_saving_counts_only_the_steps(crafted):
    """A run whose one core is saturated for its whole 60 s but whose steps take only its last
    20 s: the imports and the set-up before them are serial by nature, so the saving is Amdahl's
    over the steps (p 0.5 on 4 cores: 0.5 x 0.75 of them), not over the whole minute (it was
    22.5 s, more than the loop itself)."""
    run = crafted(cores=4)
    run.ticks(60)
    run.counter("tree_cpu_seconds_total", lambda t: 1.0)
    _host_cpu(run, lambda c, t: 1.0 if c == 2 else 0.03)
    run.writer(1)
    run.steps(1, [1.0] * 20, start=40)
    f = run.finding("cpu_bound")
    assert f.evidence.numbers["single_core_share"] > 0.9  # the symptom: the whole run
    assert 0.5 * 0.75 * 18 <= f.saving.seconds <= 0.5 * 0.75 * 20, f.saving
    assert "within the steps" in f.saving.assumes
