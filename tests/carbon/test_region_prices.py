"""``where``'s price per region: the user's per-region price, else the user's one price, else the
dated row of data/electricity_prices.csv for the region's grid, else "no price"."""

from __future__ import annotations

import pytest

from computewatch.carbon.regions import compare_regions, grid_row, region_price
from computewatch.catalog.reference import ElectricityPrice, electricity_prices

TABLE = {
    "US-VA": ElectricityPrice("US-VA", 0.09, "commercial", "2023", "a statistics office", 2023),
    "SE": ElectricityPrice("SE", 0.07, "non-household", "2024-S2", "another office", 2024),
}


def test_the_users_prices_win_over_the_table() -> None:
    row = grid_row("aws:us-east-1")
    assert region_price(row, prices={"aws:us-east-1": 0.2}, table=TABLE) == (0.2, "--prices", None)
    assert region_price(row, default_price=0.3, price_source="--usd-per-kwh", table=TABLE) == (
        0.3,
        "--usd-per-kwh",
        None,
    )
    # a region missing from --prices takes the one price, named as such, not "--prices"
    got = region_price(row, prices={"FR": 0.2}, default_price=0.3, price_source="[cost]")
    assert got == (0.3, "[cost]", None)


def test_a_cloud_region_takes_its_grid_rows_price_with_source_and_year() -> None:
    price, source, year = region_price(grid_row("aws:eu-north-1"), table=TABLE)
    assert (price, year) == (0.07, 2024)
    assert source == "grid SE: another office (2024)"
    price, source, year = region_price(grid_row("us-va"), table=TABLE)  # a grid row itself
    assert (price, source, year) == (0.09, "a statistics office (2023)", 2023)


def test_no_row_is_no_price_and_says_why() -> None:
    price, source, year = region_price(grid_row("FR"), table=TABLE)
    assert price is None and year is None
    assert "no row for FR" in source and "--usd-per-kwh" in source


def test_compare_regions_costs_from_the_package_table() -> None:
    prices = electricity_prices()
    rows = {r.region: r for r in compare_regions(["aws:us-east-1", "gcp:us-central1"], 10.0)}
    va = prices["US-VA"]
    us = rows["aws:us-east-1"]
    assert us.usd_per_kwh == va.usd_per_kwh and us.price_year == va.year
    assert us.usd == pytest.approx(10 * us.pue * va.usd_per_kwh)
    assert us.price_source.startswith("grid US-VA: U.S. EIA")
    assert rows["gcp:us-central1"].usd_per_kwh == prices["US-IA"].usd_per_kwh
    # an explicitly empty table: no price anywhere
    none = compare_regions(["aws:us-east-1"], 10.0, table={})
    assert none[0].usd is None and none[0].price_source.startswith("no price")
