"""Typed records of grid carbon intensity over time, and the errors of this package.

An :class:`IntensityPoint` is one interval of a provider's series: the intensity from ``time``
for ``resolution_s`` seconds, with the provider it came from and whether it is a forecast or a
measured (history) figure. Every figure computed from them carries that provenance.
"""

from __future__ import annotations

import bisect
import datetime as dt
from collections.abc import Iterable, Sequence
from typing import Literal

import msgspec

from computewatch.errors import ComputewatchError, UsageError

__all__ = [
    "FORECAST",
    "HISTORY",
    "IntensityError",
    "IntensityPoint",
    "IntensitySeries",
    "Kind",
    "ProviderError",
    "UnknownProviderError",
    "parse_time",
    "to_utc",
    "utc_iso",
]

Kind = Literal["forecast", "history"]
FORECAST: Kind = "forecast"
HISTORY: Kind = "history"


class IntensityError(ComputewatchError):
    """Carbon intensity data that cannot be used (a bad file, an empty series)."""


class ProviderError(IntensityError):
    """A provider that is down, rate-limits, rejects the credentials or answers nonsense; the
    message says which and why in one line."""


class UnknownProviderError(UsageError):
    """A provider or region the user named that does not exist; the message lists close
    matches."""


def to_utc(t: dt.datetime) -> dt.datetime:
    """``t`` as an aware UTC datetime; a naive one is taken as UTC."""
    return t.replace(tzinfo=dt.UTC) if t.tzinfo is None else t.astimezone(dt.UTC)


def parse_time(text: str) -> dt.datetime:
    """An ISO 8601 time (``2026-11-30T14:00:00Z``, ``2026-11-30 14:00+01:00``) as aware UTC;
    a time without an offset is UTC. ValueError when it is not one."""
    s = text.strip()
    if s.endswith(("Z", "z")):
        s = s[:-1] + "+00:00"
    return to_utc(dt.datetime.fromisoformat(s))


def utc_iso(t: dt.datetime) -> str:
    """``t`` in ISO 8601 UTC with a ``Z``: ``2026-11-30T14:00:00Z``."""
    return to_utc(t).strftime("%Y-%m-%dT%H:%M:%SZ")


class IntensityPoint(msgspec.Struct, frozen=True):
    """Grid intensity in gCO2e/kWh from ``time`` (aware UTC) for ``resolution_s`` seconds."""

    time: dt.datetime
    g_per_kwh: float
    provider: str  # "electricitymaps" | "watttime" | "uk-carbon-intensity" | "file:<path>"
    resolution_s: int
    kind: Kind

    @property
    def end(self) -> dt.datetime:
        return self.time + dt.timedelta(seconds=self.resolution_s)


class IntensitySeries(msgspec.Struct, frozen=True):
    """A provider's points for one region, sorted by time and not overlapping. Gaps are
    allowed; a point covers ``[time, time + resolution_s)``."""

    region: str
    provider: str
    points: tuple[IntensityPoint, ...]
    notes: tuple[str, ...] = ()

    @classmethod
    def build(
        cls, region: str, provider: str, points: Iterable[IntensityPoint], notes: Sequence[str] = ()
    ) -> IntensitySeries:
        """Sort ``points``; a later point that overlaps an earlier one cuts its length (the
        newer figure wins), duplicates keep the last one."""
        by_time: dict[dt.datetime, IntensityPoint] = {}
        for p in points:
            by_time[to_utc(p.time)] = p
        ordered = [by_time[t] for t in sorted(by_time)]
        out: list[IntensityPoint] = []
        for i, p in enumerate(ordered):
            q = p
            if i + 1 < len(ordered):
                gap = int((ordered[i + 1].time - p.time).total_seconds())
                if gap < p.resolution_s:
                    q = msgspec.structs.replace(p, resolution_s=gap)
            out.append(q)
        return cls(region, provider, tuple(out), tuple(notes))

    @property
    def start(self) -> dt.datetime | None:
        return self.points[0].time if self.points else None

    @property
    def end(self) -> dt.datetime | None:
        return self.points[-1].end if self.points else None

    @property
    def resolution_s(self) -> int | None:
        """The most common point length, in seconds (None when empty)."""
        if not self.points:
            return None
        lengths = [p.resolution_s for p in self.points]
        return max(set(lengths), key=lengths.count)

    def at(self, t: dt.datetime) -> IntensityPoint | None:
        """The point covering ``t``, or None in a gap or outside the series."""
        t = to_utc(t)
        times = [p.time for p in self.points]
        i = bisect.bisect_right(times, t) - 1
        if i < 0:
            return None
        p = self.points[i]
        return p if t < p.end else None

    def between(self, start: dt.datetime, end: dt.datetime) -> IntensitySeries:
        """The points that overlap ``[start, end)``."""
        start, end = to_utc(start), to_utc(end)
        kept = [p for p in self.points if p.end > start and p.time < end]
        return IntensitySeries(self.region, self.provider, tuple(kept), self.notes)

    def coverage(self, start: dt.datetime, end: dt.datetime) -> float:
        """The fraction of ``[start, end)`` the points cover (0 to 1)."""
        start, end = to_utc(start), to_utc(end)
        span = (end - start).total_seconds()
        if span <= 0:
            return 0.0
        covered = 0.0
        for p in self.points:
            lo, hi = max(p.time, start), min(p.end, end)
            if hi > lo:
                covered += (hi - lo).total_seconds()
        return min(covered / span, 1.0)
