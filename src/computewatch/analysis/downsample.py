"""Downsampling that keeps peaks: min/max envelopes per bucket, counters turned into rates.

A 24-hour run at 1 s has 86,400 points per series; a chart a thousand pixels wide shows at most
a few thousand. Averaging buckets would hide the spikes one looks for, so every bucket keeps its
minimum and maximum beside its mean (the "min/max envelope" of M4-style time-series
visualisation, Jugel et al., VLDB 2014), and a chart draws the band between them and the mean
as a line. Counters are turned into rates *before* bucketing, so a burst shows as a burst.

Pure functions over lists, shared by the HTML report (``views/html``) and the upload payload
(``upload/payload.py``), which both keep min/mean/max per bucket.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

MAX_BUCKETS = 2000
"""Buckets per series at most by default (the report's: about two per pixel of a wide
chart)."""


@dataclass(frozen=True, slots=True)
class Band:
    """One series over a bucket grid: min, max and mean of each bucket (None: no point in it)."""

    lo: list[float | None]
    hi: list[float | None]
    mean: list[float | None]


@dataclass(frozen=True, slots=True)
class Envelope:
    """A series downsampled: ``t`` is the time of each bucket's first point."""

    t: list[float]
    lo: list[float | None]
    hi: list[float | None]
    mean: list[float | None]
    per_bucket: int
    """Points per bucket: 1 when the series was short enough to keep whole."""


def bucket_size(n: int, max_buckets: int = MAX_BUCKETS) -> int:
    """Consecutive points per bucket so that ``n`` points make at most ``max_buckets``."""
    if max_buckets < 1:
        raise ValueError("max_buckets must be at least 1")
    return max(1, math.ceil(n / max_buckets))


def counter_rates(times: Sequence[float], values: Sequence[float]) -> list[float | None]:
    """Per-second rate of a cumulative counter at each point, from the point before it.

    The first point has no rate (None), nor does a point not later than the one before. A value
    lower than the one before means the counter restarted from zero (a process restarted, a
    device was reset), so the increase since then is the value itself, as Prometheus'
    ``rate()`` counts a counter reset.
    """
    if len(times) != len(values):
        raise ValueError("times and values differ in length")
    out: list[float | None] = [None] * len(values)
    for i in range(1, len(values)):
        out[i] = counter_rate(times[i - 1], values[i - 1], times[i], values[i])
    return out


def counter_rate(t0: float, v0: float, t1: float, v1: float) -> float | None:
    """Per-second rate of a cumulative counter from ``(t0, v0)`` to ``(t1, v1)``; None when
    ``t1`` is not later. A lower value means the counter restarted from zero (see
    :func:`counter_rates`)."""
    dt = t1 - t0
    if dt <= 0:
        return None
    return (v1 - v0 if v1 >= v0 else v1) / dt


def grid_band(n_grid: int, per_bucket: int, points: Iterable[tuple[int, float]]) -> Band:
    """Min, max and mean per bucket of a series whose points sit at positions of a shared grid
    (``(position, value)``, positions in ``range(n_grid)``); bucket ``b`` holds positions
    ``b * per_bucket`` to ``(b + 1) * per_bucket - 1``, so series on one grid line up."""
    nb = math.ceil(n_grid / per_bucket) if n_grid else 0
    pts = points if isinstance(points, list) else list(points)
    if per_bucket == 1:
        vals: list[float | None] = [None] * nb
        for pos, v in pts:
            vals[pos] = v
        return Band(vals, vals, vals)
    if len(pts) == n_grid and (n_grid == 0 or (pts[0][0] == 0 and pts[-1][0] == n_grid - 1)):
        # A point at every grid position (the usual case): min/max/sum of slices run in C.
        full = [v for _, v in pts]
        lo_f: list[float | None] = []
        hi_f: list[float | None] = []
        mean_f: list[float | None] = []
        for i in range(0, n_grid, per_bucket):
            chunk = full[i : i + per_bucket]
            lo_f.append(min(chunk))
            hi_f.append(max(chunk))
            mean_f.append(sum(chunk) / len(chunk))
        return Band(lo_f, hi_f, mean_f)
    lo: list[float | None] = [None] * nb
    hi: list[float | None] = [None] * nb
    total = [0.0] * nb
    count = [0] * nb
    for pos, v in pts:
        b = pos // per_bucket
        if count[b]:
            cur_lo, cur_hi = lo[b], hi[b]
            if cur_lo is not None and v < cur_lo:
                lo[b] = v
            if cur_hi is not None and v > cur_hi:
                hi[b] = v
        else:
            lo[b] = hi[b] = v
        total[b] += v
        count[b] += 1
    mean: list[float | None] = [total[b] / count[b] if count[b] else None for b in range(nb)]
    return Band(lo, hi, mean)


def grid_times(times: Sequence[float], per_bucket: int) -> list[float]:
    """The time of each bucket's first grid position."""
    return list(times[::per_bucket])


def envelope(
    times: Sequence[float], values: Sequence[float], max_buckets: int = MAX_BUCKETS
) -> Envelope:
    """One series (times ascending) in at most ``max_buckets`` buckets of consecutive points;
    a series of at most ``max_buckets`` points comes back unchanged."""
    if len(times) != len(values):
        raise ValueError("times and values differ in length")
    n = len(times)
    k = bucket_size(n, max_buckets)
    band = grid_band(n, k, list(enumerate(values)))
    return Envelope(grid_times(times, k), band.lo, band.hi, band.mean, k)


def event_rate(
    times: Sequence[float],
    weights: Sequence[float] | None,
    start: float,
    width: float,
    count: int,
) -> list[float]:
    """Events per second in ``count`` buckets of ``width`` seconds from ``start`` (events at
    ``times``, each counting ``weights[i]`` or 1): steps, samples or tokens per second."""
    if width <= 0:
        raise ValueError("width must be positive")
    sums = [0.0] * count
    for i, t in enumerate(times):
        b = int((t - start) // width)
        if b == count and t - start <= count * width:  # the last event, on the closing edge
            b = count - 1
        if 0 <= b < count:
            sums[b] += 1.0 if weights is None else weights[i]
    return [s / width for s in sums]
