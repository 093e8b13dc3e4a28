"""The one way the package writes JSON for users or keeps it: standard JSON only.

Python's ``json`` writes ``NaN``, ``Infinity`` and ``-Infinity`` for non-finite floats, which
RFC 8259 (section 6) does not allow and strict readers (``jq``, JavaScript's ``JSON.parse``)
reject. Here a non-finite float becomes ``null`` (a value that could not be measured), and
``allow_nan=False`` stays on, so anything that slips past the conversion raises instead of
writing a bad document.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from typing import IO, Any

__all__ = ["dump", "dumps", "finite"]


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
