"""Hypothesis strategies shared by the fuzzers (the ``fz`` fixture): values of every JSON, TOML
and YAML shape, with the numbers that break parsers (non-finite, huge, negative zero) made likely.

Every property has the same form: for any input, a parser of a user's file returns a valid typed
value or raises the package's own error (``OWN_ERRORS``), nothing else. ``max_examples`` are
sized so that the whole folder runs in well under 30 s; no database is written.
"""

from __future__ import annotations

import json
import math
import os
import sys
from types import ModuleType
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from computewatch.errors import ComputewatchError

PROFILE = "computewatch-fuzz"
settings.register_profile(
    PROFILE,
    # max_examples here is the scale of every fuzzer's own count (COMPUTEWATCH_FUZZ_SCALE=50
    # for a long hunt); the test files read it with settings.get_profile(PROFILE)
    max_examples=int(os.environ.get("COMPUTEWATCH_FUZZ_SCALE", "1")),
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


OWN_ERRORS = (ComputewatchError,)
"""What a parser of a user's file may raise: the package's own errors, nothing else."""

nasty_floats = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.0, 1.0, 1e400, -1e400, math.nan, 1e308, 5e-324, 0.05, 3600.0]),
)
nasty_ints = st.one_of(
    st.integers(min_value=-(2**64), max_value=2**64),
    st.sampled_from([0, 1, -1, 10**400, -(10**400)]),
)
nasty_text = st.one_of(
    st.text(max_size=40),
    st.sampled_from(["", " ", "\x00", "é", "inf", "nan", "1e400", "[", "{", "\\", "-", "5m"]),
)
scalars: st.SearchStrategy[Any] = st.one_of(
    st.none(), st.booleans(), nasty_ints, nasty_floats, nasty_text
)
values: st.SearchStrategy[Any] = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(nasty_text, inner, max_size=4)
    ),
    max_leaves=12,
)
"""Any JSON-shaped value (None included, which TOML has not)."""


def toml_literal(v: Any) -> str | None:
    """``v`` as a TOML value literal, or None when TOML cannot say it (None, mixed tables)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)  # a TOML basic string reads JSON's escapes (except lone surrogates)
    if isinstance(v, list):
        items = [toml_literal(x) for x in v]
        return None if None in items else "[" + ", ".join(i for i in items if i) + "]"
    if isinstance(v, dict):
        pairs = [(json.dumps(k), toml_literal(x)) for k, x in v.items()]
        if any(x is None for _, x in pairs):
            return None
        return "{" + ", ".join(f"{k} = {x}" for k, x in pairs) + "}"
    return None


toml_value = values.map(toml_literal).filter(lambda s: s is not None)


@pytest.fixture(scope="session")
def fz() -> ModuleType:
    """This module: its strategies and ``OWN_ERRORS``, for the fuzzers to draw from."""
    return sys.modules[__name__]
