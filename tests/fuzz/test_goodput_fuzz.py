"""Fuzzing goodput's reader of uploaded run records (any JSON gives a RunTime or None, never an
exception: a server reads what clients sent) and the lineage arithmetic (any runs give
categories that cover the total time once, with every figure finite and not negative)."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from computewatch.goodput.json import report_json
from computewatch.goodput.model import RunTime, goodput, run_time_from_json

BASE = settings.get_profile("computewatch-fuzz")  # tests/fuzz/conftest.py

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=8), c, max_size=3),
    max_leaves=12,
)
_fields = st.fixed_dictionaries(
    {"run_id": st.text(max_size=4), "started_at": _json, "ended_at": _json},
    optional={
        k: _json
        for k in (
            "status", "gpu_count", "kwh", "usd", "initialization_seconds", "step_seconds",
            "data_wait_seconds", "checkpoint_seconds", "checkpoints", "steps", "start_step",
            "last_step", "last_checkpoint_step", "progress",
        )
    },
)  # fmt: skip


@settings(BASE)
@given(st.one_of(_json, _fields))
def test_any_record_is_a_run_time_or_none(raw: object) -> None:
    r = run_time_from_json(raw)
    assert r is None or isinstance(r, RunTime)


_sec = st.floats(min_value=0, max_value=1e5)
_run = st.builds(
    lambda i, start, length, init, steps, data, ckpt, n, first, status: RunTime(
        f"r{i}",
        None,
        status,
        start,
        start + length,
        1,
        1.0,
        1.0,
        min(init, length),
        min(steps, length),
        min(data, steps),
        min(ckpt, steps),
        1,
        n,
        first,
        first + n,
        first + n // 2,
        ((float(first), 0.0), (float(first + n), steps)),
    ),
    st.integers(0, 99),
    st.floats(0, 1e6),
    _sec,
    _sec,
    _sec,
    _sec,
    _sec,
    st.integers(1, 1000),
    st.integers(0, 1000),
    st.sampled_from(["completed", "failed", "interrupted"]),
)


@settings(BASE)
@given(st.lists(_run, max_size=5))
def test_the_categories_cover_the_time_once(runs: list[RunTime]) -> None:
    rep = goodput("model m", runs)
    parts = rep.goodput.seconds + sum(b.seconds for b in rep.badput.values())
    assert all(math.isfinite(b.seconds) and b.seconds >= 0 for b in rep.badput.values())
    assert rep.goodput.seconds >= 0
    assert parts <= rep.total_seconds * (1 + 1e-9) + 1e-6
    report_json(rep)
