"""Counted FLOPs, MFU and HFU of a run from its steps, with hand-computed answers.

Steps are StepRow(pid, mono, samples, tokens, flops, wall=wall); writers map a pid to
(monotonic start, metadata with ``settings``). H100-SXM dense bf16 peak: 989.4 TFLOP/s.
"""

from __future__ import annotations

from typing import Any

import pytest

from computewatch.accounting.flops import counted_flops, hardware_estimate
from computewatch.store import StepRow
from computewatch.views.summary_rows import flops_text

H100 = 989.4e12


def steps(pid: int, times: list[float], flops: float | None) -> list[StepRow]:
    return [StepRow(pid, t, None, None, flops, wall=1000.0 + t) for t in times]


def writer(start: float, **settings: float) -> tuple[float, dict[str, Any]]:
    return start, {"pid": 1, "settings": settings}


def h100(i: int) -> dict[str, Any]:
    return {"uuid": f"GPU-{i}", "index": i, "name": "NVIDIA H100 80GB HBM3",
            "model": "H100-SXM", "utilization_mean": 1.0, "scope": "used by the run"}  # fmt: skip


def test_one_process_with_a_declared_peak() -> None:
    # 11 steps of 2e12 FLOP at t = 10, 11, ..., 20 s; started at t = 5 (setup before the loop)
    rows = steps(7, [10.0 + i for i in range(11)], 2e12)
    f = counted_flops(rows, {7: writer(5.0, peak_flops=1e13)}, [], hardware_estimate([], 20.0))
    assert (f["value"], f["unit"], f["method"]) == (22e12, "FLOP", "counted")
    assert f["steps_with_flops"] == 11
    # window: first to last step, 10 s, holding 10 steps' 2e13 FLOP -> 2e12 FLOP/s
    assert f["step_time_seconds"] == 10.0
    assert f["flops_per_second"]["value"] == pytest.approx(2e12)
    # MFU = 2e13 / (10 s x 1e13 FLOP/s) = 0.2
    assert f["mfu"]["value"] == pytest.approx(0.2)
    assert (f["peak_flops"], f["precision"]) == (1e13, None)
    assert "hfu" not in f
    assert f["pf_days"] == pytest.approx(22e12 / 8.64e19)
    assert [t["crossed"] for t in f["thresholds"]] == [False, False]
    assert f["hardware_estimate"]["method"] == "estimated"


def test_recomputation_gives_hfu() -> None:
    rows = steps(7, [0.0, 1.0, 2.0], 3e12)
    w = {7: writer(-1.0, peak_flops=1e13, recompute_factor=4 / 3)}
    f = counted_flops(rows, w, [], hardware_estimate([], 3.0))
    # MFU = 6e12 / (2 s x 1e13) = 0.3; HFU = 0.3 x 4/3 = 0.4
    assert f["mfu"]["value"] == pytest.approx(0.3)
    assert f["hfu"]["value"] == pytest.approx(0.4)
    assert "recompute factor 1.33333" in f["hfu"]["assumptions"][0]


def test_two_ranks_on_two_catalog_gpus() -> None:
    # two ranks run at once: rank A steps at 0..10 s, rank B at 0.5..10.5 s, 1e15 FLOP a step
    a = steps(1, [float(i) for i in range(11)], 1e15)
    b = steps(2, [0.5 + i for i in range(11)], 1e15)
    f = counted_flops(a + b, {1: writer(-2.0), 2: writer(-2.0)}, [h100(0), h100(1)],
                      hardware_estimate([h100(0), h100(1)], 12.0))  # fmt: skip
    assert f["value"] == 22e15
    # union of the windows [0, 10] and [0.5, 10.5] = 10.5 s; 20 steps' 2e16 FLOP in them
    assert f["step_time_seconds"] == 10.5
    assert f["flops_per_second"]["value"] == pytest.approx(2e16 / 10.5)
    # MFU = 2e16 / (10.5 s x 2 x 989.4e12) = 0.962...
    assert f["mfu"]["value"] == pytest.approx(2e16 / (10.5 * 2 * H100), rel=1e-3)
    assert f["peak_flops"] == pytest.approx(2 * H100)
    assert f["precision"] == "bf16"
    assert any("989.4 TFLOP/s dense bf16" in a for a in f["mfu"]["assumptions"])


def test_a_declared_precision_changes_the_peak() -> None:
    rows = steps(1, [0.0, 1.0], 1e14)
    f = counted_flops(rows, {1: writer(-1.0)}, [h100(0)], hardware_estimate([], 1.0), "fp8")
    # fp8 dense 1979 TFLOP/s: MFU = 1e14 / (1 s x 1979e12)
    assert f["mfu"]["value"] == pytest.approx(1e14 / 1979e12, rel=1e-3)
    assert f["precision"] == "fp8"


def test_a_cpu_run_without_a_peak_has_no_mfu() -> None:
    rows = steps(1, [0.0, 1.0, 2.0], 1e9)
    f = counted_flops(rows, {1: writer(-1.0)}, [], hardware_estimate([], 3.0))
    assert f["value"] == 3e9 and f["method"] == "counted"
    assert f["flops_per_second"]["value"] == pytest.approx(1e9)
    assert f["mfu"]["value"] is None
    assert "no MFU" in f["mfu"]["assumptions"][0]
    assert "peak_flops=" in f["mfu"]["assumptions"][0]
    assert f["peak_flops"] is None
    text = flops_text(f)
    assert "3e+09 FLOP counted" in text and "no MFU" in text


def test_a_gpu_missing_from_the_catalog_gives_no_mfu() -> None:
    odd = {"uuid": "GPU-x", "name": "Mystery", "model": "Mystery-1", "scope": "used by the run"}
    f = counted_flops(steps(1, [0.0, 1.0], 1e9), {1: writer(-1.0)}, [odd],
                      hardware_estimate([odd], 1.0))  # fmt: skip
    assert f["mfu"]["value"] is None
    assert "Mystery: not in the hardware catalog" in f["mfu"]["assumptions"][0]


def test_one_step_is_timed_from_the_start_and_partial_flops_are_said() -> None:
    rows = steps(1, [4.0], 8e12)
    f = counted_flops(rows, {1: writer(2.0, peak_flops=1e13)}, [], hardware_estimate([], 4.0))
    # one step from start 2 s to 4 s: MFU = 8e12 / (2 s x 1e13) = 0.4
    assert f["mfu"]["value"] == pytest.approx(0.4)
    # steps without FLOPs count nothing but are said
    mixed = [*steps(1, [1.0], None), *steps(1, [2.0, 3.0], 5.0)]
    g = counted_flops(mixed, {1: writer(0.0)}, [], hardware_estimate([], 3.0))
    assert g["value"] == 10.0 and g["steps_with_flops"] == 2
    assert "for 2 of 3 steps" in g["assumptions"][0]
    # no step window at all: no start known and a single step
    h = counted_flops(steps(1, [4.0], 1.0), {}, [], hardware_estimate([], 4.0))
    assert h["mfu"]["value"] is None and h["flops_per_second"]["value"] is None
    assert h["step_time_seconds"] is None


def test_thresholds_on_counted_flops_and_the_text_line() -> None:
    # 2 steps of 1.5e24 -> 3e24 FLOP: 30% of the EU AI Act's 1e25 (approached), 3% of SB 53's
    rows = steps(1, [0.0, 100.0], 1.5e24)
    f = counted_flops(rows, {1: writer(-1.0, peak_flops=2e22)}, [], hardware_estimate([], 1.0))
    eu, ca = f["thresholds"]
    assert (eu["crossed"], eu["approached"], eu["fraction"]) == (False, True, pytest.approx(0.3))
    assert (ca["crossed"], ca["approached"]) == (False, False)
    text = flops_text(f)
    # 1.5e24 / (100 s x 2e22) = 0.75
    assert "MFU 75.0% of 2e+22 FLOP/s peak" in text
    assert "30% of 1e+25 FLOP (EU AI Act" in text
    assert "SB 53" not in text
    big = counted_flops(steps(1, [0.0, 1.0], 2e25), {1: writer(-1.0)}, [],
                        hardware_estimate([], 1.0))  # fmt: skip
    assert [t["crossed"] for t in big["thresholds"]] == [True, False]
    assert "crosses 1e+25 FLOP" in flops_text(big)


def test_the_estimate_alone_still_prints_as_before() -> None:
    est = hardware_estimate([h100(0)], 100.0)
    text = flops_text(est)
    assert text.startswith("3.46e+16 FLOP (2.97e+16 FLOP–3.96e+16 FLOP) estimated")
    assert "MFU" not in text
