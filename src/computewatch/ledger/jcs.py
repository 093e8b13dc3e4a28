"""RFC 8785 JSON Canonicalization Scheme (JCS): the one byte form of a JSON value that any
language can reproduce, so that a ledger entry's hash does not depend on who wrote it.

Objects' members are sorted by the UTF-16 code units of their names, no whitespace is written,
strings are escaped as ECMAScript's ``JSON.stringify`` escapes them (``\\b \\t \\n \\f \\r``,
``\\"``, ``\\\\``, other control characters as ``\\u00xx``; everything else as UTF-8), and numbers
are IEEE 754 doubles written as ECMAScript's ``Number.prototype.toString`` writes them
(RFC 8785 section 3.2.2.3): ``8.0`` is ``8``, ``1e16`` is ``10000000000000000``, ``1e-7`` is
``1e-7``. An integer JSON cannot carry exactly as a double (beyond 2**53) is refused: write such
a figure as a decimal string with its unit.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Final

from computewatch.ledger.chain import LedgerError

__all__ = [
    "MAX_EXACT_INT",
    "canonical_value",
    "canonical_values",
    "dumps",
    "dumps_json",
    "fast_available",
    "loads",
    "number_text",
]

MAX_EXACT_INT: Final = 2**53
"""The largest integer every double (and so every JSON reader) holds exactly."""

_encode_string = json.encoder.encode_basestring
# The C encoder escapes exactly as RFC 8785 section 3.2.2.2 asks: '"', '\\', the five short
# forms and other control characters as lowercase \u00xx; everything else is left as is.


def number_text(x: float) -> str:
    """``x`` as ECMAScript's ``Number.prototype.toString`` writes it (RFC 8785 3.2.2.3)."""
    if not math.isfinite(x):
        raise LedgerError("NaN and infinity have no JSON form")
    if x == 0:
        return "0"
    sign = "-" if x < 0 else ""
    text = repr(abs(x))  # the shortest round-trip digits, as ECMAScript's algorithm picks
    mantissa, _, exp = text.partition("e")
    whole, _, frac = mantissa.partition(".")
    digits = whole + frac
    point = len(whole) + (int(exp) if exp else 0)
    stripped = digits.lstrip("0")
    point -= len(digits) - len(stripped)
    digits = stripped.rstrip("0") or "0"
    k, n = len(digits), point
    if k <= n <= 21:
        out = digits + "0" * (n - k)
    elif 0 < n <= 21:
        out = digits[:n] + "." + digits[n:]
    elif -6 < n <= 0:
        out = "0." + "0" * (-n) + digits
    else:
        e = n - 1
        lead = digits[0] + ("." + digits[1:] if k > 1 else "")
        out = f"{lead}e{'+' if e >= 0 else '-'}{abs(e)}"
    return sign + out


def _utf16(key: str) -> bytes:
    return key.encode("utf-16-be", "surrogatepass")


def _write(v: object, out: list[str]) -> None:
    if v is None:
        out.append("null")
    elif v is True:
        out.append("true")
    elif v is False:
        out.append("false")
    elif isinstance(v, str):
        out.append(_encode_string(v))
    elif isinstance(v, int):
        text = str(v)
        if abs(v) > MAX_EXACT_INT and not _whole_double(text.encode("ascii")):
            raise LedgerError(
                f"the integer {v} is beyond what a JSON number carries exactly (2**53): "
                "write it as a decimal string with its unit"
            )
        out.append(text)
    elif isinstance(v, float):
        out.append(number_text(v))
    elif isinstance(v, Mapping):
        out.append("{")
        for i, k in enumerate(sorted(v, key=_check_key)):
            if i:
                out.append(",")
            out.append(_encode_string(k))
            out.append(":")
            _write(v[k], out)
        out.append("}")
    elif isinstance(v, list | tuple):
        out.append("[")
        for i, x in enumerate(v):
            if i:
                out.append(",")
            _write(x, out)
        out.append("]")
    else:
        raise LedgerError(f"a {type(v).__name__} has no JSON form")


def _check_key(k: object) -> bytes:
    if not isinstance(k, str):
        raise LedgerError(f"JSON object key {k!r} is not a string")
    return _utf16(k)


_PY_SPELLED = re.compile(
    r"(?:(?<=[:,\[])|^)-?[0-9]+(?:\.0|(?:\.[0-9]+)?e(?:-0[0-9]|\+1[6-9]|\+20))(?=[,\]}]|$)"
)
"""A number token as Python's encoder spells it where ECMAScript's spelling differs: ``8.0``,
``1e-07``, ``1e+16`` to ``...e+20`` (in a list or an object, or the whole text)."""


def _es_number(m: re.Match[str]) -> str:
    return number_text(float(m.group()))


def _fast_dumps(value: object) -> tuple[bytes, object] | None:
    """The standard library's C encoder's output with Python's number spellings rewritten as
    ECMAScript's, when reading it back gives ``value`` (so a rewrite inside a string, a key
    that is not a string, a tuple, are all sent to the full encoder), with what it reads back
    as; None otherwise."""
    if _ENCODE_STRICT is None:
        return None
    try:
        text = _PY_SPELLED.sub(_es_number, "".join(_ENCODE_STRICT(value, 0)))
        out = text.encode("utf-8")
    except (ValueError, TypeError, RecursionError, UnicodeEncodeError):
        return None
    if not (out.isascii() or max(out) < 0xEE) or not _long_tokens_whole(out):
        return None
    try:
        back = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return (out, back) if back == value else None


def dumps(value: object) -> bytes:
    """The RFC 8785 canonical form of ``value`` (UTF-8 bytes)."""
    return dumps_read(value)[0]


def dumps_read(value: object) -> tuple[bytes, object]:
    """The RFC 8785 canonical form of ``value`` and what a JSON reader reads back from it (an
    integer beyond 2**53, written as the double it becomes, reads back as that double's
    whole number): the canonical text is read once, here, for both."""
    fast = _fast_dumps(value)
    if fast is not None:
        return fast
    text = _slow_dumps(value)
    return text, json.loads(text)


def _slow_dumps(value: object) -> bytes:
    out: list[str] = []
    try:
        _write(value, out)
    except RecursionError:
        raise LedgerError("a JSON value nests too deeply") from None
    try:
        return "".join(out).encode("utf-8")
    except UnicodeEncodeError:
        raise LedgerError("a JSON string holds a lone surrogate, which is not Unicode") from None


def _int_value(text: str) -> int | float:
    v = int(text)
    return float(v) if abs(v) > MAX_EXACT_INT else v


def loads(text: str | bytes) -> object:
    """Canonical JSON read back as it was written: a number token beyond 2**53 (a double
    ECMAScript writes whole, ``3200000000000000000``) is that double, as a JSON reader in any
    language sees it, so writing the value again gives the same bytes."""
    return json.loads(text, parse_int=_int_value)


class _NotCanonical(LedgerError):
    """A number token not in its RFC 8785 form (raised inside the parse, caught around it)."""


def _float_token(text: str) -> float:
    x = float(text)
    if not math.isfinite(x) or number_text(x) != text:
        raise _NotCanonical
    return x


def _int_token(text: str) -> int:
    # ECMAScript writes a double from 2**53 up to 1e21 as a plain integer (3.2e18 is
    # 3200000000000000000): such a token is the double it spells exactly, nothing else
    if text == "-0" or not _whole_double(text.encode("ascii")):
        raise _NotCanonical
    return int(text)


_SUSPECT = re.compile(rb"[0-9]\.0(?:[,\]}]|$)|[0-9]e[-+]0|[0-9]e\+(?:1[6-9]|20)(?:[,\]}]|$)")
"""Number tokens whose Python spelling differs from ECMAScript's (``8.0``, ``1e-05``,
``1e+16``, inside the line or at its end): a line with one takes the full check (a match inside
a string only costs time)."""
_LONG = re.compile(rb"-?[0-9]{16,}")
"""Integer tokens of 16 digits or more: each must be a double ECMAScript writes whole
(``3200000000000000000``), not an integer beyond 2**53 (``9007199254740993``). (Digits inside
a string only send the line to the full check.)"""
_DIGITS = bytes(57 if 48 <= b <= 57 else 32 for b in range(256))
"""Every digit to ``9``, everything else to a space: a run of 16 nines is a long number."""


def _refuse(text: str) -> object:
    raise _NotCanonical(f"{text} is not JSON")


_DECODE = json.JSONDecoder(parse_constant=_refuse).raw_decode
_MAKE_ENCODER = getattr(json.encoder, "c_make_encoder", None)
_ENCODE = (
    None
    if _MAKE_ENCODER is None
    else _MAKE_ENCODER(
        None, None, json.encoder.encode_basestring, None, ":", ",", True, False, True
    )
)
_ENCODE_STRICT = (
    None
    if _MAKE_ENCODER is None
    else _MAKE_ENCODER(
        None, None, json.encoder.encode_basestring, None, ":", ",", True, False, False
    )
)


def dumps_json(value: object) -> bytes:
    """:func:`dumps` of a value whose object keys are all strings (one read from JSON): the
    standard library's C encoder when its output is already RFC 8785 (no number Python spells
    otherwise, no long integer that is not a double's spelling, no name sorting otherwise in
    UTF-16), else :func:`dumps`. The same bytes either way, at a fraction of the cost for the
    values a verifier re-encodes (a signed report)."""
    if _ENCODE_STRICT is not None:
        try:
            b = "".join(_ENCODE_STRICT(value, 0)).encode("utf-8")
        except (ValueError, TypeError, RecursionError, UnicodeEncodeError):
            b = b""
        if (
            b
            and (b.isascii() or max(b) < 0xEE)
            and not (_hinted(b) and _SUSPECT.search(b))
            and _long_tokens_whole(b)
        ):
            return b
    return dumps(value)


_PY_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _encode(value: object) -> str:
    """The standard library's compact, key-sorted JSON of a parsed value (its C encoder, made
    once)."""
    if _ENCODE is None:
        return _PY_ENCODER.encode(value)
    return "".join(_ENCODE(value, 0))


def _hinted(line: bytes) -> bool:
    """Whether ``line`` may hold a number Python spells otherwise than ECMAScript: substrings
    found at C speed first (``e+1`` and ``e+20`` only appear in canonical text inside strings)."""
    return (
        b".0," in line or b".0]" in line or b".0}" in line or line.endswith(b".0")
        or b"e-0" in line or b"e+0" in line or b"e+1" in line or b"e+20" in line
    )  # fmt: skip


def canonical_value(line: bytes) -> object:
    """The JSON value of ``line`` when ``line`` is exactly its RFC 8785 form; a
    :class:`LedgerError` otherwise. (A number token beyond 2**53 spells a double; it is read as
    the Python int of those digits, whose ``float()`` is that double and which :func:`dumps`
    writes back the same.)

    Fast for the common case: through orjson where installed (one parse, one re-encoding
    compared, byte tests for the few values orjson writes otherwise; see "the fast check"
    below), else a plain parse with the standard encoder's output compared, a scan for the few
    spellings where Python and ECMAScript write a number differently, and each long integer
    token checked; only a line where that is not conclusive (or whose names could sort
    differently in UTF-16) takes the full check, every number token checked and the full
    encoder compared. (Through orjson an integer token beyond 64 bits is read as its double,
    equal to the int the other paths read.)"""
    fast = _fast_value(line)
    if fast is not _UNDECIDED:
        return fast
    return _standard_value(line)


def canonical_values(lines: Iterable[bytes]) -> Iterator[object]:
    """:func:`canonical_value` of each line in turn (a :class:`LedgerError` at the first line
    not in its RFC 8785 form ends it): the same checks, made in one loop rather than a call
    per line (what a verifier of a million entries spends its time on)."""
    if _orjson() is None:
        return map(canonical_value, lines)
    return _fast_values(lines, _standard_value)


def _standard_value(line: bytes) -> object:
    """:func:`canonical_value` without orjson: the standard library's parser and encoder, the
    exact check where they cannot tell."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        raise LedgerError("not RFC 8785 canonical JSON") from None
    # U+E000 and above (UTF-8 lead bytes 0xEE-0xF4) is where code point and UTF-16 order part
    if (line.isascii() or max(line) < 0xEE) and not (_hinted(line) and _SUSPECT.search(line)):
        try:
            value, end = _DECODE(text)
            again = _encode(value) if end == len(text) else None
        except (ValueError, _NotCanonical, RecursionError, TypeError):
            again = None  # (an empty line too, which is no JSON)
        if again == text and _long_tokens_whole(line):
            return value
    return _full_check(line, text)


_RUN16 = b"9" * 16


def _long_tokens_whole(line: bytes) -> bool:
    """Whether every number token of 16 digits or more in ``line`` is a double written whole
    (found through the digits mapped to nines, each checked where it starts)."""
    nines = line.translate(_DIGITS)
    at = nines.find(_RUN16)
    while at >= 0:
        start = at - 1 if at and line[at - 1] == 45 else at  # a minus sign before it
        m = _LONG.match(line, start)
        if m is None or not _whole_double(m.group()):
            return False
        at = nines.find(_RUN16, m.end())
    return True


def _whole_double(token: bytes) -> bool:
    text = token.decode("ascii")
    v = int(text)
    if abs(v) <= MAX_EXACT_INT:
        return text != "-0"
    try:
        x = float(v)
    except OverflowError:  # beyond every double
        return False
    return math.isfinite(x) and number_text(x) == text


def _full_check(line: bytes, text: str) -> object:
    try:
        value = json.loads(text, parse_float=_float_token, parse_int=_int_token,
                           parse_constant=_refuse)  # fmt: skip
    except (ValueError, _NotCanonical, RecursionError):
        raise LedgerError("not RFC 8785 canonical JSON") from None
    if dumps(value) != line:
        raise LedgerError("not RFC 8785 canonical JSON")
    return value


# -- the fast check, through orjson ------------------------------------------------------------
#
# One parse of the line, one re-encoding compared with it, and a few byte tests for the values
# whose JSON orjson writes otherwise than RFC 8785; a line it cannot decide goes to the checks
# above. It never accepts a line they refuse, nor reads a value otherwise than they read it
# (property-tested in tests/fuzz/test_ledger_canonical_fuzz.py). Why the re-encoding is the
# line's RFC 8785 form once the byte tests pass (for the orjson spelling numbers as
# _spells_as_expected checks on first use, 3.13 here):
#
# - orjson reads strict JSON only (no NaN, no lone surrogate, no invalid UTF-8); what it writes
#   back with sorted names is compact, its strings escaped as RFC 8785 escapes them ('\"',
#   '\\', the five short forms, other control characters as lowercase '\u00xx', the rest as
#   UTF-8). Any other spelling in the line (spaces, '\/', '\u0041', '1E3', '1.50', names
#   repeated or unsorted, text after the value) makes the re-encoding differ from the line.
# - Names sort by code point in orjson and by UTF-16 code unit in RFC 8785: the two orders part
#   only where a name holds U+E000 or above (UTF-8 lead bytes 0xEE to 0xF4): such a line is
#   sent on.
# - Numbers: orjson and ECMAScript write a double with the same shortest digits, and spell it
#   the same ('0.5', '0.00001', '1e-7', '1.1e+21') except a whole double below 1e16 ('8.0' for
#   '8'), a whole double from 1e16 up to 1e21 ('1e+16' for '10000000000000000') and one from
#   1e-6 below 1e-5 ('1e-6' for '0.000001'): a line holding '.0' before ',', ']', '}' or its
#   end, '+1', '+20' or '-6' anywhere is sent on (inside a string that only costs time).
# - Integers: orjson writes any integer it reads as its digits; a token beyond 2**53 must spell
#   a double ECMAScript writes whole ('3200000000000000000'), so each is checked: it has 16
#   digits or more (2**53 has 16), and a line without such a run of digits holds none (no
#   second, strict encoding is needed to tell). orjson reads
#   a token beyond 64 bits as its double and writes it in exponent form: the re-encoding is
#   compared with the line where those tokens are written that way ('8e+20' for
#   '800000000000000000000'), which is the line's own form once each is checked whole.

_UNDECIDED: Final = object()
"""What :func:`_fast_value` returns for a line the exact check must decide."""

_BELOW_EE = bytes(range(0xEE))
"""Deleted from a line, what remains are the bytes where code point and UTF-16 order part."""
_BEFORE_INT = frozenset(b":,[")
_AFTER_INT = frozenset(b",]}")
_MIN_I64, _MAX_U64 = -(2**63), 2**64 - 1
"""orjson reads an integer token within these as an int, beyond them as its double."""


@functools.cache
def _orjson() -> Any:
    """orjson when installed and spelling numbers as this module expects, else None."""
    try:  # orjson: an optional dependency (the server extra); without it the exact check decides
        import orjson
    except ImportError:
        return None
    return orjson if _spells_as_expected(orjson) else None


_PROBES: Final = (
    (0.5, b"0.5"), (0.00001, b"0.00001"), (1.5e-5, b"0.000015"), (1e-7, b"1e-7"),
    (1.25e-7, b"1.25e-7"), (5e-324, b"5e-324"), (1.1e21, b"1.1e+21"), (1e21, b"1e+21"),
    (1.7976931348623157e308, b"1.7976931348623157e+308"), (333333333.3333333, b"333333333.3333333"),
    (1234567890123456.5, b"1234567890123456.5"), (8.0, b"8.0"), (-0.0, b"-0.0"),
    (1e16, b"1e+16"), (8e20, b"8e+20"), (1e-6, b"1e-6"), (9.5e-6, b"9.5e-6"),
)  # fmt: skip
"""Doubles and how the orjson this module was written for spells them: the first ones as
RFC 8785 does, the last ones in the spellings the byte tests send on."""


def _spells_as_expected(orjson: Any) -> bool:
    try:
        return (
            all(orjson.dumps(x) == text for x, text in _PROBES)
            and orjson.dumps({"b": 1, "a": "\x1f\u2028\x7f\n"}, option=orjson.OPT_SORT_KEYS)
            == b'{"a":"\\u001f\xe2\x80\xa8\x7f\\n","b":1}'
        )
    except (TypeError, ValueError):
        return False


def fast_available() -> bool:
    """Whether :func:`canonical_value` checks through orjson here (installed, and spelling
    numbers as expected)."""
    return _orjson() is not None


def _fast_value(line: bytes) -> object:
    """The JSON value of ``line`` when it is exactly its RFC 8785 form; :data:`_UNDECIDED`
    when this check cannot tell."""
    if _orjson() is None:
        return _UNDECIDED
    return next(_fast_values((line,), _undecided))


def _undecided(line: bytes) -> object:
    """What :func:`_fast_value` says of a line it cannot decide."""
    return _UNDECIDED


def _fast_values(lines: Iterable[bytes], undecided: Callable[[bytes], object]) -> Iterator[object]:
    """The JSON value of each line when it is exactly its RFC 8785 form, else what
    ``undecided(line)`` says (orjson is installed and spells numbers as expected)."""
    o = _orjson()
    loads, dumps, sort = o.loads, o.dumps, o.OPT_SORT_KEYS
    digits, run16, below_ee = _DIGITS, _RUN16, _BELOW_EE
    plus, minus, point = _PLUS_1_20, _MINUS_6, _POINT_0
    for line in lines:
        try:
            value = loads(line)
            out = dumps(value, option=sort)
        except (ValueError, TypeError):  # orjson.JSONDecodeError; nesting orjson does not write
            yield undecided(line)
            continue
        # an integer token beyond 2**53 has 16 digits or more (2**53 has 16): only a line with
        # such a run of digits may hold one, each then checked whole (and orjson's spelling of
        # one beyond 64 bits put in its place before comparing)
        nines = line.translate(digits)
        at = nines.find(run16)
        if (
            (out == line if at < 0 else _long_integers(line, nines, at, o) == out)
            and (line.isascii() or not line.translate(None, below_ee))
            and not (plus(line) or minus(line) or point(line))
        ):
            yield value
        else:
            yield undecided(line)


_PLUS_1_20 = re.compile(rb"\+(?:1|20)").search
_MINUS_6 = re.compile(rb"-6").search
_POINT_0 = re.compile(rb"\.0(?:[,\]}]|$)").search
"""The spellings orjson writes and RFC 8785 does not (``e+1``, ``e+20``, ``e-6``, ``.0`` ending
a number): a line holding one is sent on (inside a string that only costs time). Each pattern
starts with one byte ('+', '-', '.'), which the regular expression engine looks for in C; the
three searches cost a line less than the substring tests (and the translation) they replace."""


def _long_integers(line: bytes, nines: bytes, at: int, o: Any) -> bytes | None:
    """``line`` with each integer token beyond 64 bits as orjson writes the double it reads
    (``800000000000000000000``: ``8e+20``); None when an integer token beyond 2**53 is not a
    double written whole. A run of 16 digits or more that does not stand where an integer
    token does (inside a string, a float's digits) is left as it is: if it is a float's, the
    float was compared whole; if it is inside a string, the string was. (``nines``: the line
    translated by ``_DIGITS``; ``at``: where its first run of 16 nines starts.)"""
    pieces: list[bytes] = []
    done = 0
    while at >= 0:
        end = nines.find(b" ", at)
        if end < 0:
            end = len(line)
        start = at - 1 if at and line[at - 1] == 45 else at  # a minus sign before the digits
        if (start == 0 or line[start - 1] in _BEFORE_INT) and (
            end == len(line) or line[end] in _AFTER_INT
        ):
            token = line[start:end]
            written = _LONG_TOKENS.get(token)
            if written is None:
                written = _long_token(token, o)
            if written is _REFUSED:
                return None
            if written:
                pieces += (line[done:start], written)
                done = end
        at = nines.find(_RUN16, end)
    if not pieces:
        return line
    pieces.append(line[done:])
    return b"".join(pieces)


_REFUSED: Final = b"-"
_LONG_TOKENS: dict[bytes, bytes] = {}
"""Integer tokens of 16 digits or more seen (a ledger repeats its FLOP figures): what
:func:`_long_token` said of each."""


def _long_token(token: bytes, o: Any) -> bytes:
    """:data:`_REFUSED` for an integer token beyond 2**53 that is not a double written whole;
    else how orjson writes what it reads of it (its double, for a token beyond 64 bits), or
    ``b""`` where that is the token itself."""
    number = int(token)
    if abs(number) > MAX_EXACT_INT and not _whole_double(token):
        written = _REFUSED
    elif _MIN_I64 <= number <= _MAX_U64:
        written = b""
    else:
        written = o.dumps(float(number))
    if len(_LONG_TOKENS) >= 4096:
        _LONG_TOKENS.clear()
    _LONG_TOKENS[token] = written
    return written
