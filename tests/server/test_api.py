"""The REST API's contract, on SQLite and on PostgreSQL: auth (401/403), team isolation, admin,
idempotent ingest by id and seq, all-or-nothing batches, protocol versions, oversized and
malformed bodies, cursor pages, filters, sorts, usage with methods, the OpenAPI description,
the login cookie.

The app runs in-process (FastAPI's TestClient) on a real database: a SQLite file or a fresh
database of the session's PostgreSQL cluster; test_api_smoke.py and the fault tests run the real
``computewatch server`` process.
"""

from __future__ import annotations

import gzip
import json
import time
from collections.abc import Callable, Iterator
from typing import Annotated, Any

import pytest
from fastapi import Depends
from fastapi.testclient import TestClient

from computewatch.server.app import create_app
from computewatch.server.auth import Principal, page_principal
from computewatch.serverdb.tokens import create_token
from computewatch.upload.protocol import (
    MAX_BODY_BYTES,
    MAX_RUNS_PER_BATCH,
    PROTOCOL_HEADER,
    RunUpload,
)

RUNS = "/api/v1/runs"


class Api:
    """The app on one database, and tokens made on it."""

    def __init__(self, db_url: str) -> None:
        self.app = create_app(db_url)
        self.client = TestClient(self.app)
        self.client.__enter__()

    def token(self, team: str, scope: str) -> str:
        with self.app.state.db.session() as s:
            token, _ = create_token(s, team=team, scope=scope)
        return token

    def as_(self, token: str | None) -> dict[str, str]:
        return {"Authorization": f"Bearer {token}"} if token else {}

    def post(self, token: str | None, body: Any, **kw: Any) -> Any:
        headers = {**self.as_(token), **kw.pop("headers", {})}
        if isinstance(body, bytes):
            return self.client.post(RUNS, content=body, headers=headers, **kw)
        return self.client.post(RUNS, json=body, headers=headers, **kw)

    def get(self, token: str | None, path: str, **params: Any) -> Any:
        return self.client.get(path, headers=self.as_(token), params=params)

    def close(self) -> None:
        self.client.__exit__(None, None, None)


@pytest.fixture
def api(db_url: str) -> Iterator[Api]:
    a = Api(db_url)
    yield a
    a.close()


def ids(page: dict[str, Any]) -> list[str]:
    return [r["id"] for r in page["runs"]]


# -- auth -----------------------------------------------------------------------------------------


def test_no_token_is_401_and_a_wrong_scope_403(
    api: Api, make_upload: Callable[..., RunUpload], make_batch: Any
) -> None:
    body = make_batch(make_upload())
    r = api.post(None, body)
    assert r.status_code == 401
    assert r.headers["www-authenticate"] == "Bearer"
    assert r.json()["error"] == "unauthorized"
    assert api.get(None, RUNS).status_code == 401
    assert api.get("cw_not-a-token", RUNS).status_code == 401
    assert api.client.get(RUNS, headers={"Authorization": "Basic eDp5"}).status_code == 401
    read = api.token("ml", "read")
    r = api.post(read, body)
    assert r.status_code == 403
    assert "read" in r.json()["detail"]
    assert api.get(read, RUNS).json()["runs"] == []  # nothing was stored by the refusals


def test_teams_see_only_their_runs_and_admin_sees_all(
    api: Api, make_upload: Callable[..., RunUpload], make_batch: Any
) -> None:
    a_ingest, b_ingest = api.token("team-a", "ingest"), api.token("team-b", "ingest")
    a_read, b_read = api.token("team-a", "read"), api.token("team-b", "read")
    admin = api.token("ops", "admin")
    ra, rb = make_upload(), make_upload()
    assert api.post(a_ingest, make_batch(ra)).status_code == 200
    assert api.post(b_ingest, make_batch(rb)).status_code == 200
    assert ids(api.get(a_read, RUNS).json()) == [ra["id"]]
    assert ids(api.get(a_ingest, RUNS).json()) == [ra["id"]]
    assert ids(api.get(b_read, RUNS).json()) == [rb["id"]]
    assert sorted(ids(api.get(admin, RUNS).json())) == sorted([ra["id"], rb["id"]])
    # another team's run is not found, whichever way it is asked for
    assert api.get(a_read, f"{RUNS}/{rb['id']}").status_code == 404
    assert ids(api.get(a_read, RUNS, team="team-b").json()) == []
    assert api.get(admin, f"{RUNS}/{rb['id']}").json()["run"]["team"] == "team-b"
    usage = api.get(a_read, "/api/v1/usage", by="team").json()["rows"]
    assert [r["key"] for r in usage] == ["team-a"]
    teams = {r["key"] for r in api.get(admin, "/api/v1/usage", by="team").json()["rows"]}
    assert teams == {"team-a", "team-b"}
    assert api.get(a_read, "/api/v1/me").json()["teams"] == ["team-a"]
    assert api.get(admin, "/api/v1/me").json()["teams"] is None


def test_the_team_comes_from_the_token_and_a_run_id_cannot_be_taken_over(
    api: Api, make_upload: Callable[..., RunUpload], make_batch: Any
) -> None:
    a, b = api.token("team-a", "ingest"), api.token("team-b", "ingest")
    run = make_upload(team="team-b")  # a field the protocol does not have: ignored
    assert api.post(a, make_batch(run)).status_code == 200
    hijack = make_upload(id=run["id"], seq=2, name="mine now")
    r = api.post(b, make_batch(hijack))
    assert r.status_code == 409
    detail = api.get(a, f"{RUNS}/{run['id']}").json()
    assert detail["run"]["team"] == "team-a"
    assert detail["run"]["name"] == "train"


def test_revoked_token_is_refused(api: Api) -> None:
    token = api.token("ml", "read")
    assert api.get(token, RUNS).status_code == 200
    from computewatch.serverdb.tokens import list_tokens, revoke_token

    with api.app.state.db.session() as s:
        revoke_token(s, list_tokens(s)[0].id)
    assert api.get(token, RUNS).status_code == 401


def test_login_sets_a_strict_http_only_session_cookie(api: Api) -> None:
    token = api.token("ml", "read")
    page = api.client.get("/login")
    assert page.status_code == 200 and 'name="token"' in page.text
    bad = api.client.post("/login", data={"token": "cw_wrong"}, follow_redirects=False)
    assert bad.status_code == 401
    r = api.client.post("/login", data={"token": token, "next": "/runs"}, follow_redirects=False)
    assert r.status_code == 303
    assert r.headers["location"] == "/runs"
    cookie = r.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Secure" not in cookie
    assert token not in cookie
    # the client keeps the cookie: the API answers without a bearer token
    assert api.client.get(RUNS).status_code == 200
    # an open redirect is not possible (sent from the login page, as a browser would)
    own = {"Origin": "http://testserver"}
    r = api.client.post(
        "/login",
        data={"token": token, "next": "//evil.example/"},
        headers=own,
        follow_redirects=False,
    )
    assert r.headers["location"] == "/"
    assert api.client.post("/logout", headers=own, follow_redirects=False).status_code == 303
    api.client.cookies.clear()
    assert api.client.get(RUNS).status_code == 401


# -- ingest ---------------------------------------------------------------------------------------


def test_ingest_is_idempotent_by_id_and_seq(
    api: Api, make_upload: Callable[..., RunUpload], make_batch: Any
) -> None:
    token = api.token("ml", "ingest")
    run1 = make_upload(seq=1, status="running", final=False, ended_at=None)
    r = api.post(token, make_batch(run1)).json()
    assert r["results"] == [{"id": run1["id"], "seq": 1, "stored": True}]
    again = api.post(token, make_batch(run1)).json()
    assert again["results"] == [{"id": run1["id"], "seq": 1, "stored": False}]
    run3 = make_upload(id=run1["id"], seq=3, status="completed")
    assert api.post(token, make_batch(run3)).json()["results"][0]["stored"] is True
    run2 = make_upload(id=run1["id"], seq=2, status="running", final=False, ended_at=None)
    assert api.post(token, make_batch(run2)).json()["results"][0]["stored"] is False
    page = api.get(token, RUNS).json()
    assert len(page["runs"]) == 1
    assert page["runs"][0]["seq"] == 3
    assert page["runs"][0]["status"] == "completed"
    assert page["runs"][0]["final"] is True
    # one batch with the same run twice: the first stored, the repeat not
    run5 = make_upload(id=run1["id"], seq=5)
    results = api.post(token, make_batch(run5, run5)).json()["results"]
    assert [x["stored"] for x in results] == [True, False]


def test_a_batch_is_all_or_nothing(
    api: Api, make_upload: Callable[..., RunUpload], make_batch: Any
) -> None:
    token = api.token("ml", "ingest")
    good = make_upload()
    bad = make_upload()
    bad["seq"] = "two"  # type: ignore[typeddict-item]
    r = api.post(token, make_batch(good, bad))
    assert r.status_code == 422
    assert r.json()["detail"].startswith("runs[1].seq:")
    assert api.get(token, RUNS).json()["runs"] == []
    # a run id held by another team refuses the whole batch, the good run included
    other = api.token("other", "ingest")
    theirs = make_upload()
    api.post(other, make_batch(theirs))
    r = api.post(token, make_batch(good, make_upload(id=theirs["id"], seq=9)))
    assert r.status_code == 409
    assert api.get(token, RUNS).json()["runs"] == []


@pytest.mark.parametrize("db", ["sqlite"], indirect=True)  # checked before the database
@pytest.mark.parametrize(
    ("version", "upgrade"), [(2, "server"), (0, "client"), ("one", "client"), (None, "client")]
)
def test_a_protocol_the_server_does_not_speak_is_refused_with_which_side_to_upgrade(
    api: Api,
    make_upload: Callable[..., RunUpload],
    make_batch: Any,
    version: Any,
    upgrade: str,
) -> None:
    token = api.token("ml", "ingest")
    body = make_batch(make_upload())
    body["protocol"] = version
    r = api.post(token, body)
    assert r.status_code == 400
    doc = r.json()
    assert doc["error"] == "protocol"
    assert doc["supported_protocols"] == [1]
    assert doc["upgrade"] == upgrade
    assert f"upgrade the {upgrade}" in doc["detail"] or upgrade == "client"
    # the header says it before the body is read
    r = api.post(token, make_batch(make_upload()), headers={PROTOCOL_HEADER: "7"})
    assert r.status_code == 400 and r.json()["upgrade"] == "server"
    assert api.get(token, RUNS).json()["runs"] == []


def test_oversized_bodies_are_413_and_nothing_is_stored(
    api: Api, make_upload: Callable[..., RunUpload], make_batch: Any
) -> None:
    token = api.token("ml", "ingest")
    run = make_upload(meta={"blob": "x" * (MAX_BODY_BYTES + 10)})
    body = json.dumps(make_batch(run)).encode()
    r = api.post(token, body, headers={"Content-Type": "application/json"})
    assert r.status_code == 413
    assert r.json()["max_bytes"] == MAX_BODY_BYTES
    # a small gzip body that inflates past the limit
    r = api.post(
        token,
        gzip.compress(body),
        headers={"Content-Type": "application/json", "Content-Encoding": "gzip"},
    )
    assert r.status_code == 413
    # too many runs in one batch
    many = make_batch(*[make_upload() for _ in range(MAX_RUNS_PER_BATCH + 1)])
    r = api.post(token, many)
    assert r.status_code == 422 and "more than" in r.json()["detail"]
    assert api.get(token, RUNS).json()["runs"] == []


def test_gzip_bodies_are_accepted(
    api: Api, make_upload: Callable[..., RunUpload], make_batch: Any
) -> None:
    token = api.token("ml", "ingest")
    run = make_upload()
    body = gzip.compress(json.dumps(make_batch(run)).encode())
    r = api.post(token, body, headers={"Content-Encoding": "gzip"})
    assert r.status_code == 200, r.text
    assert api.post(token, b"\x1f\x8bnot", headers={"Content-Encoding": "gzip"}).status_code == 422
    assert api.post(token, b"{}", headers={"Content-Encoding": "br"}).status_code == 415


@pytest.mark.parametrize("db", ["sqlite"], indirect=True)  # checked before the database
@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"not json", "not valid JSON"),
        (b"[1, 2]", "expected a JSON object"),
        (b'{"runs": []}', "protocol: missing"),
        (b'{"protocol": 1, "runs": {}}', "runs: expected a list"),
        (b'{"protocol": 1, "runs": [42]}', "runs[0]: expected an object"),
        (b'{"protocol": 1, "runs": [{"id": "x"}]}', "runs[0].seq"),
        (b'{"protocol": 1, "runs": [NaN]}', "not valid JSON"),
        (b"[" * 100_000, "JSON"),
    ],
)
def test_malformed_bodies_are_422_with_a_reason(api: Api, body: bytes, reason: str) -> None:
    token = api.token("ml", "ingest")
    r = api.post(token, body, headers={"Content-Type": "application/json"})
    assert r.status_code == 422, r.text
    assert r.json()["error"] == "invalid"
    assert reason in r.json()["detail"]


@pytest.mark.parametrize("db", ["sqlite"], indirect=True)  # checked before the database
@pytest.mark.parametrize(
    ("field", "value", "reason"),
    [
        ("id", "../../etc", "runs[0].id"),
        ("id", "", "runs[0].id"),
        ("seq", 0, "runs[0].seq: out of range"),
        ("seq", 2**64, "runs[0].seq: out of range"),
        ("seq", True, "runs[0].seq: expected a whole number"),
        ("final", "yes", "runs[0].final"),
        ("started_at", -5, "runs[0].started_at"),
        ("started_at", 1e300, "runs[0].started_at"),
        ("tags", {"k": 1}, "runs[0].tags.k"),
        ("command", ["ok", 3], "runs[0].command"),
        ("name", "a\x00b", "NUL"),
        ("user", "\ud800", "surrogate"),
        ("summary", [1], "runs[0].summary"),
        (
            "series",
            [{"name": "x", "labels": {}, "bucket_seconds": 1, "points": [[1, 2]]}],
            "points",
        ),
    ],
)
def test_bad_fields_are_named(
    api: Api,
    make_upload: Callable[..., RunUpload],
    make_batch: Any,
    field: str,
    value: Any,
    reason: str,
) -> None:
    token = api.token("ml", "ingest")
    run: dict[str, Any] = dict(make_upload())
    run[field] = value
    body = json.dumps(make_batch(run)).encode()
    r = api.post(token, body, headers={"Content-Type": "application/json"})
    assert r.status_code == 422, r.text
    assert reason in r.json()["detail"]
    assert api.get(token, RUNS).json()["runs"] == []


def test_secrets_in_command_lines_are_redacted_again_on_ingest(
    api: Api, make_upload: Callable[..., RunUpload], make_batch: Any
) -> None:
    token = api.token("ml", "ingest")
    run = make_upload(
        command=["python", "train.py", "--api-token", "s3cr3t", "--db=postgres://u:pw@h/d"],
        tags={"wandb_api_key": "abc123", "env": "prod"},
    )
    run["summary"]["command"] = list(run["command"])  # type: ignore[index]
    assert api.post(token, make_batch(run)).status_code == 200
    doc = api.get(token, f"{RUNS}/{run['id']}").json()
    text = json.dumps(doc)
    assert "s3cr3t" not in text and ":pw@" not in text and "abc123" not in text
    assert doc["command"][3] == "***"
    assert doc["run"]["tags"] == {"wandb_api_key": "***", "env": "prod"}


# -- reading --------------------------------------------------------------------------------------


def _fill(api: Api, token: str, make_upload: Callable[..., RunUpload], n: int) -> list[RunUpload]:
    runs = []
    base = time.time() - 30 * 86400
    for i in range(n):
        runs.append(
            make_upload(
                started_at=base + i * 600,
                duration=60.0 * (i % 7 + 1),
                name=f"run-{i:03d}",
                user=("alice", "bob", "carol")[i % 3],
                project=("llm", "vision", None)[i % 3],
                tags={"env": ("prod", "dev")[i % 2], "seed": str(i)},
                status=("completed", "failed")[int(i % 5 == 0)],
                kwh=None if i % 4 == 0 else 0.1 * i,
                cost=1.0 + (i % 10),
                gpu_model=("H100-SXM5-80GB", "A100-SXM4-80GB")[i % 2],
            )
        )
    for k in range(0, n, MAX_RUNS_PER_BATCH):
        r = api.post(token, {"protocol": 1, "runs": runs[k : k + MAX_RUNS_PER_BATCH]})
        assert r.status_code == 200, r.text
    return runs


def test_cursor_pages_cover_every_run_once(api: Api, make_upload: Callable[..., RunUpload]) -> None:
    token = api.token("ml", "ingest")
    runs = _fill(api, token, make_upload, 230)
    for sort in ("started_at", "energy", "name", "duration"):
        for order in ("asc", "desc"):
            seen: list[str] = []
            cursor = None
            pages = 0
            while True:
                params: dict[str, Any] = {"limit": 50, "sort": sort, "order": order}
                if cursor:
                    params["cursor"] = cursor
                page = api.get(token, RUNS, **params).json()
                seen += ids(page)
                pages += 1
                cursor = page["next_cursor"]
                if cursor is None:
                    break
            assert pages == 5
            assert sorted(seen) == sorted(r["id"] for r in runs), (sort, order)
            assert len(seen) == len(set(seen))
    newest = api.get(token, RUNS, limit=3).json()
    assert [r["name"] for r in newest["runs"]] == ["run-229", "run-228", "run-227"]
    by_energy = api.get(token, RUNS, sort="energy", order="desc", limit=2).json()["runs"]
    assert by_energy[0]["kwh"] == pytest.approx(0.1 * 229)
    assert api.get(token, RUNS, limit=501).status_code == 422
    assert api.get(token, RUNS, limit=500).status_code == 200
    assert api.get(token, RUNS, cursor="garbage").status_code == 400
    other_sort = api.get(token, RUNS, limit=5).json()["next_cursor"]
    assert api.get(token, RUNS, cursor=other_sort, sort="name").status_code == 400
    assert api.get(token, RUNS, sort="colour").status_code == 400


def test_filters(api: Api, make_upload: Callable[..., RunUpload]) -> None:
    token = api.token("ml", "ingest")
    runs = _fill(api, token, make_upload, 60)

    def names(**params: Any) -> set[str]:
        r = api.get(token, RUNS, limit=500, **params)
        assert r.status_code == 200, r.text
        return {x["name"] for x in r.json()["runs"]}

    def expect(pred: Callable[[RunUpload], bool]) -> set[str]:
        return {str(r["name"]) for r in runs if pred(r)}

    assert names(user="bob") == expect(lambda r: r["user"] == "bob")
    assert names(project="vision") == expect(lambda r: r["project"] == "vision")
    assert names(status="failed") == expect(lambda r: r["status"] == "failed")
    assert names(tag="env=dev") == expect(lambda r: r["tags"]["env"] == "dev")
    assert names(tag=["env=dev", "seed=7"]) == {"run-007"}
    assert names(q="RUN-01") == {f"run-01{i}" for i in range(10)}
    assert names(q="%") == set()
    cut = runs[40]["started_at"]
    assert names(since=str(cut)) == expect(lambda r: r["started_at"] >= cut)
    assert names(until=str(cut)) == expect(lambda r: r["started_at"] < cut)
    assert names(since="2000-01-01", until="2000-01-02") == set()
    assert names(since="3650d") == expect(lambda r: True)
    assert api.get(token, RUNS, since="yesterday").status_code == 400
    assert api.get(token, RUNS, tag="novalue").status_code == 400


def test_run_detail_has_summary_accounting_configuration_and_series(
    api: Api, make_upload: Callable[..., RunUpload], make_batch: Any
) -> None:
    token = api.token("ml", "ingest")
    run = make_upload(gpus=2, utilization=0.25, duration=7200.0)
    run["summary"]["diagnosis"] = {"findings": [{"kind": "input-bound"}]}  # type: ignore[index]
    api.post(token, make_batch(run))
    d = api.get(token, f"{RUNS}/{run['id']}").json()
    assert set(d) == {
        "run", "command", "summary", "accounting", "diagnosis", "configuration", "meta", "series",
        "signature",
    }  # fmt: skip
    assert d["signature"] == {"status": "unsigned", "key_id": None}
    assert d["run"]["gpu_count"] == 2
    assert d["run"]["gpu_hours"] == pytest.approx(4.0)
    assert d["run"]["idle_gpu_hours"] == pytest.approx(3.0)
    assert d["run"]["gpu_utilization"] == pytest.approx(0.25)
    assert d["run"]["co2e_kg"] == pytest.approx(0.3)
    assert d["run"]["cpu_hours"] == pytest.approx(0.5)
    assert d["accounting"]["energy"]["facility"]["value"] == 1.0
    assert d["diagnosis"] == {"findings": [{"kind": "input-bound"}]}
    assert d["configuration"] == {"lr": 0.001}
    assert d["series"][0]["points"][0][2] == 0.25
    assert api.get(token, f"{RUNS}/nope").status_code == 404


def test_usage_sums_with_methods_and_ranges(
    api: Api, make_upload: Callable[..., RunUpload], make_batch: Any
) -> None:
    token = api.token("ml", "ingest")
    now = time.time()
    a = make_upload(started_at=now - 7200, duration=3600.0, gpus=2, utilization=0.5, user="a")
    b = make_upload(started_at=now - 5000, duration=1800.0, gpus=1, utilization=1.0, user="a")
    c = make_upload(started_at=now - 4000, duration=3600.0, kwh=None, cost=None, user="b")
    old = make_upload(started_at=now - 40 * 86400, user="a")
    api.post(token, make_batch(a, b, c, old))
    doc = api.get(token, "/api/v1/usage", by="user", since="30d").json()
    rows = {r["key"]: r for r in doc["rows"]}
    assert set(rows) == {"a", "b"}
    ra = rows["a"]
    assert ra["runs"] == 2
    assert ra["gpu_hours"]["value"] == pytest.approx(2.5)
    assert ra["gpu_hours"]["methods"] == ["allocated GPUs x wall time"]
    assert ra["idle_gpu_hours"]["value"] == pytest.approx(1.0)
    assert ra["kwh"] == {
        "value": pytest.approx(2.0),
        "low": pytest.approx(1.6),
        "high": pytest.approx(2.4),
        "methods": ["measured"],
        "runs_with_value": 2,
    }
    assert ra["cost_usd"]["methods"] == ["estimated"]
    assert ra["co2e_kg"]["value"] == pytest.approx(0.6)
    assert ra["co2e_kg"]["low"] == pytest.approx(0.3)
    assert ra["cpu_hours"]["methods"] == ["cgroup"]
    assert ra["mean_utilization"] == pytest.approx((0.5 * 2 + 1.0 * 0.5) / 2.5)
    assert ra["mean_mfu"] is None
    rb = rows["b"]
    assert rb["kwh"]["value"] is None and rb["kwh"]["runs_with_value"] == 0
    everything = api.get(token, "/api/v1/usage", by="gpu-model").json()["rows"]
    assert sum(r["runs"] for r in everything) == 4
    days = api.get(token, "/api/v1/usage", by="team", bucket="day").json()["rows"]
    assert sum(r["runs"] for r in days) == 4 and len({r["bucket"] for r in days}) >= 2
    months = api.get(token, "/api/v1/usage", by="team", bucket="month").json()["rows"]
    assert all(r["bucket"].endswith("-01") for r in months)
    assert api.get(token, "/api/v1/usage", by="colour").status_code == 400
    assert api.get(token, "/api/v1/usage", by="team", bucket="hour").status_code == 400


def test_running_now(api: Api, make_upload: Callable[..., RunUpload], make_batch: Any) -> None:
    token = api.token("ml", "ingest")
    live = make_upload(status="running", final=False, ended_at=None)
    done = make_upload()
    api.post(token, make_batch(live, done))
    assert [r["id"] for r in api.get(token, "/api/v1/running").json()["runs"]] == [live["id"]]


def test_openapi_is_served_and_names_every_route(api: Api) -> None:
    doc = api.client.get("/api/v1/openapi.json").json()
    paths = doc["paths"]
    for p in ("/api/v1/runs", "/api/v1/runs/{run_id}", "/api/v1/usage", "/api/v1/events"):
        assert p in paths, p
    body = paths["/api/v1/runs"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert body["properties"]["runs"]["maxItems"] == MAX_RUNS_PER_BATCH
    run_row = doc["components"]["schemas"]["RunRow"]["properties"]
    assert {"gpu_hours", "kwh", "cost_usd", "co2e_kg", "seq", "final"} <= set(run_row)
    assert api.client.get("/api/v1/docs").status_code == 200


def test_pages_redirect_an_unauthenticated_browser_to_login(api: Api) -> None:
    def probe(principal: Annotated[Principal, Depends(page_principal)]) -> dict[str, str]:
        return {"team": principal.team}

    api.app.add_api_route("/probe", probe)
    r = api.client.get("/probe?x=1", follow_redirects=False)
    assert r.status_code == 303
    assert r.headers["location"] == "/login?next=/probe%3Fx%3D1"
    token = api.token("ml", "read")
    assert api.client.get("/probe", headers=api.as_(token)).json() == {"team": "ml"}
