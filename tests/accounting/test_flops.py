"""Hardware-time FLOPs estimate (Epoch AI's method), with hand-computed answers.

Peaks are the catalog's dense figures (data/accelerators.csv): H100-SXM bf16 989.4, fp8 1979,
fp64 34 TFLOP/s; T4 has no bf16 (fp16 65); A100-80GB has no fp8.
"""

from __future__ import annotations

from typing import Any

import pytest

from computewatch.accounting.flops import hardware_estimate, thresholds


def approx(x: float) -> Any:
    return pytest.approx(x, rel=1e-5)  # figure() keeps 6 significant digits


def h100(i: int, util: float | None = 0.5, **kw: Any) -> dict[str, Any]:
    return {
        "uuid": f"GPU-{i}",
        "index": i,
        "name": "NVIDIA H100 80GB HBM3",
        "model": "H100-SXM",
        "utilization_mean": util,
        "simulated": True,
        **kw,
    }


def test_two_h100_bf16() -> None:
    f = hardware_estimate([h100(0), h100(1)], 100.0)
    # each: 100 s x 0.5 active = 50 s x 989.4e12 FLOP/s = 4.947e16; two: 9.894e16 FLOP at peak
    peak_total = 2 * 100 * 0.5 * 989.4e12
    assert f["value"] == approx(peak_total * 0.35)  # 3.4629e16, midpoint of 30-40%
    assert f["low"] == approx(peak_total * 0.30)  # 2.9682e16
    assert f["high"] == approx(peak_total * 0.40)  # 3.9576e16
    assert (f["unit"], f["method"]) == ("FLOP", "estimated")
    assert f["devices"] == [
        {
            "uuid": f"GPU-{i}",
            "model": "H100-SXM",
            "precision": "bf16",
            "peak_flop_per_second": approx(989.4e12),
            "active_seconds": 50.0,
            "simulated": True,
        }
        for i in (0, 1)
    ]
    # 3.4629e16 / (1e15 x 86400) = 4.00799e-4 PF-days
    assert f["pf_days"] == approx(3.4629e16 / 8.64e19)
    assert "utilization of the peak while active 30%-40%" in " ".join(f["assumptions"])
    assert any("989.4 TFLOP/s dense bf16 peak" in a for a in f["assumptions"])


@pytest.mark.parametrize(("precision", "tflops"), [("fp8", 1979.0), ("fp64", 34.0)])
def test_declared_precision(precision: str, tflops: float) -> None:
    f = hardware_estimate([h100(0), h100(1)], 100.0, precision)
    # 2 x 100 s x 0.5 x peak x 0.35
    assert f["value"] == approx(2 * 100 * 0.5 * tflops * 1e12 * 0.35)
    assert {d["precision"] for d in f["devices"]} == {precision}


def test_default_precision_is_the_first_the_device_has() -> None:
    t4 = {"uuid": "GPU-t4", "name": "Tesla T4", "model": "T4", "utilization_mean": 1.0}
    f = hardware_estimate([t4], 10.0)
    # T4: no bf16 -> fp16 65 TFLOP/s; 10 s x 1.0 x 65e12 x 0.35 = 2.275e14
    assert f["devices"][0]["precision"] == "fp16"
    assert f["value"] == approx(2.275e14)


def test_unknown_utilization_counts_the_whole_time() -> None:
    f = hardware_estimate([h100(0, util=None)], 100.0)
    # 100 s x 1.0 x 989.4e12 x 0.35
    assert f["value"] == approx(100 * 989.4e12 * 0.35)
    assert f["devices"][0]["active_seconds"] == 100.0


def test_a_model_missing_from_the_catalog() -> None:
    odd = {"uuid": "GPU-x", "name": "Mystery Accelerator", "model": "Mystery-1"}
    f = hardware_estimate([odd], 100.0)
    assert f["value"] is None and f["low"] is None and f["high"] is None
    assert f["devices"] == []
    assert f["assumptions"] == ["Mystery Accelerator: not in the hardware catalog"]
    # with a known GPU beside it, the known one is counted and the other said
    f = hardware_estimate([h100(0), odd], 100.0)
    assert f["value"] == approx(100 * 0.5 * 989.4e12 * 0.35)
    assert "Mystery Accelerator: not in the hardware catalog" in f["assumptions"]
    nomodel = hardware_estimate([{"uuid": "GPU-y", "name": "Unnamed", "model": None}], 1.0)
    assert nomodel["value"] is None


def test_a_precision_the_device_lacks() -> None:
    a100 = {"uuid": "GPU-a", "name": "NVIDIA A100-SXM4-80GB", "model": "A100-80GB"}
    f = hardware_estimate([a100], 100.0, "fp8")
    assert f["value"] is None
    assert f["assumptions"] == ["NVIDIA A100-SXM4-80GB: no fp8 peak in the catalog"]


def test_no_gpu() -> None:
    f = hardware_estimate([], 100.0)
    assert f["value"] is None and f["devices"] == []
    assert f["assumptions"] == ["no accelerator used"]
    assert "pf_days" not in f and "thresholds" not in f


def test_unknown_precision_is_an_error() -> None:
    with pytest.raises(ValueError, match=r"unknown precision 'fp7'; expected one of fp64, fp32"):
        hardware_estimate([h100(0)], 100.0, "fp7")


def test_thresholds_are_flagged_from_the_high_figure() -> None:
    f = hardware_estimate([h100(0, util=1.0)], 1e11, "fp8")
    # 1e11 s x 1979e12 FLOP/s = 1.979e26 at peak; high (40%) 7.916e25, value (35%) 6.9265e25
    assert f["value"] == approx(6.9265e25)
    eu, ca = f["thresholds"]
    assert (eu["flop"], eu["crossed"], eu["fraction"]) == (1e25, True, approx(7.916))
    assert "EU AI Act" in eu["name"]
    assert (ca["flop"], ca["crossed"], ca["fraction"]) == (1e26, False, approx(0.7916))
    assert "SB 53" in ca["name"]
    # 6.9265e25 / 8.64e19 = 801,678.2 PF-days
    assert f["pf_days"] == approx(6.9265e25 / 8.64e19)
    small = hardware_estimate([h100(0)], 100.0)["thresholds"]
    assert [t["crossed"] for t in small] == [False, False]


def test_threshold_boundaries() -> None:
    at, below = thresholds(1e25), thresholds(9.99e24)
    assert [t["crossed"] for t in at] == [True, False]
    assert [t["crossed"] for t in below] == [False, False]
    assert at[0]["fraction"] == 1.0 and at[1]["fraction"] == approx(0.1)
