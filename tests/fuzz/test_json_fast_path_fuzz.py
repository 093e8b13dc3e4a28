"""The fast JSON path (orjson, where installed) reads and writes what the standard library's
``json`` does: any value written by ``jsonout.compact`` reads back as ``jsonout.dumps``'s
document does, and ``jsonout.loads`` of any text gives json's value or json's error."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from computewatch import jsonout

SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()  # beyond 64 bits too
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text()  # lone surrogates too
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=5)
        | st.dictionaries(st.text(max_size=8) | st.integers(-5, 5), inner, max_size=5)
    ),
    max_leaves=30,
)


def _same(a: Any, b: Any) -> bool:
    return json.dumps(a, sort_keys=False) == json.dumps(b, sort_keys=False)


def test_orjson_is_what_the_server_uses() -> None:
    pytest.importorskip("orjson")  # the server extra installs it; the tests install the extra
    assert jsonout._fast()


@settings(max_examples=400, deadline=None)
@given(VALUES)
def test_compact_reads_back_as_dumps_does(value: Any) -> None:
    assert _same(json.loads(jsonout.compact(value)), json.loads(jsonout.dumps(value)))


@settings(max_examples=400, deadline=None)
@given(VALUES, st.sampled_from([0, 1, 2]))
def test_loads_of_a_document_is_json_loads(value: Any, spaces: int) -> None:
    text = json.dumps(value, indent=spaces or None, ensure_ascii=bool(spaces % 2))
    for data in (text, text.encode("utf-8", "surrogatepass")):
        try:
            want = json.loads(data)
        except ValueError as e:
            with pytest.raises(type(e)):
                jsonout.loads(data)
            continue
        assert _same(jsonout.loads(data), want)


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=60) | st.text(alphabet='{}[]":,0123456789.eE+-tfnul \\aNI', max_size=40))
def test_loads_of_any_bytes_is_json_loads_or_its_error(data: bytes | str) -> None:
    try:
        want = json.loads(data)
    except (ValueError, RecursionError) as e:
        with pytest.raises(type(e)):
            jsonout.loads(data)
        return
    assert _same(jsonout.loads(data), want)


def test_long_integers_and_constants_take_the_standard_path() -> None:
    assert jsonout.loads(b"[-9999999999999999999, 123456789012345678901234567890]") == [
        -9999999999999999999, 123456789012345678901234567890,
    ]  # fmt: skip

    def refuse(name: str) -> Any:
        raise ValueError(f"refused {name}")

    with pytest.raises(ValueError, match="refused NaN"):
        jsonout.loads(b'{"a": NaN}', parse_constant=refuse)
    assert (
        jsonout.compact({"a": 2**70, "b": float("inf")}) == '{"a":1180591620717411303424,"b":null}'
    )
