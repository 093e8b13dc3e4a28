"""A run's carbon as the sum over its hours: energy in each interval x that interval's intensity.

The run's energy comes as intervals ``(start, end, kWh)`` (from its power profile, or spread
evenly over its duration); each is split where the intensity series changes value, and every
piece is charged the intensity in force. Energy that falls where the series has no value is
charged ``fallback_g_per_kwh`` (the yearly figure) and counted apart, so the method can say how
much of the run the hourly data covered.
"""

from __future__ import annotations

import bisect
import dataclasses
import datetime as dt
from collections.abc import Sequence

from computewatch.carbon.records import IntensitySeries

__all__ = ["EnergyInterval", "HourRow", "TimedCarbon", "timed_carbon"]


@dataclasses.dataclass(frozen=True, slots=True)
class EnergyInterval:
    start: float  # Unix seconds
    end: float
    kwh: float


@dataclasses.dataclass(frozen=True, slots=True)
class HourRow:
    """One clock hour of the run: its energy, mean intensity and emissions."""

    hour: dt.datetime  # the hour's start, UTC
    kwh: float
    g: float

    @property
    def g_per_kwh(self) -> float:
        return self.g / self.kwh if self.kwh > 0 else 0.0


@dataclasses.dataclass(frozen=True, slots=True)
class TimedCarbon:
    grams: float
    kwh: float
    kwh_covered: float  # energy that fell where the series has a value
    fallback_g_per_kwh: float
    hours: tuple[HourRow, ...]
    provider: str
    resolution_s: int | None

    @property
    def covered_ratio(self) -> float:
        return self.kwh_covered / self.kwh if self.kwh > 0 else 0.0

    @property
    def effective_g_per_kwh(self) -> float:
        return self.grams / self.kwh if self.kwh > 0 else self.fallback_g_per_kwh


def timed_carbon(
    intervals: Sequence[EnergyInterval], series: IntensitySeries, fallback_g_per_kwh: float
) -> TimedCarbon:
    """Sum of energy x intensity over the run's intervals (see the module's docstring)."""
    pts = series.points
    starts = [p.time.timestamp() for p in pts]
    bounds: list[tuple[float, float, float]] = [
        (s, s + p.resolution_s, p.g_per_kwh) for s, p in zip(starts, pts, strict=True)
    ]
    grams = kwh_all = kwh_cov = 0.0
    by_hour: dict[int, list[float]] = {}

    def charge(a: float, b: float, kwh: float, g_per_kwh: float) -> None:
        # split across clock hours for the per-hour table
        t = a
        while t < b:
            h = int(t // 3600)
            nxt = min(b, (h + 1) * 3600.0)
            part = kwh * (nxt - t) / (b - a)
            row = by_hour.setdefault(h, [0.0, 0.0])
            row[0] += part
            row[1] += part * g_per_kwh
            t = nxt

    for iv in intervals:
        if iv.kwh <= 0:
            continue
        if iv.end <= iv.start:  # an instant with energy: charge it at the intensity in force
            i = bisect.bisect_right(starts, iv.start) - 1
            hit = i >= 0 and iv.start < bounds[i][1]
            grams += iv.kwh * (bounds[i][2] if hit else fallback_g_per_kwh)
            kwh_all += iv.kwh
            kwh_cov += iv.kwh if hit else 0.0
            continue
        span = iv.end - iv.start
        t = iv.start
        i = max(bisect.bisect_right(starts, t) - 1, 0)
        while t < iv.end:
            while i < len(bounds) and bounds[i][1] <= t:
                i += 1
            if i < len(bounds) and bounds[i][0] <= t:
                nxt, g, covered = min(iv.end, bounds[i][1]), bounds[i][2], True
            else:
                nxt = min(iv.end, bounds[i][0]) if i < len(bounds) else iv.end
                g, covered = fallback_g_per_kwh, False
            part = iv.kwh * (nxt - t) / span
            grams += part * g
            kwh_all += part
            if covered:
                kwh_cov += part
            charge(t, nxt, part, g)
            t = nxt
    hours = tuple(
        HourRow(dt.datetime.fromtimestamp(h * 3600, dt.UTC), v[0], v[1])
        for h, v in sorted(by_hour.items())
    )
    return TimedCarbon(
        grams=grams,
        kwh=kwh_all,
        kwh_covered=kwh_cov,
        fallback_g_per_kwh=fallback_g_per_kwh,
        hours=hours,
        provider=series.provider,
        resolution_s=series.resolution_s,
    )
