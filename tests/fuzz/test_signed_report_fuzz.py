"""Fuzzing the signed usage report's readers: the ingest's parser with any ``signed_report``
value (a parsed batch or InvalidUpload, nothing else), the shape check, and ``ledger verify`` of
a chain whose run entry carries any report (a verdict, never an exception)."""

from __future__ import annotations

import json
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from tests.server.conftest import batch, synthetic_upload

from computewatch.ledger.chain import LedgerError, canonical, next_entry
from computewatch.ledger.keys import encode_public, key_id, sign_report
from computewatch.ledger.reports import SIGNED_FIELDS, shape_problem, usage_report
from computewatch.ledger.verify import Header, verify
from computewatch.serverdb.errors import InvalidUpload
from computewatch.serverdb.ingest import parse_batch

BASE = settings.get_profile("computewatch-fuzz")  # tests/fuzz/conftest.py
FUZZ = settings(BASE, max_examples=300 * BASE.max_examples)
KEY = Ed25519PrivateKey.generate()

_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.just(10**400)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
    | st.sampled_from(["\x00", "\ud800", "AAAA==", "0" * 16, "f" * 64]),
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=6), c, max_size=3),
    max_leaves=8,
)


def _signed() -> dict[str, Any]:
    report = usage_report(
        run_id="r1", seq=1, final=True, status="completed", exit_code=0, started_at=1.0,
        ended_at=2.0, summary={"x": 1}, meta={},
    )  # fmt: skip
    return sign_report(report, KEY)


# a valid report with any one field replaced by any JSON value, or any JSON value at all
_reports = st.one_of(
    _json,
    st.builds(
        lambda k, v: {**_signed(), k: v},
        st.sampled_from([*SIGNED_FIELDS, "extra"]),
        _json,
    ),
)


@given(_reports)
@settings(FUZZ)
def test_the_ingest_parser_takes_any_signed_report(report: Any) -> None:
    up = synthetic_upload("r1")
    doc = {**batch(up), "runs": [{**up, "signed_report": report}]}
    try:
        parsed = parse_batch(json.dumps(doc))
    except InvalidUpload as e:
        assert "signed_report" in str(e)
        return
    assert report is None or shape_problem(report) is None
    if report is not None:
        assert parsed["runs"][0]["signed_report"] == report
        canonical(report).decode("utf-8")  # what the ledger will hold


@given(_reports)
@settings(FUZZ)
def test_verify_gives_a_verdict_for_any_report_in_the_chain(report: Any) -> None:
    pub = KEY.public_key()
    reg = {"action": "register", "key_id": key_id(pub), "public_key": encode_public(pub),
           "team": "t", "name": "n", "registered_at": 1.0, "revoked_at": None}  # fmt: skip
    first = next_entry(None, "node_key", reg)
    body = {"run_id": "r1", "team": "t", "status": "completed", "seq": 1, "started_at": 1.0,
            "ended_at": 2.0, "summary_sha256": _signed()["summary_sha256"],
            "signature": "valid", "signed_report": report}  # fmt: skip
    try:
        canonical(report).decode("utf-8")
    except (LedgerError, UnicodeError):
        assume(False)  # the ingest refuses such a report: no chain holds one
    run = next_entry(first, "run", body)
    v = verify([first, run], Header({}))
    assert v.reports == 1
    if v.problem is not None:
        assert v.problem.what == "report" and v.problem.seq == 2
    elif report is None:
        assert v.reports_unsigned == 1
    else:
        assert v.reports_signed + v.reports_unknown_key == 1
