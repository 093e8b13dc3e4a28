"""``POST /api/v1/runs`` checks a batch against the protocol's models (computewatch.upload.schema)
and describes it with the same models in the OpenAPI document: an unknown status, an end before
the start, a time no clock could give or a number that is not finite is refused with 422 naming
the field, and nothing of the batch is stored. The governance routes describe their answers.

The checks come before the database: these tests run on SQLite only.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from tests.server.conftest import batch, synthetic_upload

from computewatch.server.app import create_app
from computewatch.serverdb.tokens import create_token
from computewatch.upload.protocol import EARLIEST_TIME, RUN_STATUSES, RunUpload
from computewatch.upload.schema import batch_json_schema

pytestmark = pytest.mark.parametrize("db", ["sqlite"], indirect=True)

RUNS = "/api/v1/runs"
DAY = 86_400.0


class Server:
    def __init__(self, db_url: str) -> None:
        self.app = create_app(db_url)
        self.client = TestClient(self.app)
        self.client.__enter__()
        with self.app.state.db.session() as s:
            self.token, _ = create_token(s, team="ml", scope="admin")
        self.headers = {"Authorization": f"Bearer {self.token}"}

    def post(self, *runs: RunUpload | dict[str, Any]) -> Any:
        body = json.dumps(batch(*runs)).encode()  # type: ignore[arg-type]
        headers = {**self.headers, "Content-Type": "application/json"}
        return self.client.post(RUNS, content=body, headers=headers)

    def runs(self, **params: str) -> list[dict[str, Any]]:
        r = self.client.get(RUNS, headers=self.headers, params=params)
        assert r.status_code == 200, r.text
        runs: list[dict[str, Any]] = r.json()["runs"]
        return runs

    def refused(self, r: Any, field: str) -> str:
        """The 422 answer's detail, after checking it is the API's error naming ``field``."""
        assert r.status_code == 422, r.text
        doc = r.json()
        assert doc["error"] == "invalid", doc
        named = f"runs[0].{field}"
        assert doc["detail"].startswith(named) and doc["detail"][len(named)] in ":.[", doc
        assert self.runs() == []
        detail: str = doc["detail"]
        return detail


@pytest.fixture
def server(db_url: str) -> Iterator[Server]:
    s = Server(db_url)
    yield s
    s.client.__exit__(None, None, None)


def test_an_unknown_status_is_refused_and_never_listed(server: Server) -> None:
    detail = server.refused(server.post(synthetic_upload(status="pwned")), "status")
    assert "'pwned'" in detail and all(s in detail for s in RUN_STATUSES)
    assert server.runs(status="pwned") == []


def test_a_batch_with_one_bad_run_stores_none(server: Server) -> None:
    good = synthetic_upload()
    bad = synthetic_upload(status="pwned")
    r = server.post(good, bad)
    assert r.status_code == 422 and r.json()["detail"].startswith("runs[1].status:")
    assert server.runs() == []


@pytest.mark.parametrize("status", RUN_STATUSES)
def test_every_documented_status_is_accepted(server: Server, status: str) -> None:
    running = status == "running"
    up = synthetic_upload(status=status, final=not running)
    if running:
        up["ended_at"] = None
    assert server.post(up).status_code == 200
    assert [r["status"] for r in server.runs(status=status)] == [status]


def test_an_end_before_the_start_is_refused(server: Server) -> None:
    up = synthetic_upload(started_at=time.time() - 3600)
    up["ended_at"] = up["started_at"] - 1.0
    detail = server.refused(server.post(up), "ended_at")
    assert "before started_at" in detail


def test_an_end_at_the_start_is_accepted(server: Server) -> None:
    up = synthetic_upload(started_at=time.time() - 3600, duration=0.0)
    up["ended_at"] = up["started_at"]
    assert server.post(up).status_code == 200


@pytest.mark.parametrize(
    ("field", "value", "said"),
    [
        ("started_at", lambda now: 0.0, "before 2000-01-01"),
        ("started_at", lambda now: EARLIEST_TIME - 1, "before 2000-01-01"),
        ("started_at", lambda now: now + 2 * DAY, "ahead of the server's clock"),
        ("ended_at", lambda now: now + 2 * DAY, "ahead of the server's clock"),
        ("started_at", lambda now: 1e300, "ahead of the server's clock"),
    ],
    ids=["epoch", "1999", "start-in-2-days", "end-in-2-days", "1e300"],
)
def test_times_no_clock_could_give_are_refused(
    server: Server, field: str, value: Callable[[float], float], said: str
) -> None:
    up: dict[str, Any] = dict(synthetic_upload())
    up[field] = value(time.time())
    assert said in server.refused(server.post(up), field)


def test_times_at_the_edges_are_accepted(server: Server) -> None:
    old = synthetic_upload(started_at=EARLIEST_TIME, duration=60.0)
    soon = synthetic_upload(status="running", final=False)
    soon["started_at"] = time.time() + DAY / 2  # a client clock half a day ahead
    soon["ended_at"] = None
    assert server.post(old, soon).status_code == 200
    assert len(server.runs()) == 2


def test_numbers_that_are_not_finite_are_refused(server: Server) -> None:
    up = synthetic_upload()
    body = json.dumps(batch(up)).replace('"duration_seconds": 3600.0', '"duration_seconds": 1e400')
    assert "1e400" in body
    r = server.client.post(
        RUNS, content=body.encode(), headers={**server.headers, "Content-Type": "application/json"}
    )
    assert server.refused(r, "summary").startswith("runs[0].summary.duration_seconds:")


def test_older_clients_shapes_are_still_accepted(server: Server) -> None:
    """A series without ``kind``, a run without ``signed_report`` or with it null, and fields
    this server does not know (additive within protocol 1)."""
    a = synthetic_upload()
    b: dict[str, Any] = dict(synthetic_upload())
    b["signed_report"] = None
    b["a_field_from_a_newer_client"] = {"x": 1}
    assert "kind" not in a["series"][0]
    assert server.post(a, b).status_code == 200
    assert len(server.runs()) == 2


# -- the OpenAPI description ----------------------------------------------------------------------


def _without_nulls(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _without_nulls(v) for k, v in node.items() if v is not None}
    if isinstance(node, list):
        return [_without_nulls(v) for v in node]
    return node


def _openapi(server: Server) -> dict[str, Any]:
    doc: dict[str, Any] = server.client.get("/api/v1/openapi.json").json()
    return doc


def test_the_upload_body_is_described_by_the_models(server: Server) -> None:
    op = _openapi(server)["paths"][RUNS]["post"]
    body = op["requestBody"]["content"]["application/json"]["schema"]
    assert body == _without_nulls(batch_json_schema())  # the OpenAPI document drops nulls
    run = body["properties"]["runs"]["items"]
    assert run["properties"]["status"]["enum"] == list(RUN_STATUSES)
    assert "ended_at" in run["required"] and "signed_report" not in run["required"]
    started = run["properties"]["started_at"]
    assert started["minimum"] == EARLIEST_TIME and started["type"] == "number"
    assert "$ref" not in json.dumps(body)  # stands alone inside the operation
    assert op["requestBody"]["required"] is True


GOVERNANCE_ROUTES = [
    ("/api/v1/governance/status", "get", "ModelStatusOut"),
    ("/api/v1/governance/models/{model}/report", "get", "ModelReportOut"),
    ("/api/v1/governance/obligations/{obligation}/done", "post", "ObligationDoneOut"),
    ("/api/v1/accounts/{account}/check", "post", "CheckOut"),
]


@pytest.mark.parametrize(("path", "method", "model"), GOVERNANCE_ROUTES)
def test_the_governance_answers_are_described(
    server: Server, path: str, method: str, model: str
) -> None:
    doc = _openapi(server)
    schema = doc["paths"][path][method]["responses"]["200"]["content"]["application/json"]
    ref = schema["schema"]
    ref = ref.get("items", ref)
    assert ref == {"$ref": f"#/components/schemas/{model}"}
    props = doc["components"]["schemas"][model]["properties"]
    assert len(props) >= 5
    for name, prop in props.items():
        assert prop.get("type") or prop.get("anyOf") or prop.get("$ref"), (model, name)
