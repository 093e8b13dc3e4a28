"""Small, dependency-free statistics the rules need: robust location and spread, a two-segment
change point, a linear fit and the Mann-Whitney U test."""

from __future__ import annotations

import math
from collections.abc import Sequence

import msgspec

MAD_TO_SIGMA = 1.4826  # MAD x 1.4826 estimates the standard deviation of normal data


def mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def median(values: Sequence[float]) -> float:
    s = sorted(values)
    n = len(s)
    if n == 0:
        return math.nan
    mid = n // 2
    return s[mid] if n % 2 else (s[mid - 1] + s[mid]) / 2


def mad(values: Sequence[float]) -> float:
    """Median absolute deviation from the median (unscaled)."""
    m = median(values)
    return median([abs(v - m) for v in values])


class Split(msgspec.Struct, frozen=True):
    """The best two-segment fit: values[:index] and values[index:]."""

    index: int
    mean_before: float
    mean_after: float
    sse_split: float  # residual sum of squares of the two-mean model
    sse_one: float  # ... of a single mean


def best_split(values: Sequence[float], min_segment: int) -> Split | None:
    """Least-squares change point in the mean: the index that minimises the two segments'
    summed squared deviations (prefix sums, O(n)). None when the series is too short."""
    n = len(values)
    min_segment = max(min_segment, 1)
    if n < 2 * min_segment:
        return None
    total = sum(values)
    total_sq = sum(v * v for v in values)
    sse_one = total_sq - total * total / n
    best: Split | None = None
    left = left_sq = 0.0
    for k in range(1, n):
        left += values[k - 1]
        left_sq += values[k - 1] ** 2
        if k < min_segment or n - k < min_segment:
            continue
        right, right_sq = total - left, total_sq - left_sq
        sse = (left_sq - left * left / k) + (right_sq - right * right / (n - k))
        if best is None or sse < best.sse_split:
            best = Split(k, left / k, right / (n - k), sse, sse_one)
    return best


def linear_sse(values: Sequence[float]) -> tuple[float, float]:
    """Slope (per index) and residual sum of squares of the least-squares line."""
    n = len(values)
    if n < 2:
        return 0.0, 0.0
    xm = (n - 1) / 2
    ym = mean(values)
    sxx = n * (n * n - 1) / 12  # the sum of (i - xm)^2 over 0..n-1
    sxy = sum(i * v for i, v in enumerate(values)) - xm * ym * n
    syy = sum((v - ym) ** 2 for v in values)
    slope = sxy / sxx
    # the residuals' sum of squares: what the line leaves of syy (one pass, not two)
    return slope, max(syy - slope * sxy, 0.0)


def mann_whitney_p(a: Sequence[float], b: Sequence[float]) -> float:
    """Two-sided p-value of the Mann-Whitney U test, normal approximation with tie and
    continuity corrections (Mann & Whitney 1947; fine from about 8 values a side)."""
    n1, n2 = len(a), len(b)
    if n1 == 0 or n2 == 0:
        return 1.0
    pooled = sorted([(v, 0) for v in a] + [(v, 1) for v in b])
    n = n1 + n2
    rank_a = 0.0
    ties = 0.0
    i = 0
    while i < n:
        j = i
        while j + 1 < n and pooled[j + 1][0] == pooled[i][0]:
            j += 1
        avg = (i + j) / 2 + 1  # ranks are 1-based
        t = j - i + 1
        ties += t**3 - t
        rank_a += avg * sum(1 for k in range(i, j + 1) if pooled[k][1] == 0)
        i = j + 1
    u = rank_a - n1 * (n1 + 1) / 2
    mu = n1 * n2 / 2
    var = n1 * n2 / 12 * ((n + 1) - ties / (n * (n - 1)))
    if var <= 0:
        return 1.0
    z = (abs(u - mu) - 0.5) / math.sqrt(var)
    if z <= 0:
        return 1.0
    return math.erfc(z / math.sqrt(2))
