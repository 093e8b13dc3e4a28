"""GPU rules over crafted series: low utilization, low MFU, memory headroom, throttling and
idle allocation."""

from __future__ import annotations

import pytest

GIB = 2**30


def _gpu_run(crafted, util, n: int = 100, **gpu_fields):
    run = crafted()
    run.gpu(**gpu_fields)
    run.ticks(n)
    run.series("gpu_utilization_ratio", util, gpu=run.gpu_uuid)
    return run


def test_low_utilization_fires_with_its_longest_stretch(crafted):
    run = _gpu_run(crafted, lambda t: 0.9 if t < 30 else 0.1)
    f = run.finding("low_gpu_utilization")
    assert f.evidence.numbers["gpu0_utilization_mean"] < 0.5
    (r,) = f.evidence.ranges
    assert 29 <= r.start <= 31 and r.end >= 99
    assert "torch.compile" in f.suggestion and "fused=True" in f.suggestion
    assert "bf16" in f.suggestion and "larger batch" in f.suggestion


def test_busy_gpu_does_not_fire_and_threshold_is_configurable(crafted):
    run = _gpu_run(crafted, lambda t: 0.8)
    assert "low_gpu_utilization" not in run.ids()
    assert "low_gpu_utilization" in run.ids(gpu_utilization_low=0.9)


def test_no_gpu_is_not_applicable(crafted):
    run = crafted()
    run.ticks(10)
    d = run.diagnose()
    for rule in ("low_gpu_utilization", "gpu_memory_headroom", "gpu_throttling", "idle_allocation"):
        assert d.not_applicable[rule] == "the run used no GPU"


def test_low_mfu_from_the_summary(crafted):
    run = crafted()
    run.ticks(100)
    run.extra["flops"] = {"value": 1e18, "mfu": {"value": 0.1}, "peak_flops": 989e12}
    f = run.finding("low_mfu")
    assert f.evidence.numbers["mfu"] == 0.1
    assert abs(f.at_stake.seconds - 100 * (1 - 0.1 / 0.5)) < 1e-6
    run.extra["flops"] = {"value": 1e18, "mfu": 0.45}  # a bare number is read as well
    assert "low_mfu" not in run.ids()
    assert "low_mfu" in run.ids(mfu_low=0.5)
    run.extra["flops"] = {"value": 1e18}
    assert "no MFU" in run.diagnose().not_applicable["low_mfu"]


def test_memory_headroom(crafted):
    run = _gpu_run(crafted, lambda t: 0.9)
    run.series("gpu_memory_total_bytes", lambda t: 80 * GIB, gpu=run.gpu_uuid)
    run.series("gpu_memory_used_bytes", lambda t: 12 * GIB, gpu=run.gpu_uuid)
    run.series("gpu_process_memory_used_bytes", lambda t: 10 * GIB, gpu=run.gpu_uuid, pid="10")
    f = run.finding("gpu_memory_headroom")
    assert f.severity == "low" and f.at_stake.seconds is None
    assert "10.0 GiB of 80.0 GiB" in f.evidence.lines[0]
    assert "batch" in f.suggestion
    assert "gpu_memory_headroom" not in run.ids(gpu_memory_used_low=0.1)


def test_full_memory_has_no_headroom(crafted):
    run = _gpu_run(crafted, lambda t: 0.9)
    run.series("gpu_memory_total_bytes", lambda t: 80 * GIB, gpu=run.gpu_uuid)
    run.series("gpu_process_memory_used_bytes", lambda t: 70 * GIB, gpu=run.gpu_uuid, pid="10")
    assert "gpu_memory_headroom" not in run.ids()


THERMAL = 0x20  # sw_thermal_slowdown
POWER = 0x04  # sw_power_cap
IDLE = 0x01  # gpu_idle: not throttling


def test_thermal_throttling_with_clock_drop(crafted):
    run = _gpu_run(crafted, lambda t: 0.9)
    run.series(
        "gpu_clock_event_reasons", lambda t: THERMAL if 40 <= t < 80 else 0, gpu=run.gpu_uuid
    )
    run.series("gpu_sm_clock_hertz", lambda t: 1.4e9 if 40 <= t < 80 else 1.98e9, gpu=run.gpu_uuid)
    run.series("gpu_temperature_celsius", lambda t: 91 if 40 <= t < 80 else 70, gpu=run.gpu_uuid)
    f = run.finding("gpu_throttling")
    assert "thermal" in f.title
    assert 39 <= f.evidence.numbers["gpu0_throttled_seconds"] <= 41
    drop = f.evidence.numbers["gpu0_clock_drop"]
    assert abs(drop - (1 - 1.4 / 1.98)) < 0.02
    # The fix (clocks restored) wins the throttled time scaled by the clock's drop; the symptom
    # is the throttled time itself.
    assert abs(f.saving.seconds - 40 * drop) < 2
    assert 39 <= f.at_stake.seconds <= 41
    assert f.saving.low_seconds == pytest.approx(f.saving.seconds / 2)
    assert any("91 °C" in line for line in f.evidence.lines)
    # 40 ticks of 1 s throttled (40 s to 79 s) of the 100 s run; three significant digits
    assert "throttled 40 s (40% of the run): sw_thermal_slowdown 40 s" in f.evidence.lines[0]
    assert "cooling" in f.suggestion
    assert f.evidence.ranges[0].start >= 39


def test_idle_and_short_throttling_do_not_fire(crafted):
    run = _gpu_run(crafted, lambda t: 0.9)
    run.series(
        "gpu_clock_event_reasons", lambda t: POWER if t < 5 else IDLE, gpu=run.gpu_uuid
    )  # 4 % of the run power-capped, the rest idle reasons only
    assert "gpu_throttling" not in run.ids()
    assert "gpu_throttling" in run.ids(throttle_share=0.03, min_seconds_at_stake=0)


def _idle_run(crafted, idle_from: float, idle_to: float, n: int = 900):
    run = _gpu_run(crafted, lambda t: 0.0 if idle_from <= t < idle_to else 0.85, n=n)
    run.series("gpu_process_memory_used_bytes", lambda t: 30 * GIB, gpu=run.gpu_uuid, pid="10")
    return run


def test_idle_allocation_burns_money(crafted):
    run = _idle_run(crafted, 300, 700)  # 400 s held with nothing running
    run.extra["cost"] = {"compute": {"value": 0.9}, "total": {"value": 1.0}}  # over 900 s
    f = run.finding("idle_allocation")
    idle = f.evidence.numbers["gpu0_idle_seconds"]
    assert 398 <= idle <= 402
    # The stretch's ends lie inside the partly busy ticks around it: up to one tick (1 s) more.
    assert abs(f.at_stake.usd - (idle + 1) * 0.9 / 900) < 1e-6
    assert f.saving.low_seconds < idle < f.saving.seconds == pytest.approx(idle + 0.5)
    assert f.saving.high_seconds == pytest.approx(idle + 1)
    assert abs(f.evidence.numbers["gpu_hours_idle"] - idle / 3600) < 1e-9
    assert "$0.40 at the run's price" in f.evidence.lines[0]
    # durations as every view writes them (units.format_seconds: H:MM:SS from 100 s): the
    # 400 ticks from 300 s to 699 s idle, at least the default 300 s; 30 GiB held throughout
    assert (
        "idle for 0:06:40 in 1 stretch(es) of at least 0:05:00, holding up to 30.0 GiB"
        in f.evidence.lines[1]
    )
    assert f.severity == "high"
    assert run.diagnose().findings[0].id == "idle_allocation"  # the most money at stake


def test_short_idle_stretches_need_a_lower_threshold(crafted):
    run = _idle_run(crafted, 300, 500)  # 200 s
    assert "idle_allocation" not in run.ids()
    f = run.finding("idle_allocation", idle_min_seconds=120)
    assert f.at_stake.usd is None  # no price known
    assert "(no price known)" in f.evidence.lines[0]


def test_idle_gpu_without_the_runs_memory_is_not_held(crafted):
    run = _gpu_run(crafted, lambda t: 0.0, n=900)
    run.series("gpu_process_memory_used_bytes", lambda t: 0.0, gpu=run.gpu_uuid, pid="10")
    assert "idle_allocation" not in run.ids()
