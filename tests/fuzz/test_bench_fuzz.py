"""Fuzzing the benchmark's file readers: a baseline file (``check --baseline FILE``, the pytest
plugin's committed file) and LoadGen's detail log: any text gives figures or BaselineError,
nothing else."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from computewatch.bench.gate import METRICS, BaselineError, parse_baseline
from computewatch.bench.loadgen import parse_detail_log, result_from_log

BASE = settings.get_profile("computewatch-fuzz")  # tests/fuzz/conftest.py

_number = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True), st.integers(), st.booleans(), st.none(),
    st.just(10**400),
    st.text(max_size=5),
)  # fmt: skip
_metrics = st.dictionaries(st.sampled_from([*METRICS, "other"]), _number, max_size=6)
_entry = st.fixed_dictionaries(
    {},
    optional={
        "metrics": st.one_of(_metrics, _number),
        "step_times_seconds": st.one_of(st.lists(_number, max_size=6), _number),
        "ranges": st.one_of(
            st.dictionaries(
                st.sampled_from([*METRICS, "other"]),
                st.one_of(st.lists(_number, max_size=3), _number),
                max_size=3,
            ),
            _number,
        ),
        "methods": st.one_of(st.dictionaries(st.text(max_size=5), _number, max_size=3), _number),
    },
)
_doc = st.one_of(
    st.builds(
        lambda e, tests, v: {"computewatch_baseline": v, **e, "tests": tests},
        _entry,
        st.one_of(st.dictionaries(st.text(max_size=8), _entry, max_size=3), _number),
        st.sampled_from([1, 1, 1, 2, "1", None]),
    ),
    st.recursive(
        _number,
        lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=4), c, max_size=3),
        max_leaves=8,
    ),
)


@settings(BASE, max_examples=300 * BASE.max_examples)
@given(_doc)
def test_baseline_documents(doc: Any) -> None:
    try:
        text = json.dumps(doc)
    except ValueError:
        return
    try:
        run, tests = parse_baseline(text)
    except BaselineError:
        return
    for m in [run, *tests.values()]:
        if m is None:
            continue
        assert all(k in METRICS for k in m.metrics)
        assert all(t >= 0 for t in m.step_times_seconds)
        assert all(k in METRICS and lo <= hi for k, (lo, hi) in m.ranges.items())


@settings(BASE, max_examples=200 * BASE.max_examples)
@given(st.text(max_size=300))
def test_baseline_text(text: str) -> None:
    try:
        parse_baseline(text)
    except BaselineError:
        pass


@settings(BASE, max_examples=300 * BASE.max_examples)
@given(
    st.lists(
        st.one_of(
            st.text(max_size=40),
            st.builds(
                lambda k, v: ":::MLLOG " + json.dumps({"key": k, "value": v}),
                st.sampled_from(["result_validity", "result_50.00_percentile_latency_ns",
                                 "result_query_count", "effective_samples_per_query",
                                 "result_samples_per_second", "result_invalid_reason"]),
                _number,
            ),
        ),
        max_size=8,
    ),
    st.sampled_from(["single-stream", "multi-stream", "server", "offline"]),
)  # fmt: skip
def test_detail_log(lines: list[str], scenario: str) -> None:
    r = result_from_log(parse_detail_log("\n".join(lines)), scenario)
    assert r.valid == (r.validity == "VALID")
    assert all(v == v for v in r.latency_seconds.values())  # no NaN
