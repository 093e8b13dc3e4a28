"""The statistics behind the rules, checked against known values and scipy where present."""

from __future__ import annotations

import math
import random

import pytest

from computewatch.diagnosis.stats import best_split, linear_sse, mad, mann_whitney_p, median


def test_median_and_mad():
    assert median([3, 1, 2]) == 2
    assert median([4, 1, 3, 2]) == 2.5
    assert mad([1, 1, 2, 2, 4, 6, 9]) == 1
    assert math.isnan(median([]))


def test_best_split_finds_a_jump():
    values = [1.0] * 30 + [3.0] * 20
    s = best_split(values, 5)
    assert s is not None
    assert s.index == 30
    assert s.mean_before == 1.0 and s.mean_after == 3.0
    assert s.sse_split == pytest.approx(0.0, abs=1e-9)
    assert best_split(values[:8], 5) is None


def test_linear_fit_of_a_line():
    slope, sse = linear_sse([2 + 0.5 * i for i in range(20)])
    assert slope == pytest.approx(0.5)
    assert sse == pytest.approx(0.0, abs=1e-9)


def test_mann_whitney_extremes():
    assert mann_whitney_p([1, 2, 3, 4, 5, 6, 7, 8], [1, 2, 3, 4, 5, 6, 7, 8]) == pytest.approx(1.0)
    assert mann_whitney_p(list(range(20)), list(range(100, 120))) < 1e-6
    assert mann_whitney_p([], [1.0]) == 1.0


def test_mann_whitney_matches_scipy():
    stats = pytest.importorskip("scipy.stats")
    rng = random.Random(0)
    for shift in (0.0, 0.3, 1.0):
        a = [rng.gauss(0, 1) for _ in range(40)]
        b = [round(rng.gauss(shift, 1), 1) for _ in range(30)]  # rounding makes ties
        ref = stats.mannwhitneyu(a, b, alternative="two-sided", method="asymptotic").pvalue
        assert mann_whitney_p(a, b) == pytest.approx(ref, rel=1e-6)
