"""One shape for every accounted figure: a value with its unit, how it was obtained, what it
assumed, and a low-high range."""

from __future__ import annotations

from typing import TypedDict

import msgspec

MEASURED = "measured"  # a hardware or kernel counter read at the start and end
POLLED = "polled"  # instantaneous readings integrated over the samples
MODELED = "modeled"  # computed from a model and reference figures
ESTIMATED = "estimated"  # from assumed utilization (hardware-time FLOPs, forecasts)
COUNTED = "counted"  # counted by the program (FLOPs per step)


class Figure(TypedDict):
    """An accounted figure. ``value``, ``low`` and ``high`` are null when it is unknown (then
    ``assumptions`` say why); ``source`` names the reference data or counter behind it."""

    value: float | None
    unit: str
    method: str  # MEASURED, POLLED, MODELED, ESTIMATED or COUNTED
    low: float | None
    high: float | None
    assumptions: list[str]
    source: str | None


def figure(
    value: float | None,
    unit: str,
    method: str,
    *,
    low: float | None = None,
    high: float | None = None,
    assumptions: list[str] | None = None,
    source: str | None = None,
    digits: int = 6,
) -> Figure:
    """A figure; ``low``/``high`` default to the value itself (no stated uncertainty).
    Numbers keep ``digits`` significant digits (a 2-second run's energy is a few mWh)."""

    def r(v: float | None) -> float | None:
        return None if v is None else float(f"{v:.{digits}g}")

    return {
        "value": r(value),
        "unit": unit,
        "method": method,
        "low": r(low if low is not None else value),
        "high": r(high if high is not None else value),
        "assumptions": list(assumptions or []),
        "source": source,
    }


def relative_range(value: float, rel: float) -> tuple[float, float]:
    """``value`` ± ``rel`` (a fraction), never below zero."""
    return max(value * (1 - rel), 0.0), value * (1 + rel)


# --- what user code records: one type each for the spool, the observers and the store ----------


class StepRecord(msgspec.Struct, frozen=True):
    """A step closed in user code: its process, end time (monotonic), counts and FLOPs; what
    the spool carries, the sampler hands its observers, and the store keeps (the store's
    ``StepRow`` is this record with the wall-clock time the sampler gave it)."""

    pid: int
    mono: float
    samples: float | None
    tokens: float | None
    flops: float | None = None


class PhaseRecord(msgspec.Struct, frozen=True):
    """A named interval of one step (``data``, ``forward``, ``comm`` ...), as spooled and stored."""

    pid: int
    name: str
    start: float
    end: float
    accel_seconds: float | None = None


class RequestRecord(msgspec.Struct, frozen=True):
    """One served request (inference): its interval, tokens and outcome, as spooled and stored."""

    pid: int
    name: str
    start: float
    end: float
    tokens_in: float | None
    tokens_out: float | None
    ok: bool


Event = StepRecord | PhaseRecord | RequestRecord
