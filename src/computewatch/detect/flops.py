"""A hardware-based FLOP estimate for a job classified as training: GPU-time × the catalog's
dense peak × utilization, times the fraction of the peak a training job achieves while its
kernels run (30-40%), the same method and source as the run accounting's hardware estimate
(``computewatch.accounting.flops``), restated here because detection may not import the
accounting (sibling layers)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from computewatch.catalog import PRECISIONS, find_by_nvml_name

__all__ = ["FlopEstimate", "estimate_flops"]

UTILIZATION_LOW = 0.30
UTILIZATION_HIGH = 0.40
UTILIZATION_SOURCE = "Epoch AI, Estimating Training Compute of Deep Learning Models (2022)"
DEFAULT_PRECISIONS = ("bf16", "fp16", "fp32")


@dataclasses.dataclass(frozen=True, slots=True)
class FlopEstimate:
    """The estimate (``None`` when no GPU of the job is in the catalog), its range, and how."""

    flop: float | None
    low: float | None
    high: float | None
    method: str
    assumptions: list[str]


def estimate_flops(
    gpus: Sequence[tuple[str | None, float, float | None]], precision: str | None = None
) -> FlopEstimate:
    """``gpus``: per GPU, its name as nvidia-smi prints it, its seconds of telemetry and its mean
    utilization (0-1; ``None``: not known, taken as 1, said so)."""
    if precision is not None and precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; expected one of {PRECISIONS}")
    total = 0.0
    known = 0
    notes: list[str] = []
    for name, seconds, util in gpus:
        acc = find_by_nvml_name(name) if name else None
        if acc is None:
            notes.append(f"GPU {name or '(no name in the trace)'} is not in the catalog: left out")
            continue
        prec = precision
        if prec is None:
            prec = next((p for p in DEFAULT_PRECISIONS if acc.peak_tflops(p)), None)
        peak = acc.peak_tflops(prec) if prec else None
        if not peak:
            notes.append(f"{acc.model} has no {prec} peak in the catalog: left out")
            continue
        active = 1.0 if util is None or math.isnan(util) else util
        if util is None or math.isnan(util):
            notes.append(f"{acc.model}: utilization not in the trace, taken as 100%")
        total += seconds * active * peak * 1e12
        known += 1
        notes.append(
            f"{acc.model}: {peak:g} TFLOP/s dense {prec} ({acc.source}, {acc.year}) × "
            f"{seconds * active:.0f} s with kernels running ({active:.0%} of {seconds:.0f} s)"
        )
    method = (
        "hardware estimate: Σ GPU-seconds × utilization × dense peak (catalog) × "
        f"{UTILIZATION_LOW:.0%}-{UTILIZATION_HIGH:.0%} of the peak while active "
        f"({UTILIZATION_SOURCE}); central figure the midpoint"
    )
    if not known:
        return FlopEstimate(None, None, None, method, notes)
    mid = (UTILIZATION_LOW + UTILIZATION_HIGH) / 2
    return FlopEstimate(
        total * mid, total * UTILIZATION_LOW, total * UTILIZATION_HIGH, method, notes
    )
