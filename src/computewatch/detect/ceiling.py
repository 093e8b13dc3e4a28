"""A job's hardware-bound compute ceiling: what its devices could have computed in the time the
telemetry covers, whatever the job was (Σ devices × the highest dense peak the catalog gives the
device × seconds). It bounds from above, so a large, long job is reviewed whatever the forest
says: a governance threshold (``[governance] detect_review_flop``) is compared with it."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence

from computewatch.catalog import PRECISIONS, Accelerator, find_by_nvml_name, load_accelerators

__all__ = ["REVIEW_FLOP_DEFAULT", "ComputeCeiling", "compute_ceiling"]

REVIEW_FLOP_DEFAULT = 1e23
"""The review threshold when the configuration sets none: 10^23 FLOP, the order of the
training-compute reporting thresholds in force (EU AI Act, Art. 51: 10^25 for systemic risk;
US Executive Order 14110 §4.2(b), 2023, since revoked: 10^26); a job that could reach a
hundredth of those is worth a look."""


@dataclasses.dataclass(frozen=True, slots=True)
class ComputeCeiling:
    """The ceiling in FLOP, the per-device peaks used (FLOP/s) and how it was obtained."""

    flop: float
    devices: int
    seconds: float
    peaks: tuple[float, ...]
    method: str
    assumptions: tuple[str, ...]


def _best(acc: Accelerator) -> tuple[str, float] | None:
    best: tuple[str, float] | None = None
    for p in PRECISIONS:
        v = acc.peak_tflops(p)
        if v and (best is None or v > best[1]):
            best = (p, v)
    return best


@functools.cache
def _largest() -> tuple[str, str, float]:
    best = ("none", "none", 0.0)
    for acc in load_accelerators().values():
        b = _best(acc)
        if b is not None and b[1] > best[2]:
            best = (acc.model, b[0], b[1])
    return best


def compute_ceiling(names: Sequence[str | None], seconds: float) -> ComputeCeiling:
    """The ceiling of ``len(names)`` devices (names as NVML reports them; ``None``: unknown)
    over ``seconds``. A device not in the catalog is counted at the catalog's largest peak,
    said so: an unknown name must not lower the bound."""
    peaks: list[float] = []
    notes: dict[str, str] = {}
    for name in names:
        acc = find_by_nvml_name(name) if name else None
        b = _best(acc) if acc is not None else None
        if acc is None or b is None:
            model, prec, tf = _largest()
            key = name or "(no name in the telemetry)"
            notes[key] = (
                f"{key} is not in the catalog (or has no peak there): counted at the catalog's "
                f"largest dense peak, {model} {prec} {tf:g} TFLOP/s"
            )
            peaks.append(tf * 1e12)
            continue
        prec, tf = b
        notes[acc.model] = (
            f"{acc.model}: {tf:g} TFLOP/s dense {prec}, its highest dense peak "
            f"({acc.source}, {acc.year})"
        )
        peaks.append(tf * 1e12)
    secs = max(float(seconds), 0.0)
    flop = sum(peaks) * secs
    method = (
        "hardware ceiling: Σ devices × highest dense peak in the catalog × seconds of telemetry "
        "(an upper bound: no job reaches its devices' peak)"
    )
    return ComputeCeiling(flop, len(peaks), secs, tuple(peaks), method, tuple(notes.values()))
