"""The numbers the pages show, from what the server holds: a run's efficiency (energy and cost
per step, per 1,000 samples, per million tokens), its idle-while-held flag, and text cells
formatted by :mod:`computewatch.units` ("n/a" where unknown)."""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from computewatch.serverdb.queries import RunRow
from computewatch.units import (
    MISSING,
    format_count,
    format_duration,
    format_kwh,
    format_number,
    format_percent,
    format_significant,
    format_usd,
)

__all__ = [
    "IDLE_UTILIZATION",
    "Efficiency",
    "counts_of",
    "cpu_hours_text",
    "day",
    "efficiency",
    "gpu_hours_text",
    "gpus_text",
    "idle_reason",
    "iso_minute",
    "iso_utc",
    "run_label",
]

IDLE_UTILIZATION: Final = 0.05
"""A run holding GPUs whose utilization is below this is flagged "idle while held"."""


def _pos(v: object) -> float | None:
    """A positive finite number, else None."""
    if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and v > 0:
        return float(v)
    return None


def counts_of(summary: Mapping[str, Any] | None) -> tuple[float | None, float | None, float | None]:
    """(steps, samples, tokens) the run's summary reports (None: not reported)."""
    steps = summary.get("steps") if summary else None
    if not isinstance(steps, dict):
        return None, None, None
    return _pos(steps.get("count")), _pos(steps.get("samples_total")), _pos(
        steps.get("tokens_total")
    )  # fmt: skip


@dataclass(frozen=True, slots=True)
class Efficiency:
    """A run's totals and per-unit figures; None where the total or the count is unknown."""

    steps: float | None
    samples: float | None
    tokens: float | None
    kwh: float | None
    usd: float | None

    def per(self, total: float | None, count: float | None, unit: float) -> float | None:
        if total is None or count is None:
            return None
        return total / count * unit

    def cells(self) -> list[str]:
        """steps, samples, tokens, energy, cost, then energy and cost per step, per 1k samples
        and per 1M tokens, as text."""
        out = [
            format_count(self.steps),
            format_count(self.samples),
            format_count(self.tokens),
            format_kwh(self.kwh),
            format_usd(self.usd),
        ]
        for count, unit in ((self.steps, 1.0), (self.samples, 1e3), (self.tokens, 1e6)):
            out.append(format_kwh(self.per(self.kwh, count, unit)))
            out.append(format_usd(self.per(self.usd, count, unit)))
        return out


def efficiency(run: RunRow, summary: Mapping[str, Any] | None) -> Efficiency:
    steps, samples, tokens = counts_of(summary)
    kwh = run.kwh if run.kwh is not None and math.isfinite(run.kwh) else None
    usd = run.cost_usd if run.cost_usd is not None and math.isfinite(run.cost_usd) else None
    return Efficiency(steps, samples, tokens, kwh, usd)


def idle_reason(gpu_count: int, utilization: float | None) -> str:
    """Why the run is flagged idle while holding GPUs, or "" when it is not."""
    if gpu_count <= 0 or utilization is None or utilization >= IDLE_UTILIZATION:
        return ""
    return (
        f"holds {gpu_count} GPU(s) at {format_percent(utilization)} utilization "
        f"(under {format_percent(IDLE_UTILIZATION, 0)})"
    )


def run_label(run: RunRow) -> str:
    return run.name or run.id


def gpus_text(run: RunRow) -> str:
    if run.gpu_count <= 0:
        return "none"
    return f"{run.gpu_count} x {run.gpu_model}" if run.gpu_model else str(run.gpu_count)


def iso_minute(t: float | None) -> str:
    if t is None:
        return MISSING
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%d %H:%M")


def iso_utc(t: float) -> str:
    """``t`` as ISO 8601 in UTC to the second: ``2024-05-01T12:34:56Z``."""
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def day(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%d")


def gpu_hours_text(v: float | None) -> str:
    if v is None:
        return MISSING
    return f"{v:.3g} GPU-h" if abs(v) < 10 else f"{format_number(v, 1)} GPU-h"


def cpu_hours_text(v: float | None) -> str:
    """CPU-hours to three significant digits, so that a short run's are not ``0.00``."""
    if v is None:
        return MISSING
    return f"{format_significant(v, 3)} CPU-h"


def duration_text(v: float | None) -> str:
    return format_duration(v)
