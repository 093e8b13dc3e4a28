"""Carbon summed per interval of intensity; the SCI score; region comparison."""

from __future__ import annotations

import datetime as dt

import pytest

from computewatch.carbon.records import IntensityPoint, IntensitySeries, UnknownProviderError
from computewatch.carbon.regions import compare_regions
from computewatch.carbon.sci import UnitCount, sci_score
from computewatch.carbon.timed import EnergyInterval, timed_carbon

T0 = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)


def _series(values: list[float], step: int = 3600) -> IntensitySeries:
    return IntensitySeries.build(
        "X",
        "p",
        [
            IntensityPoint(T0 + dt.timedelta(seconds=i * step), v, "p", step, "history")
            for i, v in enumerate(values)
        ],
    )


def test_sum_over_hours() -> None:
    s = _series([100, 300])
    t = T0.timestamp()
    # 1 kWh spread over 1.5 h from 00:30: 1/3 in hour 0 (100), 2/3 in hour 1 (300)
    r = timed_carbon([EnergyInterval(t + 1800, t + 7200, 1.0)], s, 500)
    assert r.grams == pytest.approx(100 / 3 + 300 * 2 / 3)
    assert r.covered_ratio == pytest.approx(1.0)
    assert [round(h.kwh, 6) for h in r.hours] == [round(1 / 3, 6), round(2 / 3, 6)]
    assert r.hours[1].g_per_kwh == pytest.approx(300)


def test_uncovered_energy_uses_the_fallback() -> None:
    s = _series([100])
    t = T0.timestamp()
    r = timed_carbon([EnergyInterval(t, t + 7200, 2.0)], s, 400)
    assert r.grams == pytest.approx(100 + 400)
    assert r.covered_ratio == pytest.approx(0.5)


def test_sci_per_unit() -> None:
    sci = sci_score(
        energy_kwh=2.0,
        operational_g=600.0,
        operational_low=500.0,
        operational_high=700.0,
        embodied_g=40.0,
        embodied_low=20.0,
        embodied_high=80.0,
        unit="1M-tokens",
        units=UnitCount(4e6, "steps' tokens"),
        intensity_method="hourly",
    )
    assert sci["value"] == pytest.approx(640 / 4)
    assert sci["low"] == pytest.approx(520 / 4)
    assert sci["high"] == pytest.approx(780 / 4)
    assert sci["unit"] == "gCO2e per 1M-tokens"
    assert sci["inputs"]["I_g_per_kwh"] == pytest.approx(300)
    assert sci["inputs"]["R"] == pytest.approx(4)
    unknown = sci_score(
        energy_kwh=1,
        operational_g=1,
        operational_low=1,
        operational_high=1,
        embodied_g=0,
        embodied_low=0,
        embodied_high=0,
        unit="step",
        units=UnitCount(None, "no steps recorded"),
        intensity_method="yearly",
    )
    assert unknown["value"] is None and any("unknown" in n for n in unknown["notes"])


def test_compare_regions_orders_by_emissions() -> None:
    rows = compare_regions(
        ["aws:us-east-1", "aws:eu-north-1", "FR"],
        10.0,
        prices={"aws:eu-north-1": 0.05},
        default_price=0.1,
    )
    assert rows[0].region in ("aws:eu-north-1", "FR")
    assert rows[-1].region == "aws:us-east-1"
    by = {r.region: r for r in rows}
    assert by["aws:eu-north-1"].usd == pytest.approx(10 * by["aws:eu-north-1"].pue * 0.05)
    assert by["aws:us-east-1"].pue == pytest.approx(1.14)
    assert by["FR"].pue_low < by["FR"].pue < by["FR"].pue_high  # default PUE with its range
    with pytest.raises(UnknownProviderError, match="close matches: aws:eu-north-1"):
        compare_regions(["aws:eu-nrth-1"], 1.0)
