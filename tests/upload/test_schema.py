"""What the client builds is what the server accepts: the typed records of the protocol and its
models (computewatch.upload.schema) name the same fields, and any run the local store holds
becomes an upload the models validate, whatever its tags, names, command line, status, values
or clock."""

from __future__ import annotations

import math
import time
import typing
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel
from tests.upload.conftest import T0, stored_run

from computewatch.readings import Kind
from computewatch.store import Store
from computewatch.upload import protocol
from computewatch.upload.payload import build_upload
from computewatch.upload.schema import (
    BatchModel,
    InvalidBatch,
    RunModel,
    SeriesModel,
    batch_json_schema,
    validate_batch,
)


def _fields(td: Any) -> tuple[set[str], set[str]]:
    # __optional_keys__ misses NotRequired under `from __future__ import annotations` (3.11)
    hints = typing.get_type_hints(td, include_extras=True)
    optional = {k for k, v in hints.items() if typing.get_origin(v) is typing.NotRequired}
    return set(hints) - optional, optional


def _model_fields(model: type[BaseModel] | Any) -> tuple[set[str], set[str]]:
    if not isinstance(model, type) or not issubclass(model, BaseModel):  # a typed dictionary
        return _fields(model)
    f = model.model_fields
    return {k for k, v in f.items() if v.is_required()}, {
        k for k, v in f.items() if not v.is_required()
    }


@pytest.mark.parametrize(
    ("record", "model"),
    [
        (protocol.IngestBatch, BatchModel),
        (protocol.RunUpload, RunModel),
        (protocol.SeriesUpload, SeriesModel),
    ],
)
def test_the_records_and_the_models_name_the_same_fields(record: Any, model: Any) -> None:
    assert _fields(record) == _model_fields(model)


def test_the_models_speak_this_protocol_and_its_statuses() -> None:
    assert typing.get_args(BatchModel.model_fields["protocol"].annotation) == (
        protocol.PROTOCOL_VERSION,
    )
    assert protocol.RUN_STATUSES == ("running", "completed", "failed", "interrupted")
    from computewatch import store

    assert {store.RUNNING, store.COMPLETED, store.FAILED, store.INTERRUPTED} == set(
        protocol.RUN_STATUSES
    )
    schema = batch_json_schema()
    run = schema["properties"]["runs"]["items"]["properties"]
    assert run["status"]["enum"] == list(protocol.RUN_STATUSES)


def test_a_stored_run_uploads_as_the_models_say(store: Store) -> None:
    up = build_upload(store, stored_run(store), seq=1, user="alice")
    assert validate_batch({"protocol": 1, "runs": [up]})["runs"][0]["id"] == up["id"]


def test_an_end_stamped_before_the_start_goes_at_the_start(store: Store) -> None:
    """The wall clock stepped back during the run (NTP): the upload says it ended when it
    started, which the server accepts, rather than an end the server refuses."""
    run = stored_run(store)
    store.update_run(run.key, ended_at=T0 - 5)
    up = build_upload(store, store.run_by_key(run.key), seq=1, user="alice")
    assert up["ended_at"] == up["started_at"] == T0
    validate_batch({"protocol": 1, "runs": [up]})


def test_the_clients_unknown_status_is_named() -> None:
    with pytest.raises(InvalidBatch, match=r"runs\[0\]\.status: expected one of"):
        validate_batch({"protocol": 1, "runs": [_run("pwned")]})


def _run(status: str) -> dict[str, Any]:
    return {
        "id": "r1", "seq": 1, "final": True, "name": None, "status": status, "exit_code": 0,
        "started_at": T0, "ended_at": T0 + 1, "host": "h", "user": "u", "project": None,
        "tags": {}, "command": [], "summary": None, "meta": {}, "series": [],
    }  # fmt: skip


# -- any stored run -------------------------------------------------------------------------------

# NUL is left out: a store fed through track()'s Python arguments can hold one, and the
# server refuses it (no database keeps it); the client sends it as it is.
_chars = st.characters(blacklist_characters="\x00")
_text = st.text(_chars, max_size=30)
_values = st.one_of(
    st.floats(allow_nan=False, allow_infinity=True),  # the store holds no NaN (NOT NULL)
    st.floats(min_value=-1e12, max_value=1e12),
)


@settings(
    max_examples=20,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    name=st.none() | _text,
    tags=st.dictionaries(st.text(_chars, min_size=1, max_size=20), _text, max_size=5),
    command=st.lists(_text, min_size=1, max_size=4),
    status=st.sampled_from(protocol.RUN_STATUSES),
    start=st.floats(min_value=protocol.EARLIEST_TIME, max_value=time.time() - 2e6),
    end_offset=st.floats(min_value=-3600, max_value=1e6),
    values=st.lists(_values, min_size=1, max_size=40),
    labels=st.dictionaries(st.text(_chars, min_size=1, max_size=10), _text, max_size=3),
    config=st.recursive(
        st.none() | st.booleans() | st.integers() | _values | _text,
        lambda c: st.lists(c, max_size=3) | st.dictionaries(_text, c, max_size=3),
        max_leaves=10,
    ),
)
def test_any_stored_run_uploads_as_the_models_say(
    tmp_path: Path,
    name: str | None,
    tags: dict[str, str],
    command: list[str],
    status: str,
    start: float,
    end_offset: float,
    values: list[float],
    labels: dict[str, str],
    config: Any,
) -> None:
    store = Store.open(tmp_path / f"{uuid.uuid4().hex}.db")
    try:
        key = store.create_run(
            run_id=uuid.uuid4().hex, name=name, tags=tags, command=command, cwd="/tmp",
            mode="run", started_at=start, interval_seconds=1.0, host={"hostname": "box"},
        )  # fmt: skip
        n = len(values)
        store.write_batch(
            key,
            series=[(0, "gauge_x", labels, Kind.GAUGE), (1, "c_total", {}, Kind.COUNTER)],
            ticks=[(i, 100.0 + i, start + i) for i in range(n)],
            samples=[(key, i, 0, v) for i, v in enumerate(values)]
            + [(key, i, 1, abs(v) * i if math.isfinite(v) else 0.0) for i, v in enumerate(values)],
            data_until=start + n,
        )
        store.set_meta(key, "config", {"c": config})
        if status != "running":
            store.update_run(key, status=status, exit_code=1, ended_at=start + end_offset)
        run = store.run_by_key(key)
        up = build_upload(store, run, seq=1, user="alice")
        batch = validate_batch({"protocol": protocol.PROTOCOL_VERSION, "runs": [up]})
        got = batch["runs"][0]
        assert got["status"] == status
        assert got["ended_at"] is None or got["ended_at"] >= got["started_at"]
        assert len(got["series"]) <= 2
    finally:
        store.close()
