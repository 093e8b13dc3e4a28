"""Downsampling for the report and the upload payload: envelopes keep every bucket's
extremes, counters become rates."""

from __future__ import annotations

import math
import random

import pytest

from computewatch.analysis.downsample import (
    MAX_BUCKETS,
    bucket_size,
    counter_rates,
    envelope,
    event_rate,
    grid_band,
    grid_times,
)


def test_a_single_spike_survives_in_its_bucket() -> None:
    n = 86_400
    times = [1.7e9 + i for i in range(n)]
    values = [0.25] * n
    values[51_234] = 1.0  # one 1-second spike in a day
    values[70_000] = -3.0  # and one dip
    env = envelope(times, values)
    assert env.per_bucket == math.ceil(n / MAX_BUCKETS)
    assert max(v for v in env.hi if v is not None) == 1.0
    assert min(v for v in env.lo if v is not None) == -3.0
    b = 51_234 // env.per_bucket
    assert env.hi[b] == 1.0 and env.lo[b] == 0.25
    assert env.mean[b] == pytest.approx(0.25 + 0.75 / env.per_bucket)
    assert env.t[b] == times[b * env.per_bucket]  # a bucket's time is its first point's


def test_each_bucket_has_the_min_max_and_mean_of_its_points() -> None:
    rng = random.Random(7)
    values = [rng.uniform(-5, 5) for _ in range(10_007)]
    times = [float(i) for i in range(len(values))]
    env = envelope(times, values, max_buckets=100)
    k = env.per_bucket
    assert k == 101
    for b in range(len(env.t)):
        chunk = values[b * k : (b + 1) * k]
        assert env.lo[b] == min(chunk)
        assert env.hi[b] == max(chunk)
        assert env.mean[b] == pytest.approx(sum(chunk) / len(chunk))
        assert env.t[b] == times[b * k]


@pytest.mark.parametrize("n", [2001, 4000, 4001, 86_400, 1_000_003])
def test_bucket_count_is_bounded(n: int) -> None:
    assert math.ceil(n / bucket_size(n)) <= MAX_BUCKETS
    env = envelope([float(i) for i in range(n)], [1.0] * n)
    assert len(env.t) == len(env.lo) == len(env.hi) == len(env.mean) <= MAX_BUCKETS
    assert len(env.t) > MAX_BUCKETS // 2  # and not needlessly coarse


@pytest.mark.parametrize("n", [0, 1, 5, MAX_BUCKETS])
def test_a_short_series_comes_back_unchanged(n: int) -> None:
    times = [10.0 + 0.5 * i for i in range(n)]
    values = [float(i * i) for i in range(n)]
    env = envelope(times, values)
    assert env.per_bucket == 1
    assert env.t == times
    assert env.mean == values and env.lo == values and env.hi == values


def test_grid_band_lines_up_series_with_gaps() -> None:
    # Ten grid positions, buckets of 3: [0-2] [3-5] [6-8] [9].
    full = [(i, float(i)) for i in range(10)]
    gappy = [(0, 5.0), (2, 1.0), (7, 4.0)]  # nothing at 3-5 nor 9
    a = grid_band(10, 3, full)
    b = grid_band(10, 3, gappy)
    assert a.lo == [0.0, 3.0, 6.0, 9.0] and a.hi == [2.0, 5.0, 8.0, 9.0]
    assert a.mean == [1.0, 4.0, 7.0, 9.0]
    assert b.lo == [1.0, None, 4.0, None] and b.hi == [5.0, None, 4.0, None]
    assert b.mean == [3.0, None, 4.0, None]
    assert grid_times([0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0], 3) == [0, 3, 6, 9]
    one = grid_band(4, 1, [(1, 2.0), (3, 7.0)])
    assert one.mean == [None, 2.0, None, 7.0]


def test_counter_becomes_rate_per_second() -> None:
    times = [0.0, 1.0, 3.0, 3.5]
    values = [100.0, 150.0, 250.0, 251.0]
    assert counter_rates(times, values) == [None, 50.0, 50.0, 2.0]


def test_counter_decrease_is_a_restart_from_zero() -> None:
    # The process restarted between t=2 and t=3: the counter starts over at 0 and reads 30.
    times = [0.0, 1.0, 2.0, 3.0, 4.0]
    values = [0.0, 100.0, 200.0, 30.0, 80.0]
    rates = counter_rates(times, values)
    assert rates == [None, 100.0, 100.0, 30.0, 50.0]
    assert all(r is not None and r >= 0 for r in rates[1:])


def test_counter_rates_skip_points_not_later_than_the_last() -> None:
    assert counter_rates([0.0, 0.0, 1.0], [0.0, 5.0, 6.0]) == [None, None, 1.0]
    assert counter_rates([], []) == []
    with pytest.raises(ValueError):
        counter_rates([0.0], [])


def test_rates_then_envelope_keep_a_burst() -> None:
    # A network counter that moves 1 kB/s for a day, except one second of 100 MB.
    n = 86_400
    times = [float(i) for i in range(n)]
    values = []
    total = 0.0
    for i in range(n):
        total += 1e8 if i == 40_000 else 1e3
        values.append(total)
    rates = counter_rates(times, values)
    pts = [(i, r) for i, r in enumerate(rates) if r is not None]
    k = bucket_size(n)
    band = grid_band(n, k, pts)
    assert max(v for v in band.hi if v is not None) == pytest.approx(1e8)
    assert min(v for v in band.lo if v is not None) == pytest.approx(1e3)
    assert band.mean[0] == pytest.approx(1e3)


def test_event_rate_counts_per_bucket() -> None:
    times = [0.1, 0.2, 0.9, 1.5, 3.0, 4.0]
    assert event_rate(times, None, 0.0, 1.0, 4) == [3.0, 1.0, 0.0, 2.0]  # 4.0 is the last edge
    assert event_rate(times, [2.0] * 6, 0.0, 2.0, 2) == [4.0, 2.0]
    with pytest.raises(ValueError):
        event_rate(times, None, 0.0, 0.0, 1)
