"""Fuzzing the electricity price table's parser (``data/electricity_prices.csv``'s format): any
text gives a valid table or a CatalogError naming the file, never another exception."""

from __future__ import annotations

import json
import math
from types import ModuleType
from typing import Any

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from computewatch.catalog.reference import (
    _PRICE_COLUMNS,
    MAX_USD_PER_KWH,
    PRICE_SECTORS,
    grid_rows,
    parse_electricity_prices,
)

BASE = settings.get_profile("computewatch-fuzz")  # tests/fuzz/conftest.py

_CELLS: dict[str, list[str]] = {
    "code": ["US-VA", "FR", "US-CA", "aws:us-east-1", "WORLD", "us-va", "XX", ""],
    "usd_per_kwh": ["0.0895", "0", "5", "inf", "nan", "-0.1", "1e400", "8.95"],
    "sector": [*PRICE_SECTORS, "residential", ""],
    "period": ["2023", "2024-S2", "2025-03", "2024-S3", "2024-13", "23", ""],
    "source": ["EIA", ""],
    "year": ["2023", "2024", "2025", "1800", "२०२४"],
}


@st.composite
def price_tables(draw: st.DrawFn, fz: ModuleType) -> str:
    lines = ["# a comment", ",".join(_PRICE_COLUMNS)]
    for _ in range(draw(st.integers(0, 5))):
        cells: list[Any] = []
        for c in _PRICE_COLUMNS:
            bad = draw(st.integers(0, 9)) == 0
            cells.append(draw(fz.nasty_text) if bad else draw(st.sampled_from(_CELLS[c])))
        if draw(st.integers(0, 9)) == 0:
            cells = cells[:-1]
        lines.append(",".join(json.dumps(c) if draw(st.booleans()) else str(c) for c in cells))
    if draw(st.integers(0, 9)) == 0:
        lines[1] = draw(fz.nasty_text)
    return "\n".join(lines) + "\n"


@settings(BASE, max_examples=300 * BASE.max_examples)
@given(data=st.data())
def test_structured_price_tables(fz: ModuleType, data: st.DataObject) -> None:
    text = data.draw(price_tables(fz))
    try:
        parsed = parse_electricity_prices(text, "fuzz.csv")
    except fz.OWN_ERRORS as e:
        assert str(e).startswith("fuzz.csv")
        return
    grid = grid_rows()
    for code, row in parsed.items():
        assert code == row.code and grid[code].kind in ("country", "subnational")
        assert 0 < row.usd_per_kwh < MAX_USD_PER_KWH and math.isfinite(row.usd_per_kwh)
        assert row.sector in PRICE_SECTORS and row.source
        assert row.period[:4] == str(row.year)
        for f in msgspec.structs.fields(row):
            v = getattr(row, f.name)
            assert not isinstance(v, float) or math.isfinite(v), (f.name, v)


@settings(BASE, max_examples=100 * BASE.max_examples)
@given(text=st.text(max_size=300))
def test_any_text_as_a_price_table(fz: ModuleType, text: str) -> None:
    try:
        parse_electricity_prices(text, "fuzz.csv")
    except fz.OWN_ERRORS:
        pass
