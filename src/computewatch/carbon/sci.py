"""The Software Carbon Intensity (SCI) of ISO/IEC 21031:2024, the Green Software Foundation's
specification: ``SCI = ((E x I) + M) per R``.

E is the energy the software used (kWh, at the facility: PUE included), I the location-based
grid intensity applied to it (gCO2e/kWh; hourly where known), M the embodied emissions of the
hardware's share for the run's duration (gCO2e), and R the functional unit (per run, per
training step, per 1M tokens, per 1k inferences). The score is gCO2e per R; its range comes
from the ranges of E x I and of M, divided by R.
"""

from __future__ import annotations

from typing import Literal, TypedDict

import msgspec

from computewatch.carbon.records import IntensityError

__all__ = [
    "SCI_SPEC",
    "SCI_UNITS",
    "SciInputs",
    "SciScore",
    "SciUnit",
    "UnitCount",
    "canonical_unit",
    "sci_score",
]

SciUnit = Literal["run", "step", "1M-tokens", "1k-inferences"]
SCI_UNITS: tuple[SciUnit, ...] = ("run", "step", "1M-tokens", "1k-inferences")
SCI_SPEC = "ISO/IEC 21031:2024 Software Carbon Intensity (Green Software Foundation SCI 1.0)"
_SCALE: dict[str, float] = {"run": 1.0, "step": 1.0, "1M-tokens": 1e6, "1k-inferences": 1e3}


class SciInputs(TypedDict):
    E_kwh: float  # energy at the facility
    I_g_per_kwh: float  # effective intensity: (E x I) / E
    I_method: str  # "hourly (provider, resolution)" or "yearly average (table)"
    M_g: float  # embodied share
    R: float  # functional units in the run
    R_unit: str  # "run" | "step" | "1M-tokens" | "1k-inferences"
    R_source: str  # what R was counted from


class SciScore(TypedDict):
    value: float | None  # gCO2e per R; None when R is unknown for this unit
    low: float | None
    high: float | None
    unit: str  # "gCO2e per step" ...
    inputs: SciInputs
    spec: str
    notes: list[str]


class UnitCount(msgspec.Struct, frozen=True):
    """How many functional units a run had, and from what; ``count`` None when unknown."""

    count: float | None
    source: str


def canonical_unit(text: str) -> SciUnit:
    """A functional unit named in any case (``1m-tokens``) as its canonical name; IntensityError
    for another name."""
    for u in SCI_UNITS:
        if u.lower() == text.strip().lower():
            return u
    raise IntensityError(f"unknown SCI unit {text!r}; expected one of {', '.join(SCI_UNITS)}")


def sci_score(
    *,
    energy_kwh: float,
    operational_g: float,
    operational_low: float,
    operational_high: float,
    embodied_g: float,
    embodied_low: float,
    embodied_high: float,
    unit: str,
    units: UnitCount,
    intensity_method: str,
) -> SciScore:
    """SCI from the run's operational emissions (E x I, with its range), embodied share M
    (with its range) and the number of functional units."""
    unit = canonical_unit(unit)
    notes: list[str] = []
    r: float | None = units.count
    if r is not None:
        r = r / _SCALE[unit]
    if r is not None and r <= 0:
        notes.append(f"no {unit} counted in this run ({units.source}): no score per {unit}")
        r = None
    elif r is None:
        notes.append(f"the run's count of {unit} is unknown ({units.source})")
    intensity = operational_g / energy_kwh if energy_kwh > 0 else 0.0
    total, low, high = (
        operational_g + embodied_g,
        operational_low + embodied_low,
        operational_high + embodied_high,
    )
    if embodied_g == 0:
        notes.append("M = 0: no embodied carbon was estimated for this run")
    inputs: SciInputs = {
        "E_kwh": energy_kwh,
        "I_g_per_kwh": intensity,
        "I_method": intensity_method,
        "M_g": embodied_g,
        "R": r if r is not None else 0.0,
        "R_unit": unit,
        "R_source": units.source,
    }
    return {
        "value": total / r if r else None,
        "low": low / r if r else None,
        "high": high / r if r else None,
        "unit": f"gCO2e per {unit}",
        "inputs": inputs,
        "spec": SCI_SPEC,
        "notes": notes,
    }
