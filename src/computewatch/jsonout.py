"""The one way the package writes JSON for users or keeps it: standard JSON only.

Python's ``json`` writes ``NaN``, ``Infinity`` and ``-Infinity`` for non-finite floats, which
RFC 8259 (section 6) does not allow and strict readers (``jq``, JavaScript's ``JSON.parse``)
reject. Here a non-finite float becomes ``null`` (a value that could not be measured), and
``allow_nan=False`` stays on, so anything that slips past the conversion raises instead of
writing a bad document.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable, Mapping
from typing import IO, Any


@functools.cache
def _fast() -> Any:
    """orjson where installed (the server's extra installs it; the server's hot path reads and
    writes through it), else None. Imported at first use, not with this module: the command
    line starts without it."""
    try:  # orjson: an optional dependency (the server's extra)
        import orjson
    except ImportError:  # the package alone: the standard library's json
        return None
    return orjson


__all__ = ["compact", "dump", "dumps", "finite", "loads"]


def finite(obj: Any) -> Any:
    """``obj`` with every non-finite float (in dicts, lists and tuples, at any depth) as None;
    tuples come back as lists, as JSON writes them."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, Mapping):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [finite(v) for v in obj]
    return obj


def dumps(
    obj: Any,
    *,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
    ensure_ascii: bool = True,
    default: Callable[[Any], Any] | None = None,
) -> str:
    """``json.dumps`` of ``obj`` with non-finite floats as ``null``."""

    def encode(o: Any) -> str:
        return json.dumps(
            o,
            indent=indent,
            separators=separators,
            sort_keys=sort_keys,
            ensure_ascii=ensure_ascii,
            default=default,
            allow_nan=False,
        )

    try:
        return encode(obj)  # the usual case: nothing to convert, no copy made
    except ValueError as e:
        # json's message for a non-finite float (Lib/json/encoder.py, floatstr)
        if "Out of range float values" not in str(e):
            raise
    return encode(finite(obj))


def dump(
    obj: Any,
    fp: IO[str],
    *,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
    ensure_ascii: bool = True,
) -> None:
    """Write :func:`dumps` of ``obj`` to ``fp`` (built whole first, so a failure writes nothing)."""
    fp.write(
        dumps(
            obj,
            indent=indent,
            separators=separators,
            sort_keys=sort_keys,
            ensure_ascii=ensure_ascii,
        )
    )


def compact(obj: Any) -> str:
    """``obj`` as compact JSON (no spaces), non-finite floats as ``null``: a
    document that reads back to what :func:`dumps` writes, made by orjson where it is
    installed (several times faster) and by :func:`dumps` where orjson cannot write ``obj``
    (an integer beyond 64 bits, a lone surrogate, a type it does not know)."""
    fast = _fast()
    if fast:
        try:
            written: bytes = fast.dumps(obj, option=fast.OPT_NON_STR_KEYS)
            return written.decode()
        except TypeError:  # orjson.JSONEncodeError is a TypeError
            pass
    return dumps(obj, separators=(",", ":"))


_NINES = bytes.maketrans(b"012345678", b"999999999")
_LONG_RUN = b"9" * 19
"""19 digits in a row (found as nines after ``_NINES``, at C speed: a regular expression took
ten times orjson's own time): an integer orjson may read as a float (it reads integers within
64 bits exactly; -9,999,999,999,999,999,999 is not one), or a long mantissa."""


def loads(data: bytes | str, *, parse_constant: Callable[[str], Any] | None = None) -> Any:
    """``json.loads(data)``, through orjson where installed and where it reads the same values:
    a document it refuses (``NaN``, lone surrogates, another encoding than UTF-8, nesting
    deeper than 1,024) or one holding 19 digits in a row is read by ``json``, whose errors
    (and ``parse_constant``) apply as they always did."""
    fast = _fast()
    if fast:
        raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
        if _LONG_RUN not in raw.translate(_NINES):
            try:
                return fast.loads(raw)
            except fast.JSONDecodeError:
                pass
    if parse_constant is None:
        return json.loads(data)
    return json.loads(data, parse_constant=parse_constant)
