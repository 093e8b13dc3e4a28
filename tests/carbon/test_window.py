"""The best-window search, against a brute force over fine steps and known optima."""

from __future__ import annotations

import datetime as dt
import random

import pytest

from computewatch.carbon.intensity_file import parse_intensity_csv
from computewatch.carbon.records import IntensityError, IntensityPoint, IntensitySeries
from computewatch.carbon.window import best_window

T0 = dt.datetime(2026, 12, 1, 0, 0, tzinfo=dt.UTC)


def series(values: list[float], step: int = 3600, start: dt.datetime = T0) -> IntensitySeries:
    pts = [
        IntensityPoint(start + dt.timedelta(seconds=i * step), v, "test", step, "forecast")
        for i, v in enumerate(values)
    ]
    return IntensitySeries.build("X", "test", pts)


def test_known_optimum_from_a_csv() -> None:
    # 24 hourly values; the cheapest 3 h are 13:00-16:00 (50+40+60 = 150)
    values = [400, 380, 360, 350, 340, 330, 300, 280, 250, 200, 150, 120, 100, 50, 40, 60, 200,
              300, 350, 400, 420, 430, 440, 450]  # fmt: skip
    text = "time,g_per_kwh\n" + "".join(
        f"{(T0 + dt.timedelta(hours=i)).isoformat()},{v}\n" for i, v in enumerate(values)
    )
    s = parse_intensity_csv(text)
    plan = best_window(s, 3 * 3600, T0, 24 * 3600, energy_kwh=10)
    assert plan.start == T0 + dt.timedelta(hours=13)
    assert plan.mean_g_per_kwh == pytest.approx(50.0)
    assert plan.now_mean_g_per_kwh == pytest.approx((400 + 380 + 360) / 3)
    assert plan.saving_g == pytest.approx(10 * ((400 + 380 + 360) / 3 - 50))
    assert plan.saving_ratio == pytest.approx(1 - 50 / 380)
    assert plan.covered_ratio == 1.0
    # within 6 h the best start is the latest allowed window's best
    short = best_window(s, 3 * 3600, T0, 6 * 3600)
    assert short.start == T0 + dt.timedelta(hours=6)


def test_start_off_the_grid_is_found_exactly() -> None:
    # now = 00:30; a 1 h job; values make the optimum straddle a boundary-aligned start
    s = series([100, 500, 10, 10, 500])
    now = T0 + dt.timedelta(minutes=30)
    plan = best_window(s, 5400, now, 4 * 3600)  # 1.5 h
    # windows within [02:00, 03:30) are at 10 g/kWh as far as they can be: start 02:00
    assert plan.start == T0 + dt.timedelta(hours=2)
    assert plan.mean_g_per_kwh == pytest.approx((10 * 5400) / 5400)


def _brute(s: IntensitySeries, d: float, now: dt.datetime, within: float) -> float:
    best = float("inf")
    t = 0.0
    while t <= within + 1e-9:
        start = now + dt.timedelta(seconds=t)
        end = start + dt.timedelta(seconds=d)
        if end > (s.end or end):
            break
        total = 0.0
        for p in s.points:
            lo, hi = max(p.time, start), min(p.end, end)
            if hi > lo:
                total += (hi - lo).total_seconds() * p.g_per_kwh
        best = min(best, total / d)
        t += 60.0
    return best


@pytest.mark.parametrize("seed", range(5))
def test_matches_a_brute_force_search(seed: int) -> None:
    rng = random.Random(seed)
    s = series([rng.uniform(20, 600) for _ in range(24)], step=1800)
    d = rng.choice([1800, 3600, 5 * 1800, 4 * 3600])
    now = T0 + dt.timedelta(minutes=rng.randrange(0, 60))
    plan = best_window(s, d, now, 6 * 3600)
    assert plan.mean_g_per_kwh <= _brute(s, d, now, 6 * 3600) + 1e-6


def test_job_longer_than_the_forecast_says_so() -> None:
    s = series([100, 200])
    plan = best_window(s, 5 * 3600, T0, 24 * 3600)
    assert plan.start == T0
    assert "longer than the forecast" in plan.notes[0]
    assert plan.covered_ratio == pytest.approx(2 / 5)
    assert plan.mean_g_per_kwh == pytest.approx((100 + 200 + 3 * 150) / 5)


def test_gaps_are_filled_with_the_mean_and_said() -> None:
    pts = [
        IntensityPoint(T0, 100, "t", 3600, "forecast"),
        IntensityPoint(T0 + dt.timedelta(hours=3), 300, "t", 3600, "forecast"),
    ]
    plan = best_window(IntensitySeries.build("X", "t", pts), 3600, T0, 3 * 3600)
    assert plan.start == T0
    assert any("gaps" in n for n in plan.notes)
    # a window over the gap: covered only where the series has values
    over = best_window(IntensitySeries.build("X", "t", pts), 3 * 3600, T0, 0)
    assert over.covered_ratio == pytest.approx(1 / 3)
    assert over.mean_g_per_kwh == pytest.approx((100 + 2 * 200) / 3)  # the gap at the mean


def test_bad_inputs() -> None:
    with pytest.raises(IntensityError):
        best_window(series([1.0]), 0, T0, 10)
    with pytest.raises(IntensityError):
        best_window(IntensitySeries("X", "t", ()), 60, T0, 10)


# -- a now before the data, a window cut by its end


def test_now_before_the_data_is_said_not_taken_at_the_mean() -> None:
    # data from 02:00; now 00:00: the first 2 h of starting now have no forecast
    s = series([400, 100, 100, 400], start=T0 + dt.timedelta(hours=2))
    plan = best_window(s, 3600, T0, 6 * 3600)
    assert any("starting now" in n and "02:00" in n for n in plan.notes), plan.notes
    # the best window is inside the data, and said covered
    assert plan.start == T0 + dt.timedelta(hours=3) and plan.covered_ratio == 1.0


def test_now_days_before_the_data_is_an_error() -> None:
    s = series([400, 100], start=T0 + dt.timedelta(days=3))
    with pytest.raises(IntensityError, match=r"starts at .* after every window"):
        best_window(s, 3600, T0, 6 * 3600)


def test_a_window_cut_by_the_datas_end_is_said() -> None:
    # a 3 h job at 23:00 of a forecast that ends at 24:00 is covered for 1 h only
    s = series([400] * 23 + [10])
    plan = best_window(s, 3 * 3600, T0 + dt.timedelta(hours=23), 0)
    assert plan.covered_ratio == pytest.approx(1 / 3)
    assert any("covers 33% of" in n for n in plan.notes), plan.notes
