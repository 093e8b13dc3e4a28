"""Fuzzing what the agent's training detection reads from outside: the account check's answer
(any bytes give a CheckAnswer or CheckError, nothing else) and a process's environment (any
bytes give the job's declared model, stage and Slurm time limit, or none)."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from computewatch.fleet.attribution import _time_limit, parse_environ
from computewatch.fleet.detection import CheckAnswer, CheckError, parse_check_answer

BASE = settings.get_profile("computewatch-fuzz")  # tests/fuzz/conftest.py

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=8), c, max_size=3),
    max_leaves=10,
)
_answer = st.one_of(
    st.binary(max_size=200),
    _json.map(lambda d: json.dumps(d).encode()),
    st.builds(
        lambda dec, reasons: json.dumps({"decision": dec, "reasons": reasons}).encode(),
        st.one_of(st.sampled_from(["allow", "deny"]), _json),
        _json,
    ),
)


@settings(BASE)
@given(_answer)
def test_any_answer_is_a_decision_or_a_check_error(raw: bytes) -> None:
    try:
        a = parse_check_answer(raw, "http://server")
    except CheckError as e:
        assert str(e).startswith("the account check at http://server ")
        return
    assert isinstance(a, CheckAnswer) and isinstance(a.allow, bool)
    assert all(isinstance(r, str) for r in a.reasons) and len(a.reasons) <= 20


_value = st.one_of(
    st.binary(max_size=24),
    st.integers().map(lambda i: str(i).encode()),
    st.integers(min_value=10**300, max_value=10**320).map(lambda i: str(i).encode()),
)
_keys = st.sampled_from(
    [b"COMPUTEWATCH_MODEL", b"COMPUTEWATCH_STAGE", b"SLURM_JOB_START_TIME",
     b"SLURM_JOB_END_TIME", b"OTHER", b""]
)  # fmt: skip


@settings(BASE)
@given(st.lists(st.tuples(_keys, _value), max_size=8), st.binary(max_size=40))
def test_any_environment_gives_a_declaration_or_none(
    pairs: list[tuple[bytes, bytes]], junk: bytes
) -> None:
    raw = b"\0".join(k + b"=" + v for k, v in pairs) + b"\0" + junk
    env = parse_environ(raw)
    assert set(env) <= {
        "COMPUTEWATCH_MODEL", "COMPUTEWATCH_STAGE", "SLURM_JOB_START_TIME", "SLURM_JOB_END_TIME",
        "SLURM_JOB_ID", "SLURM_JOB_ACCOUNT", "SLURM_JOB_USER", "COMPUTEWATCH_RUN_ID",
        "COMPUTEWATCH_TAGS",
    }  # fmt: skip
    limit = _time_limit(env)
    assert limit is None or limit > 0
