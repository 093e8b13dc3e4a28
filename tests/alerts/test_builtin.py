"""The built-in pack: each rule fires on crafted samples and stays quiet on healthy ones."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

import pytest

from computewatch.accounting.flops import THRESHOLDS
from computewatch.alerts import FIRING, AlertEvent, Engine, RuleSet, builtin_rules
from computewatch.alerts.budget import NoPriceError, Pricing, pricing_from_config
from computewatch.alerts.sink import budget_rules
from computewatch.config import Config
from computewatch.metrics.model import MetricSample

GPU = {"gpu": "GPU-0000", "gpu_index": "0", "gpu_model": "NVIDIA H100 80GB HBM3", "node": "n1"}
JOB = {"job": "run-1", "user": "alice", "team": "nlp", "node": "n1"}


def s(name: str, value: float, labels: dict[str, str], **more: str) -> MetricSample:
    return MetricSample(name, tuple(sorted({**labels, **more}.items())), value)


def gpu(
    util: float, used: float = 10e9, allocated: float = 1, throttled: float = 0
) -> list[MetricSample]:
    return [
        s("computewatch_gpu_utilization_ratio", util, GPU),
        s("computewatch_gpu_memory_used_bytes", used, GPU),
        s("computewatch_gpu_memory_total_bytes", 80e9, GPU),
        s("computewatch_gpu_allocated", allocated, GPU),
        s("computewatch_gpu_throttled", throttled, GPU, reason="thermal"),
        s("computewatch_gpu_throttled", 0, GPU, reason="power"),
    ]


def run(
    make: Callable[[float], list[MetricSample]],
    seconds: float,
    rules: RuleSet | None = None,
    step: float = 10.0,
    pricing: Pricing | None = None,
) -> list[AlertEvent]:
    e = Engine(rules or builtin_rules(), pricing=pricing)
    out: list[AlertEvent] = []
    t = 0.0
    while t <= seconds:
        out.extend(e.evaluate(1_700_000_000 + t, make(t)))
        t += step
    return out


def fired(events: list[AlertEvent]) -> dict[str, AlertEvent]:
    return {e.rule: e for e in events if e.status == FIRING}


def test_gpu_allocated_but_idle_for_15_minutes() -> None:
    ev = fired(run(lambda t: gpu(0.01), 16 * 60))
    alert = ev["GpuAllocatedIdle"]
    assert alert.starts_at - alert.active_at == 900
    assert alert.labels["gpu"] == "GPU-0000" and alert.labels["gpu_index"] == "0"
    assert "idle (1% busy) for 15m" in alert.summary
    assert "GpuAllocatedIdle" not in fired(run(lambda t: gpu(0.01), 14 * 60))
    assert "GpuAllocatedIdle" not in fired(run(lambda t: gpu(0.0, allocated=0), 20 * 60))
    assert "GpuAllocatedIdle" not in fired(run(lambda t: gpu(0.9), 20 * 60))


def test_gpu_memory_above_95_percent() -> None:
    ev = fired(run(lambda t: gpu(0.9, used=79e9), 3 * 60))
    assert ev["GpuMemoryHigh"].summary == "GPU 0 on n1: memory 98.8% full"
    assert "GpuMemoryHigh" not in fired(run(lambda t: gpu(0.9, used=70e9), 10 * 60))


def test_thermal_throttling() -> None:
    ev = fired(run(lambda t: gpu(0.9, throttled=1), 3 * 60))
    assert ev["GpuThrottled"].labels["reason"] == "thermal"
    assert "thermal-throttled" in ev["GpuThrottled"].summary
    assert "GpuThrottled" not in fired(run(lambda t: gpu(0.9), 10 * 60))
    assert "GpuThrottled" not in fired(run(lambda t: gpu(0.9, throttled=1 if t < 60 else 0), 600))


def test_utilization_below_30_percent_for_10_minutes() -> None:
    ev = fired(run(lambda t: gpu(0.2), 11 * 60))
    assert "GpuLowUtilization" in ev and "GpuAllocatedIdle" not in ev
    assert "GpuLowUtilization" not in fired(run(lambda t: gpu(0.8), 30 * 60))
    dip = fired(run(lambda t: gpu(0.2 if (t // 300) % 2 else 0.8), 30 * 60))
    assert "GpuLowUtilization" not in dip  # 5-minute dips never last 10 minutes


def steps(step_time: Callable[[float], float]) -> Callable[[float], list[MetricSample]]:
    """A job doing one step per step_time(t) seconds, as its exported counters."""
    state = {"t": 0.0, "steps": 0.0, "time": 0.0}

    def make(t: float) -> list[MetricSample]:
        while state["t"] + step_time(state["t"]) <= t:
            d = step_time(state["t"])
            state["t"] += d
            state["time"] += d
            state["steps"] += 1
        return [
            s("computewatch_job_steps_total", state["steps"], JOB),
            s("computewatch_job_step_time_seconds_total", state["time"], JOB),
        ]

    return make


def test_step_time_regression_against_the_run_baseline() -> None:
    ev = fired(run(steps(lambda t: 1.0 if t < 1200 else 1.5), 2400))
    alert = ev["StepTimeRegression"]
    assert alert.labels["job"] == "run-1" and alert.labels["team"] == "nlp"
    assert 0.2 < alert.value <= 0.5
    assert "vs 1 s baseline" in alert.detail
    assert alert.starts_at - 1_700_000_000 > 1200 + 300  # after the regression lasted `for`


def test_no_step_time_regression_on_a_steady_or_faster_job() -> None:
    rng = random.Random(1)
    assert "StepTimeRegression" not in fired(run(steps(lambda t: rng.uniform(0.95, 1.05)), 3600))
    faster = steps(lambda t: 1.0 if t < 1200 else 0.7)
    assert "StepTimeRegression" not in fired(run(faster, 3600))
    # slow from the start: that is the baseline, not a regression
    assert "StepTimeRegression" not in fired(run(steps(lambda t: 2.0), 3600))


def disk(avail: float) -> list[MetricSample]:
    m = {"mountpoint": "/data", "node": "n1"}
    return [
        s("computewatch_filesystem_avail_bytes", avail, m),
        s("computewatch_filesystem_size_bytes", 100e9, m),
    ]


def test_disk_almost_full() -> None:
    ev = fired(run(lambda t: disk(2e9), 6 * 60))
    assert ev["DiskAlmostFull"].summary == "/data on n1: 2.0% free"
    assert "DiskAlmostFull" not in fired(run(lambda t: disk(50e9), 20 * 60))


@pytest.mark.parametrize(
    ("flop", "expected"),
    [(1e24, set()), (2e25, {"JobFlopsOver1e25"}), (3e26, {"JobFlopsOver1e25", "JobFlopsOver1e26"})],
)
def test_flop_thresholds(flop: float, expected: set[str]) -> None:
    ev = fired(run(lambda t: [s("computewatch_job_flops_total", flop, JOB, method="counted")], 0))
    assert {k for k in ev if k.startswith("JobFlops")} == expected
    for name in expected:
        assert ev[name].starts_at == ev[name].active_at  # no waiting: a threshold is crossed once


def test_flop_rules_follow_the_accounting_thresholds() -> None:
    rules = {r.name: r for r in builtin_rules().rules if r.name.startswith("JobFlops")}
    got = sorted(r.condition.threshold for r in rules.values() if r.condition)
    assert got == sorted(t for t, _ in THRESHOLDS)
    for _, name in THRESHOLDS:
        law = name.split(":")[0].split(" Art.")[0]
        assert any(law in r.message for r in rules.values()), law


def job_energy(joules_per_hour: float, gpus: int = 1) -> Callable[[float], list[MetricSample]]:
    def make(t: float) -> list[MetricSample]:
        return [
            s("computewatch_job_info", 1, JOB, kind="computewatch"),
            s("computewatch_job_energy_joules_total", joules_per_hour * t / 3600, JOB, method="x"),
            s("computewatch_job_gpu_seconds_total", gpus * t, JOB),
        ]

    return make


def test_energy_budget() -> None:
    rules = RuleSet(tuple(budget_rules(None, 0.5)))
    ev = fired(run(job_energy(3.6e6), 3600, rules, step=60))  # 1 kWh per hour
    alert = ev["JobEnergyBudgetExceeded"]
    assert alert.starts_at - 1_700_000_000 == 1800
    assert (
        "budget 0.5 kWh" in alert.detail and "computewatch_job_energy_joules_total" in alert.detail
    )
    assert "run-1: energy budget exceeded" in alert.summary
    assert not fired(run(job_energy(3.6e6), 1700, rules, step=60))


def test_cost_budget_says_how_the_figure_was_obtained() -> None:
    pricing = pricing_from_config(Config(usd_per_gpu_hour=2.0, usd_per_kwh=0.5, pue=1.2))
    rules = RuleSet(tuple(budget_rules(10.0, None)))
    # 4 GPUs: $8/h for GPU time plus 1 kWh/h x 1.2 x $0.5 = $0.6/h -> $10 after ~69.8 min
    ev = fired(run(job_energy(3.6e6, gpus=4), 2 * 3600, rules, step=60, pricing=pricing))
    alert = ev["JobCostBudgetExceeded"]
    assert 69 * 60 <= alert.starts_at - 1_700_000_000 <= 71 * 60
    assert "GPU-h x $2" in alert.detail and "x PUE 1.2 x $0.5/kWh" in alert.detail
    assert alert.value >= 10


def test_cost_from_an_instance_price_and_no_price(tmp_path: Path) -> None:
    p = pricing_from_config(Config(instance_type="aws:p5.48xlarge", discount=0.5))
    usd, how = p.cost(kwh=0, gpu_seconds=8 * 3600, elapsed_s=3600)  # whole instance for 1 h
    assert usd == pytest.approx(55.04 * 0.5)
    assert "aws:p5.48xlarge" in how and "less 50%" in how
    with pytest.raises(NoPriceError, match="needs a price"):
        pricing_from_config(Config(), dmi_root=str(tmp_path))
    with pytest.raises(NoPriceError, match="not in the price catalog"):
        pricing_from_config(Config(instance_type="aws:nope.large"))


def test_healthy_node_fires_nothing() -> None:
    def healthy(t: float) -> list[MetricSample]:
        return [
            *gpu(0.85, used=60e9),
            *disk(40e9),
            s("computewatch_job_flops_total", 1e20 * t, JOB, method="estimated"),
            *steps(lambda _: 1.0)(t),
        ]

    assert run(healthy, 3600) == []
