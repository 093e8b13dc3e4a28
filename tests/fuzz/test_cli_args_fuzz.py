"""Fuzzing the command line's argument types (computewatch.cli.args and the commands' own):
each returns a finite value of its type or raises ``argparse.ArgumentTypeError``, which argparse
prints as one line with exit status 2. A ``ValueError``/``OverflowError`` would escape as a
traceback-free but misleading "invalid value", so they are not accepted here either."""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable

from hypothesis import given, settings
from hypothesis import strategies as st

from computewatch.accounting.formulas import FormulaError, parse_count
from computewatch.cli import args as cli_args
from computewatch.cli.agent import _nonneg
from computewatch.cli.alerts import _amount, _target
from computewatch.cli.args import whole
from computewatch.cli.fleet import _usd_arg, parse_time
from computewatch.cli.flops import _whole
from computewatch.cli.governance import _team
from computewatch.cli.main import _interval, _tag, _top_interval, parse_age
from computewatch.governance.status import find_model
from computewatch.lineage.compute import GovernanceError, bare_name, qualify, team_of

BASE = settings.get_profile("computewatch-fuzz")  # tests/fuzz/conftest.py


def fuzz(n: int) -> settings:
    return settings(BASE, max_examples=n * BASE.max_examples)


_numberish = st.one_of(
    st.sampled_from(
        [
            "inf",
            "-inf",
            "nan",
            "NaN",
            "1e400",
            "-0",
            "0",
            "1",
            "1.5",
            "0x10",
            "1_000",
            "٣",
            "1e-400",
        ]
    ),
    st.floats().map(repr),
    st.integers().map(str),
    st.text("0123456789.eE+-_,kMBGTPsmhdw ", max_size=12),
    st.text(max_size=12),
    st.integers(300, 400).map(lambda n: "9" * n + "d"),
)

_FLOATS: list[Callable[[str], float]] = [
    cli_args.number,
    cli_args.pue,
    cli_args.seconds,
    _interval,
    _top_interval,
    _nonneg,
    _usd_arg,
    _amount("dollars"),
    parse_age,
]


@fuzz(300)
@given(text=_numberish, which=st.sampled_from(_FLOATS))
def test_numeric_flags(text: str, which: Callable[[str], float]) -> None:
    try:
        v = which(text)
    except argparse.ArgumentTypeError:
        return
    assert isinstance(v, float) and math.isfinite(v), (text, v)


@fuzz(200)
@given(text=_numberish)
def test_whole_numbers(text: str) -> None:
    for parse in (whole, _whole):
        try:
            v = parse(text)
        except argparse.ArgumentTypeError:
            continue
        assert isinstance(v, int) and v >= 1


@fuzz(200)
@given(text=_numberish)
def test_counts(text: str) -> None:
    try:
        v = parse_count(text)
    except FormulaError:
        return
    assert math.isfinite(v) and v > 0


@fuzz(200)
@given(text=_numberish)
def test_durations(text: str) -> None:
    v = cli_args.duration_seconds(text)
    assert v is None or (math.isfinite(v) and v >= 0)


@fuzz(200)
@given(text=st.one_of(_numberish, st.sampled_from(["2024-05-01", "2024-13-01T25:00", "now"])))
def test_times(text: str) -> None:
    try:
        v = parse_time(text, now=time.time())
    except argparse.ArgumentTypeError:
        return
    assert math.isfinite(v)


@fuzz(200)
@given(text=st.text(max_size=30))
def test_tags_and_targets(text: str) -> None:
    try:
        key, _ = _tag(text)
        assert key and key == key.strip()
    except argparse.ArgumentTypeError:
        pass
    try:
        _target(text)
    except argparse.ArgumentTypeError:
        pass


_names = st.one_of(
    st.text(max_size=20),
    st.text("ab/-_. \n", max_size=8),
    st.sampled_from(["", "/", "a/", "/a", "a//b", "acme/x", "x", " acme/x "]),
)


@fuzz(200)
@given(text=_names)
def test_team_names(text: str) -> None:
    """``governance grant --to TEAM``: a valid team name, or one argparse error."""
    try:
        v = _team(text)
    except argparse.ArgumentTypeError:
        return
    assert v == text and "/" not in v and v[:1].isalnum()


@fuzz(200)
@given(name=_names, team=_names.filter(lambda t: "/" not in t), known=st.lists(_names, max_size=6))
def test_model_names_resolve_to_a_known_model_or_one_error(
    name: str, team: str, known: list[str]
) -> None:
    """A model named by a run is ``team/name`` (its team's when bare; a team name never holds
    a ``/``); a name asked of the status is a known model or a GovernanceError, never another
    exception."""
    q = qualify(team, name)
    assert "/" in q and (team_of(q) == team if "/" not in name else q == name)
    assert bare_name(q) == (name if "/" not in name else bare_name(name))
    try:
        got = find_model(known, name, team or None)
    except GovernanceError:
        return
    assert got in known
