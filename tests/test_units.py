"""computewatch.units: hand-worked strings for each formatter, and no formatter ever raises or
prints nan or a negative exponent."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from computewatch import units as u

MiB = 2.0**20
GiB = 2.0**30

FORMATTERS: list[Callable[[float | None], str]] = [
    u.format_bytes,
    u.format_rate,
    u.format_duration,
    u.format_seconds,
    u.format_promql_duration,
    u.format_percent,
    u.format_energy,
    u.format_kwh,
    u.format_grams,
    u.format_usd,
    u.format_watts,
    u.format_flop,
    u.format_count,
    u.format_number,
    u.format_significant,
]


@pytest.mark.parametrize("fmt", FORMATTERS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("missing", [None, math.nan, math.inf, -math.inf])
def test_a_missing_value_is_n_a_everywhere(
    fmt: Callable[[float | None], str], missing: float | None
) -> None:
    assert fmt(missing) == "n/a"


@pytest.mark.parametrize(
    ("fmt", "value", "text"),
    [
        (u.format_bytes, 0, "0 B"),
        (u.format_bytes, 1536, "1.5 KiB"),  # 1536 / 1024
        (u.format_bytes, 150 * MiB, "150 MiB"),
        (u.format_bytes, 23.4 * GiB, "23.4 GiB"),
        (u.format_rate, 1.5 * MiB, "1.5 MiB/s"),
        (u.format_duration, 3725, "1:02:05"),  # 1 h, 2 min, 5 s
        (u.format_duration, 93789, "26:03:09"),
        (u.format_seconds, 0.0005, "500 µs"),
        (u.format_seconds, 0.0123, "12.3 ms"),
        (u.format_seconds, 1.5, "1.5 s"),
        (u.format_seconds, 12.345, "12.3 s"),
        (u.format_seconds, 150, "0:02:30"),  # from 100 s on, a clock
        (u.format_promql_duration, 900, "15m"),
        (u.format_promql_duration, 5400, "1h30m"),
        (u.format_promql_duration, 0, "0s"),
        (u.format_percent, 0.125, "12.5%"),
        (u.format_percent, 1, "100.0%"),
        (u.format_energy, 0.0346, "0.035 J"),  # two significant digits below 10 J
        (u.format_energy, 9.616e-06 * 3.6e6, "35 J"),  # the report's 9.616e-06 kWh
        (u.format_energy, 1200, "1,200 J"),
        (u.format_energy, 9000, "2.5 Wh"),  # 9,000 / 3,600
        (u.format_energy, 1.152e7, "3.2 kWh"),  # 11.52 MJ / 3.6 MJ
        (u.format_energy, 4.5e9, "1,250 kWh"),
        (u.format_energy, 0, "0 J"),
        (u.format_kwh, 9.616e-06, "35 J"),  # 9.616e-06 x 3.6e6 = 34.6 J
        (u.format_kwh, 2.0, "2 kWh"),
        (u.format_grams, 12.345, "12.3 g CO2e"),
        (u.format_grams, 0.000012, "0.000012 g CO2e"),
        (u.format_grams, 1500, "1.5 kg CO2e"),
        (u.format_grams, 2.5e6, "2,500 kg CO2e"),
        (u.format_usd, 12.5, "$12.50"),
        (u.format_usd, 0.04321, "$0.04321"),
        (u.format_usd, 0.00001234, "$0.00001234"),
        (u.format_watts, 349.6, "350 W"),
        (u.format_watts, 5600, "5,600 W"),  # a node's eight GPUs
        (u.format_flop, 5.5e14, "5.5e+14 FLOP"),
        (u.format_flop, 250, "250 FLOP"),
        (u.format_count, 1234567, "1,234,567"),
        (u.format_number, 1234.56, "1,234.6"),
        (u.format_significant, 8.925e-05, "0.00008925"),  # the report's old range end
        (u.format_significant, 12.345, "12.35"),  # 12.34500000000000063 in binary
        (u.format_significant, 1234.5, "1,234"),  # whole from 1,000 on; .5 rounds to even
        (u.format_significant, 0.5, "0.5"),
    ],
)
def test_hand_worked(fmt: Callable[[float | None], str], value: float, text: str) -> None:
    assert fmt(value) == text


def test_tiny_values_never_print_scientific_notation() -> None:
    assert u.format_energy(1e-12) == "<0.000000001 J"
    assert u.format_grams(-1e-12) == "-<0.000000001 g CO2e"
    assert u.format_usd(1.5e-9) == "$<0.000000001"  # 4 significant digits need 12 decimals


@given(
    st.one_of(
        st.none(), st.floats(allow_nan=False, allow_infinity=False), st.integers(-(10**30), 10**30)
    )
)
def test_no_formatter_raises_or_prints_nan_or_negative_exponents(v: float | None) -> None:
    for fmt in FORMATTERS:
        text = fmt(v)
        assert text and "nan" not in text.lower() and "e-0" not in text and "inf" not in text
        if fmt is not u.format_flop:
            assert "e+" not in text, (fmt.__name__, v, text)
