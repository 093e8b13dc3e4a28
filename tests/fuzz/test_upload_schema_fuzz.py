"""Fuzzing the upload schema's validator (computewatch.upload.schema.validate_batch), which the
server runs on every parsed body: any JSON value, and valid batches with any field of a run or
of a series replaced by any value, give a batch that keeps the protocol's promises or
InvalidBatch naming a field, nothing else; the one-pass path (validate_batch_json) accepts the
same batches with the same values, or gives way. No database is written."""

from __future__ import annotations

import json
import math
import time
from types import ModuleType
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from tests.server.conftest import batch, synthetic_upload

from computewatch.upload.protocol import (
    EARLIEST_TIME,
    FUTURE_SLACK_SECONDS,
    MAX_MAGNITUDE,
    RUN_STATUSES,
    IngestBatch,
)
from computewatch.upload.schema import InvalidBatch, validate_batch, validate_batch_json

BASE = settings.get_profile("computewatch-fuzz")  # tests/fuzz/conftest.py
FUZZ = settings(BASE, max_examples=300 * BASE.max_examples)

RUN_FIELDS = [
    "id", "seq", "final", "name", "status", "exit_code", "started_at", "ended_at", "host",
    "user", "project", "tags", "command", "summary", "meta", "series", "signed_report",
]  # fmt: skip
SERIES_FIELDS = ["name", "labels", "bucket_seconds", "points", "kind"]


def _finite(doc: Any) -> bool:
    if isinstance(doc, float):
        return math.isfinite(doc)
    if isinstance(doc, dict):
        return all(_finite(v) for v in doc.values())
    if isinstance(doc, list):
        return all(_finite(v) for v in doc)
    return True


def _promises(b: IngestBatch) -> None:
    """What every accepted batch keeps, whatever came in."""
    latest = time.time() + FUTURE_SLACK_SECONDS
    for run in b["runs"]:
        assert run["status"] in RUN_STATUSES
        assert EARLIEST_TIME <= run["started_at"] <= latest
        if run["ended_at"] is not None:
            assert run["started_at"] <= run["ended_at"] <= latest
        assert _finite(run["summary"]) and _finite(run["meta"])
        for s in run["series"]:
            assert all(len(p) == 4 for p in s["points"])
            assert all(abs(x) < MAX_MAGNITUDE for p in s["points"] for x in p)


def _check(doc: Any) -> None:
    # the server's one-pass path (Pydantic's own JSON parser) accepts what the long way
    # accepts, with the same values, or gives way to it (None): never another answer
    body = json.dumps(doc).encode()
    fast = validate_batch_json(body)
    try:
        b = validate_batch(json.loads(body))
    except InvalidBatch as e:
        assert fast is None, (body[:300], fast)
        said = str(e)
        said.encode("utf-8")  # goes back in a JSON answer: no lone surrogate
        where = said.partition(":")[0]
        assert where.startswith(("runs", "protocol", "body")), said
        return
    _promises(b)
    assert fast is None or fast == b, body[:300]


@FUZZ
@given(data=st.data())
def test_any_value(fz: ModuleType, data: st.DataObject) -> None:
    _check(data.draw(fz.values))


@FUZZ
@given(data=st.data())
def test_a_run_with_one_field_replaced(fz: ModuleType, data: st.DataObject) -> None:
    run: dict[str, Any] = dict(synthetic_upload())
    field = data.draw(st.sampled_from([*RUN_FIELDS, "started_at", "ended_at", "status"]))
    run[field] = data.draw(
        st.one_of(
            fz.values,
            st.sampled_from([*RUN_STATUSES, "pwned", "Running", ""]),
            st.floats(min_value=0, max_value=4e9),
        )
    )
    _check(batch(run))  # type: ignore[arg-type]


@FUZZ
@given(data=st.data())
def test_a_series_with_one_field_replaced(fz: ModuleType, data: st.DataObject) -> None:
    run: Any = synthetic_upload()
    series = run["series"][0]
    series["points"].append(data.draw(st.lists(fz.scalars, max_size=5)))
    series[data.draw(st.sampled_from(SERIES_FIELDS))] = data.draw(fz.values)
    _check(batch(run))
