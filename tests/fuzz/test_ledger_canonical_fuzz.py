"""The ledger's fast canonical check (through orjson) against the exact one: for any line, it
either leaves the line to the exact check or reads the value the exact check reads, which never
refuses that line. Lines are every spelling of any JSON value: its RFC 8785 form, orjson's and
Python's, and those forms mutated byte by byte (spaces, number spellings, escapes, names
repeated, text after the value), with the numbers where the spellings part made likely (whole
doubles below 1e16 and from 1e16 to 1e21, doubles from 1e-6 to 1e-5, integers about 2**53 and
2**64), and names that sort otherwise in UTF-16."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from computewatch.ledger import jcs
from computewatch.ledger.chain import LedgerError

orjson = pytest.importorskip("orjson")  # the server extra installs it; the tests install it

BASE = settings.get_profile("computewatch-fuzz")  # tests/fuzz/conftest.py
FUZZ = settings(BASE, max_examples=400 * BASE.max_examples)

_edge_floats = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False),
    st.integers(-(10**15), 10**15).map(float),  # whole doubles below 1e16: orjson writes 8.0
    st.floats(1e16, 1e21, exclude_max=True),  # whole, written as digits: orjson writes 1e+16
    st.floats(1e-6, 1e-5, exclude_max=True),  # 0.000001 to 0.00000999...: orjson writes 1e-6
    st.floats(1e-7, 1e-4) | st.floats(1e20, 1e22),  # either side of the boundaries
    st.sampled_from([0.0, -0.0, 8e20, 1.1e21, 3.2e18, 2.0**53, 2.0**64, 1e-7, 5e-324]),
)
_edge_ints = st.one_of(
    st.integers(),
    st.integers(-(2**54), 2**54),
    st.integers(2**63 - 10, 2**64 + 10),
    st.integers(-(2**63) - 10, -(2**63) + 10),
    st.integers(10**15, 10**22),
    st.sampled_from([2**53, 2**53 + 1, -(2**53) - 1, 2**60, 3_200_000_000_000_000_000, 10**21]),
)
_text = st.one_of(
    st.text(max_size=6),
    st.sampled_from(["", "a", "\x00", "\x1f", "\x7f", "\u2028", "\u2029", "\ue000", "\ufb33",
                     "\U0001f600", "\u20ac", "\\", '"', "/", "e+20", ".0,", "1e+16", "8.0",
                     ":12345678901234567890,", "0123456789012345678"]),
)  # fmt: skip
_values: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | _edge_ints | _edge_floats | _text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_text, inner, max_size=4),
    max_leaves=10,
)

_INTERESTING = b' \t\n",:[]{}.0123456789eE+-\\/u\xe2\x80\xa8\xef\xf0'
"""Bytes a mutation inserts: JSON's structure, number spellings, escapes, UTF-8 lead bytes."""
_RESPELL = (
    (b"e+", b"e"), (b"e+", b"E+"), (b"e-", b"E-"), (b",", b", "), (b":", b": "), (b"/", b"\\/"),
    (b"\\n", b"\\u000a"), (b"\\u001f", b"\\u001F"), (b"\xe2\x80\xa8", b"\\u2028"),
    (b"a", b"\\u0061"),
    (b"}", b".0}"), (b"]", b".0]"), (b",", b".0,"), (b"0,", b"0.0,"), (b"1", b"01"), (b"0", b"-0"),
    (b"{", b'{"a":1,'), (b"}", b',"a":1}'), (b"1", b"1.0"), (b"0", b"0e+16"),
    (b"00000", b"00001"),
)  # fmt: skip
"""Spellings swapped in a line: each makes a canonical line non-canonical (where it applies)."""


def _exact(line: bytes) -> Any:
    """The value the exact check reads from ``line``; LedgerError where it refuses it."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        raise LedgerError("not UTF-8") from None
    return jcs._full_check(line, text)


def _same(a: Any, b: Any) -> bool:
    """Equal as JSON values: the same numbers (an integer token beyond 64 bits is read as the
    int of its digits by one check, as its double by the other), strings, shapes."""
    if isinstance(a, bool) or isinstance(b, bool) or a is None or b is None:
        return a is b
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    if isinstance(a, int | float) and isinstance(b, int | float):  # JSON numbers are doubles
        x, y = float(a), float(b)
        return x == y and math.copysign(1, x) == math.copysign(1, y)
    if isinstance(a, str) or isinstance(b, str):
        return type(a) is type(b) and a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return False


def _agree(line: bytes) -> bool:
    """The property: the fast check decides ``line`` only as the exact check does. Returns
    whether it decided."""
    fast = jcs._fast_value(line)
    if fast is jcs._UNDECIDED:
        return False
    exact = _exact(line)  # raises where the fast check accepted a line the exact one refuses
    assert _same(fast, exact), (line, fast, exact)
    assert jcs.dumps(fast) == line
    return True


def _spellings(value: Any) -> list[bytes]:
    out = []
    try:
        out.append(jcs.dumps(value))
    except LedgerError:
        pass
    try:
        out.append(orjson.dumps(value, option=orjson.OPT_SORT_KEYS))
    except TypeError:
        pass
    try:
        text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        out.append(text.encode("utf-8"))
    except (ValueError, UnicodeEncodeError):
        pass
    return out


def test_the_fast_check_runs_here() -> None:
    assert jcs.fast_available()


@FUZZ
@given(_values)
def test_every_spelling_of_a_value_is_decided_as_the_exact_check_does(value: Any) -> None:
    for line in _spellings(value):
        _agree(line)
        _agree(b"[" + line + b"]")
        _agree(b'{"v":' + line + b"}")


@FUZZ
@given(_values, st.data())
def test_a_mutated_line_is_decided_as_the_exact_check_does(value: Any, data: st.DataObject) -> None:
    for spelled in _spellings(value):
        line = b'{"body":' + spelled + b',"kind":"run","seq":1}'
        for _ in range(3):
            how = data.draw(st.integers(0, 4))
            at = data.draw(st.integers(0, len(line)))
            if how == 0:
                byte = data.draw(st.sampled_from(list(_INTERESTING))).to_bytes()
                line = line[:at] + byte + line[at:]
            elif how == 1:
                line = line[:at] + line[at + 1 :]
            elif how == 2 and at + 1 < len(line):
                line = line[:at] + line[at + 1 : at + 2] + line[at : at + 1] + line[at + 2 :]
            else:
                old, new = data.draw(st.sampled_from(_RESPELL))
                line = line.replace(old, new, 1) if how == 3 else line.replace(old, new)
            _agree(line)


def _one_by_one(lines: list[bytes]) -> list[Any]:
    """canonical_value of each line up to the first it refuses (then ``LedgerError``)."""
    out: list[Any] = []
    for line in lines:
        try:
            out.append(jcs.canonical_value(line))
        except LedgerError:
            out.append(LedgerError)
            break
    return out


@FUZZ
@given(st.lists(_values, min_size=1, max_size=4), st.data())
def test_lines_checked_in_one_loop_are_decided_as_one_by_one(
    values: list[Any], data: st.DataObject
) -> None:
    """canonical_values (a verifier's loop over a block of entries) reads each line as
    canonical_value does and refuses the first line it refuses: canonical lines and others
    (every spelling of each value, one of them mutated), in one list."""
    lines = [line for v in values for line in _spellings(v)]
    if lines:
        at = data.draw(st.integers(0, len(lines) - 1))
        old, new = data.draw(st.sampled_from(_RESPELL))
        lines.insert(at, lines[at].replace(old, new, 1))
    got: list[Any] = []
    try:
        got.extend(jcs.canonical_values(lines))
    except LedgerError:
        got.append(LedgerError)
    want = _one_by_one(lines)
    assert len(got) == len(want)
    for a, b in zip(got, want, strict=True):
        assert a is b if LedgerError in (a, b) else _same(a, b), (lines, got, want)


@FUZZ
@given(st.floats(allow_nan=False, allow_infinity=False) | _edge_floats)
def test_orjson_spells_a_double_as_rfc_8785_except_where_the_byte_tests_look(x: float) -> None:
    """The premise of the byte tests: where orjson's spelling of a double is not RFC 8785's, it
    holds '.0' at its end, 'e+1', 'e+20' or 'e-6'."""
    theirs, ours = orjson.dumps(x), jcs.number_text(x).encode()
    if theirs != ours:
        assert theirs.endswith(b".0") or any(s in theirs for s in (b"e+1", b"e+20", b"e-6"))


def test_typical_entries_take_the_fast_check() -> None:
    """What a ledger holds is decided without the exact check (else the check is no faster):
    strings, small and whole numbers, decimals, FLOP figures from 1e16 to beyond 1e21, nulls,
    and a string whose digits look like an integer beyond 2**53."""
    body = {
        "run_id": "0123456789abcdef0123456789abcdef",
        "summary_sha256": "1234567890123456789012345678901234567890123456789012345678901234",
        "team": "lab",
        "started_at": 1.7e9,
        "ended_at": 1700003600.25,
        "figures": {"flops": {"value": 1.1e21, "low": 8e20, "high": 3.2e18, "tiny": 2.5e-9},
                    "gpu_hours": 8.0, "energy_kwh": 6.2, "count": 3_200_000_000_000_000_000},
        "note": "émigré ✓ \u2028 \x1f",
        "signed_report": None,
        "ok": True,
    }  # fmt: skip
    line = jcs.dumps({"body": body, "kind": "run", "seq": 12, "time": "2026-12-01T10:00:00Z"})
    assert _agree(line)


@pytest.mark.parametrize(
    "line",
    [b"8.0", b'{"a":8.0}', b"[-0.0]", b'{"a":1e+16}', b'{"a":1.5e+20}', b'{"a":1e-6}',
     b'{"a":9.5e-6}', b'{"a":9007199254740993}', b'{"a":-9007199254740993}',
     b'{"a":1152921504606846976}', b'{"a":18446744073709551615}',
     b'{"\xef\xac\xb3":1,"\xf0\x9f\x98\x80":2}'],
)  # fmt: skip
def test_what_orjson_writes_back_as_it_reads_but_rfc_8785_does_not_is_refused(line: bytes) -> None:
    """Lines orjson re-encodes byte for byte which are not RFC 8785: the byte tests send each
    to the exact check, which refuses it."""
    assert orjson.dumps(orjson.loads(line), option=orjson.OPT_SORT_KEYS) == line
    assert jcs._fast_value(line) is jcs._UNDECIDED
    with pytest.raises(LedgerError, match="canonical"):
        jcs.canonical_value(line)


def test_an_orjson_that_spells_numbers_otherwise_is_not_used() -> None:
    class Older:
        OPT_SORT_KEYS = 0

        @staticmethod
        def dumps(value: Any, option: int = 0) -> bytes:
            return orjson.dumps(value, option=option).replace(b"e+", b"e")

    assert jcs._spells_as_expected(orjson)
    assert not jcs._spells_as_expected(Older)
