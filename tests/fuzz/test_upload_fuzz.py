"""Fuzzing what the upload client reads: the server's answer to an ingest request (any status,
any body) is an ingest response or one of the upload errors, never another exception, and no
message holds the token; the payload's redaction takes any JSON document."""

from __future__ import annotations

import json
from types import ModuleType
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from computewatch import jsonout
from computewatch.upload.client import UploadError, parse_answer
from computewatch.upload.payload import scrub

BASE = settings.get_profile("computewatch-fuzz")  # tests/fuzz/conftest.py
FUZZ = settings(BASE, max_examples=150 * BASE.max_examples)
TOKEN = "cwt_fuzz-token-0123456789"


def _bodies(fz: ModuleType) -> st.SearchStrategy[bytes]:
    results = st.lists(
        st.fixed_dictionaries(
            {"id": fz.values, "seq": fz.values, "stored": fz.values},
            optional={"extra": fz.values},
        ),
        max_size=3,
    )
    docs = st.one_of(
        fz.values,
        st.fixed_dictionaries({"protocol": fz.values, "results": results}),
        st.fixed_dictionaries({"detail": fz.values, "error": fz.values}),
        st.fixed_dictionaries({"detail": st.just(f"echo {TOKEN} back")}),
    )
    return st.one_of(
        st.binary(max_size=200),
        docs.map(lambda d: jsonout.dumps(d).encode()),
        st.integers(1, 3000).map(lambda n: b"[" * n + b"]" * n),
    )


def test_any_answer_is_a_response_or_an_upload_error(fz: ModuleType) -> None:
    @FUZZ
    @given(status=st.one_of(st.integers(0, 999), st.sampled_from([200, 401, 403, 413, 500])),
           body=_bodies(fz))  # fmt: skip
    def check(status: int, body: bytes) -> None:
        try:
            doc = parse_answer(status, body, where="http://cw", token=TOKEN)
        except UploadError as e:
            assert TOKEN not in str(e)
            assert "\n" not in str(e)
            return
        assert 200 <= status < 300
        assert all(isinstance(r["id"], str) for r in doc["results"])

    check()


def test_scrub_takes_any_document(fz: ModuleType) -> None:
    @FUZZ
    @given(doc=fz.values, names=st.lists(st.text(min_size=1, max_size=8), max_size=2))
    def check(doc: Any, names: list[str]) -> None:
        out = scrub(doc, tuple(names))
        json.loads(jsonout.dumps(out))  # still a JSON document
        assert type(out) is type(doc) or doc is None or isinstance(doc, tuple | float)

    check()
