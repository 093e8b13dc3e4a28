"""Fuzzing alert rules: the YAML file (``parse_rules``/``load_rules``) and the condition language
(``parse_condition``, ``parse_duration``)."""

from __future__ import annotations

import math
import tempfile
from pathlib import Path
from types import ModuleType

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from computewatch.alerts.detectors import DETECTORS
from computewatch.alerts.expr import FUNCTIONS, ExprError, parse_condition, parse_duration
from computewatch.alerts.rules import (
    _RULE_KEYS_ALL,
    _TOP_KEYS,
    SEVERITIES,
    RuleSet,
    builtin_rules,
    load_rules,
    parse_rules,
)

BASE = settings.get_profile("computewatch-fuzz")  # tests/fuzz/conftest.py


def fuzz(n: int) -> settings:
    return settings(BASE, max_examples=n * BASE.max_examples)


BUILTIN = builtin_rules()

_names = st.sampled_from(
    ["computewatch_gpu_utilization_ratio", "computewatch_job_cpu_seconds_total", "up", "a:b"]
)
_durations = st.one_of(
    st.sampled_from(["5m", "30s", "1h30m", "2d", "0s", "1ms", "9" * 400 + "w", "5", "m", ""]),
    st.text("0123456789wdhms", max_size=12),
)
_ops = st.sampled_from([">", ">=", "<", "<=", "==", "!=", "=", "<>"])
_numbers = st.one_of(
    st.sampled_from(["0", "0.5", "85", "-1", "1e400", "inf", "nan", "NaN", "1e", "."]),
    st.floats().map(repr),
)


@st.composite
def _selector(draw: st.DrawFn) -> str:
    name = draw(_names)
    if draw(st.booleans()):
        label = draw(st.sampled_from(["gpu", "job", "__name__", "1x", ""]))
        op = draw(st.sampled_from(["=", "!=", "=~", "!~", "=="]))
        value = draw(
            st.one_of(
                st.sampled_from(
                    ['"0"', '"a.*"', '"("', '"[z-a]"', "x", '"\\"', '"a{99999999999}"', '"é"']
                ),
                st.text("\\xuUN0178abfnrtv'\"é", max_size=8).map(lambda t: f'"{t}"'),
            )
        )
        name += "{" + label + op + value + "}"
    return name


@st.composite
def conditions(draw: st.DrawFn) -> str:
    """Conditions of the grammar's shape, with every part sometimes wrong."""
    parts = []
    for _ in range(draw(st.integers(1, 3))):
        term = draw(_selector())
        if draw(st.booleans()):
            fn = draw(st.sampled_from([*FUNCTIONS, "sum", "rate"]))
            term = f"{fn}({term}[{draw(_durations)}])"
        if draw(st.booleans()):
            on = draw(st.sampled_from(["", " on(gpu)", " on()", " on(gpu,"]))
            term = f"{term} /{on} {draw(_selector())}"
        parts.append(f"{term} {draw(_ops)} {draw(_numbers)}")
    glue = draw(st.sampled_from([" and ", " and on(job) ", " or ", " "]))
    return glue.join(parts)


@fuzz(300)
@given(text=st.one_of(conditions(), st.text(max_size=60)))
def test_conditions(fz: ModuleType, text: str) -> None:
    try:
        cond = parse_condition(text)
    except ExprError as e:
        assert e.column >= 1
        return
    assert math.isfinite(cond.threshold) and math.isfinite(cond.max_window)


@fuzz(200)
@given(text=st.one_of(_durations, st.text(max_size=20)))
def test_durations(text: str) -> None:
    try:
        seconds = parse_duration(text)
    except ValueError:
        return
    assert math.isfinite(seconds) and seconds >= 0


@st.composite
def rule(draw: st.DrawFn, fz: ModuleType) -> dict[str, object]:
    keys = draw(st.lists(st.sampled_from([*_RULE_KEYS_ALL, "bogus"]), max_size=6, unique=True))
    out: dict[str, object] = {}
    for k in keys:
        real = {
            "name": st.sampled_from(["GpuHot", "bad name", "GpuLowUtilization", ""]),
            "expr": conditions(),
            "detector": st.sampled_from([*DETECTORS, "nope"]),
            "params": st.dictionaries(st.sampled_from(["window", "min", "x"]), fz.scalars),
            "for": _durations,
            "severity": st.sampled_from([*SEVERITIES, "fatal"]),
            "labels": st.dictionaries(
                st.sampled_from(["team", "severity", "__x", "1a"]), fz.scalars, max_size=3
            ),
            "message": st.sampled_from(
                ["{name}: {value:.0f}", "{labels.gpu}", "{nope}", "{value:{x}}", "{", "{0}"]
            ),
            "description": fz.nasty_text,
        }.get(k, fz.values)
        out[k] = draw(st.one_of(real, fz.values) if draw(st.booleans()) else real)
    return out


@st.composite
def documents(draw: st.DrawFn, fz: ModuleType) -> str:
    """A rules file built from the real keys, rendered as YAML (sometimes a list of lists)."""
    doc: dict[str, object] = {}
    for k in draw(st.lists(st.sampled_from([*_TOP_KEYS, "bogus"]), max_size=4, unique=True)):
        doc[k] = draw(
            {
                "rules": st.lists(rule(fz), max_size=3),
                "receivers": st.lists(
                    st.sampled_from(
                        ["terminal", "slack:https://x", "webhook:ftp://x", "nope", {"type": 3}]
                    ),
                    max_size=2,
                ),
                "builtin": st.one_of(st.booleans(), fz.scalars),
                "disable": st.lists(st.sampled_from([*BUILTIN.names(), "Nope", 3]), max_size=2),
            }.get(k, fz.values)
        )
    return yaml.safe_dump(doc, default_flow_style=draw(st.booleans()), allow_unicode=True)


def _check(rules: RuleSet) -> None:
    for r in rules.rules:
        assert r.name and r.severity in SEVERITIES
        assert math.isfinite(r.for_seconds) and r.for_seconds >= 0
        assert (r.condition is None) != (r.detector is None)


@fuzz(200)
@given(data=st.data())
def test_rules_documents(fz: ModuleType, data: st.DataObject) -> None:
    text = data.draw(documents(fz))
    try:
        _check(parse_rules(text, "fuzz.yaml", builtin=BUILTIN))
    except fz.OWN_ERRORS:
        pass


@fuzz(200)
@given(
    text=st.one_of(
        st.text(max_size=120),
        st.text(alphabet="[]{}:- \n\t'\"&*!|>%@`#,?\\a1", max_size=120),
        st.integers(50, 3000).map(lambda n: "rules: " + "[" * n + "]" * n),
        st.integers(50, 3000).map(
            lambda n: "rules:\n" + "".join(" " * i + "-\n" for i in range(n))
        ),
    )
)
def test_rules_any_text(fz: ModuleType, text: str) -> None:
    try:
        _check(parse_rules(text, "fuzz.yaml"))
    except fz.OWN_ERRORS:
        pass


@fuzz(60)
@given(data=st.binary(max_size=200))
def test_rules_any_bytes_in_a_file(fz: ModuleType, data: bytes) -> None:
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "rules.yaml"
        p.write_bytes(data)
        try:
            _check(load_rules(p))
        except fz.OWN_ERRORS:
            pass
