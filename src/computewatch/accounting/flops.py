"""FLOPs of a run: counted when the program reports them, otherwise estimated from hardware
time (Epoch AI's method: time × devices × peak FLOP/s × utilization).

One FLOP is one floating-point operation; a fused multiply-add counts as two (several popular
counters report MACs, half as many). Peaks are the catalog's dense figures.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from computewatch.accounting.figures import ESTIMATED, figure
from computewatch.catalog import PRECISIONS, load_accelerators

# Epoch AI, "Estimating training compute": observed utilization is typically 30% (large language
# models) to 40% (other models) of the peak. Applied to the time a kernel was running.
UTILIZATION_LOW = 0.30
UTILIZATION_HIGH = 0.40
UTILIZATION_SOURCE = "Epoch AI, Estimating Training Compute of Deep Learning Models (2022)"
DEFAULT_PRECISIONS = ("bf16", "fp16", "fp32")  # the first one the device has, when not declared

# Regulatory thresholds in FLOP of cumulative training compute.
THRESHOLDS: tuple[tuple[float, str], ...] = (
    (1e25, "EU AI Act Art. 51(2): presumption of systemic risk"),
    (1e26, "California SB 53: frontier model"),
)


def hardware_estimate(
    gpus: Sequence[dict[str, Any]], duration_seconds: float, precision: str | None = None
) -> dict[str, Any]:
    """The hardware-time FLOPs estimate of a run from its summary's ``gpus`` and duration."""
    if precision is not None and precision not in PRECISIONS:
        raise ValueError(
            f"unknown precision {precision!r}; expected one of {', '.join(PRECISIONS)}"
        )
    catalog = load_accelerators()
    total = 0.0
    devices = []
    assumptions: list[str] = []
    missing: list[str] = []
    for g in gpus:
        acc = catalog.get(str(g.get("model"))) if g.get("model") else None
        if acc is None:
            missing.append(f"{g.get('name')}: not in the hardware catalog")
            continue
        prec = precision or next(
            (p for p in DEFAULT_PRECISIONS if acc.peak_tflops(p) is not None), None
        )
        peak = acc.peak_tflops(prec) if prec else None
        if prec is None or peak is None:
            missing.append(
                f"{g.get('name')}: no {precision or 'bf16/fp16/fp32'} peak in the catalog"
            )
            continue
        active = g.get("utilization_mean")
        active = 1.0 if active is None else float(active)
        device_seconds = duration_seconds * active
        flop = device_seconds * peak * 1e12
        total += flop
        devices.append(
            {
                "uuid": g.get("uuid"),
                "model": acc.model,
                "precision": prec,
                "peak_flop_per_second": peak * 1e12,
                "active_seconds": round(device_seconds, 3),
                "simulated": bool(g.get("simulated")),
            }
        )
        assumptions.append(
            f"{acc.model}: {peak:g} TFLOP/s dense {prec} peak ({acc.source}, {acc.year}) × "
            f"{device_seconds:.0f} s with kernels running "
            f"({active:.0%} of {duration_seconds:.0f} s)"
        )
    if not devices:
        out = figure(None, "FLOP", ESTIMATED, assumptions=missing or ["no accelerator used"])
        out["devices"] = []
        return out
    assumptions.append(
        f"utilization of the peak while active {UTILIZATION_LOW:.0%}-{UTILIZATION_HIGH:.0%} "
        f"({UTILIZATION_SOURCE}); central figure the midpoint"
    )
    assumptions.extend(missing)
    mid = (UTILIZATION_LOW + UTILIZATION_HIGH) / 2
    out = figure(
        total * mid,
        "FLOP",
        ESTIMATED,
        low=total * UTILIZATION_LOW,
        high=total * UTILIZATION_HIGH,
        assumptions=assumptions,
        source=UTILIZATION_SOURCE,
        digits=6,
    )
    out["devices"] = devices
    out["pf_days"] = round(total * mid / (1e15 * 86400), 9)
    out["thresholds"] = thresholds(total * UTILIZATION_HIGH)
    return out


def thresholds(flop: float) -> list[dict[str, Any]]:
    """The regulatory thresholds with how far ``flop`` is from each (crossed, or the ratio)."""
    return [
        {"flop": t, "name": name, "crossed": flop >= t, "fraction": flop / t}
        for t, name in THRESHOLDS
    ]
