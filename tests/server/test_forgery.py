"""Forged browser requests are refused (computewatch.server.forgery): a state-changing request
carried by the session cookie must come from the server's own origin, be JSON under /api/, and
(pages) carry the form's token; /login checks the origin too; logout is POST only. Bearer-token
requests are unaffected.

The app runs in-process on SQLite (FastAPI's TestClient, whose origin is http://testserver);
tests/server/web/test_forgery.py replays the attacks from real pages in Chromium.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from computewatch.server.app import create_app
from computewatch.server.forgery import parse_origin
from computewatch.serverdb.tokens import create_token
from computewatch.upload.protocol import RunUpload

sqlite_only = pytest.mark.parametrize("db", ["sqlite"], indirect=True)

OWN = "http://testserver"
ATTACKER = "http://127.0.0.1:38999"
RUNS = "/api/v1/runs"


class Browserish:
    """A TestClient logged in through /login: it holds the session cookie, as a browser does."""

    def __init__(self, db_url: str, **app_kw: Any) -> None:
        self.app = create_app(db_url, **app_kw)
        self.client = TestClient(self.app)
        self.client.__enter__()
        with self.app.state.db.session() as s:
            self.ingest_token, _ = create_token(s, team="victims", scope="ingest")
            self.attacker_token, _ = create_token(s, team="attackers", scope="ingest")
        r = self.client.post(
            "/login", data={"token": self.ingest_token, "next": "/"}, follow_redirects=False
        )
        assert r.status_code == 303, r.text
        assert self.client.cookies.get("computewatch_session")

    def stored(self, run_id: str) -> bool:
        r = self.client.get(
            f"{RUNS}/{run_id}", headers={"Authorization": f"Bearer {self.ingest_token}"}
        )
        return r.status_code == 200

    def me(self) -> Any:
        return self.client.get("/api/v1/me")

    def close(self) -> None:
        self.client.__exit__(None, None, None)


@pytest.fixture
def browserish(db_url: str) -> Iterator[Browserish]:
    b = Browserish(db_url)
    yield b
    b.close()


def _body(make_upload: Callable[..., RunUpload], make_batch: Any, run_id: str) -> bytes:
    return json.dumps(make_batch(make_upload(id=run_id))).encode()


@sqlite_only
def test_a_text_plain_upload_from_another_port_is_refused_and_not_stored(
    browserish: Browserish, make_upload: Callable[..., RunUpload], make_batch: Any
) -> None:
    # What a form auto-submitted from another program's page on the same host sends: the
    # SameSite=Strict cookie goes along (same site: the port does not count).
    r = browserish.client.post(
        RUNS,
        content=_body(make_upload, make_batch, "csrf-port"),
        headers={"Content-Type": "text/plain", "Origin": ATTACKER, "Sec-Fetch-Site": "same-site"},
    )
    assert r.status_code == 403, r.text
    assert "another site or origin" in r.json()["detail"]
    assert not browserish.stored("csrf-port")


@sqlite_only
def test_origin_alone_decides_when_the_browser_sends_no_fetch_metadata(
    browserish: Browserish, make_upload: Callable[..., RunUpload], make_batch: Any
) -> None:
    r = browserish.client.post(
        RUNS,
        content=_body(make_upload, make_batch, "csrf-origin"),
        headers={"Content-Type": "application/json", "Origin": ATTACKER},
    )
    assert r.status_code == 403 and "another origin" in r.json()["detail"], r.text
    r = browserish.client.post(
        RUNS,
        content=_body(make_upload, make_batch, "csrf-null"),
        headers={"Content-Type": "application/json", "Origin": "null"},
    )
    assert r.status_code == 403, r.text
    assert not browserish.stored("csrf-origin") and not browserish.stored("csrf-null")


@sqlite_only
def test_a_cookie_request_with_no_origin_at_all_is_refused(
    browserish: Browserish, make_upload: Callable[..., RunUpload], make_batch: Any
) -> None:
    r = browserish.client.post(
        RUNS,
        content=_body(make_upload, make_batch, "csrf-none"),
        headers={"Content-Type": "application/json"},
    )
    assert r.status_code == 403, r.text
    assert "neither Origin nor Sec-Fetch-Site" in r.json()["detail"]
    assert not browserish.stored("csrf-none")


@sqlite_only
def test_the_api_takes_only_json_from_a_cookie_even_from_its_own_origin(
    browserish: Browserish, make_upload: Callable[..., RunUpload], make_batch: Any
) -> None:
    body = _body(make_upload, make_batch, "same-origin-plain")
    r = browserish.client.post(
        RUNS, content=body, headers={"Content-Type": "text/plain", "Origin": OWN}
    )
    assert r.status_code == 403 and "application/json" in r.json()["detail"], r.text
    r = browserish.client.post(
        RUNS,
        content=_body(make_upload, make_batch, "same-origin-json"),
        headers={
            "Content-Type": "application/json",
            "Origin": OWN,
            "Sec-Fetch-Site": "same-origin",
        },
    )
    assert r.status_code == 200, r.text
    assert browserish.stored("same-origin-json") and not browserish.stored("same-origin-plain")


@sqlite_only
def test_bearer_requests_are_unaffected(
    browserish: Browserish, make_upload: Callable[..., RunUpload], make_batch: Any
) -> None:
    # A script with a token: no Origin, and even a foreign one changes nothing (no cookie is
    # used when a token is given, so there is nothing to forge).
    plain = TestClient(browserish.app)
    r = plain.post(
        RUNS,
        content=_body(make_upload, make_batch, "bearer-1"),
        headers={"Authorization": f"Bearer {browserish.ingest_token}"},
    )
    assert r.status_code == 200, r.text
    r = browserish.client.post(
        RUNS,
        content=_body(make_upload, make_batch, "bearer-2"),
        headers={
            "Authorization": f"Bearer {browserish.ingest_token}",
            "Origin": ATTACKER,
            "Content-Type": "text/plain",
        },
    )
    assert r.status_code == 200, r.text
    assert browserish.stored("bearer-1") and browserish.stored("bearer-2")


@sqlite_only
def test_a_login_posted_from_another_origin_is_refused(browserish: Browserish) -> None:
    # Login CSRF: the attacker's page logs the victim's browser into the attacker's team.
    r = browserish.client.post(
        "/login",
        data={"token": browserish.attacker_token, "next": "/"},
        headers={"Origin": ATTACKER},
        follow_redirects=False,
    )
    assert r.status_code == 403, r.text
    assert browserish.me().json()["team"] == "victims"
    r = browserish.client.post(
        "/login",
        data={"token": browserish.attacker_token, "next": "/"},
        headers={"Sec-Fetch-Site": "cross-site"},
        follow_redirects=False,
    )
    assert r.status_code == 403, r.text
    assert browserish.me().json()["team"] == "victims"
    # from its own page, a login goes through
    r = browserish.client.post(
        "/login",
        data={"token": browserish.attacker_token, "next": "/"},
        headers={"Origin": OWN},
        follow_redirects=False,
    )
    assert r.status_code == 303, r.text
    assert browserish.me().json()["team"] == "attackers"


@sqlite_only
def test_logout_is_post_only_and_checked(browserish: Browserish) -> None:
    # an <img src=/logout> on any page sends a GET: it must not log out
    r = browserish.client.get("/logout", follow_redirects=False)
    assert r.status_code == 200 and 'method="post"' in r.text
    assert browserish.me().status_code == 200
    r = browserish.client.post("/logout", headers={"Origin": ATTACKER}, follow_redirects=False)
    assert r.status_code == 403
    assert browserish.me().status_code == 200
    r = browserish.client.post("/logout", headers={"Origin": OWN}, follow_redirects=False)
    assert r.status_code == 303
    assert browserish.me().status_code == 401


@sqlite_only
def test_an_allowed_origin_counts_as_the_servers_own(
    db_url: str, make_upload: Callable[..., RunUpload], make_batch: Any
) -> None:
    # A proxy that rewrites Host: its public origin is named with --allowed-origin.
    b = Browserish(db_url, allowed_origins=["https://cw.example.org"])
    try:
        r = b.client.post(
            RUNS,
            content=_body(make_upload, make_batch, "via-proxy"),
            headers={"Content-Type": "application/json", "Origin": "https://cw.example.org"},
        )
        assert r.status_code == 200, r.text
        r = b.client.post(
            RUNS,
            content=_body(make_upload, make_batch, "via-other"),
            headers={"Content-Type": "application/json", "Origin": "https://cw.example.org:444"},
        )
        assert r.status_code == 403, r.text
    finally:
        b.close()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("http://127.0.0.1:8765", ("http", "127.0.0.1", 8765)),
        ("HTTPS://CW.Example.org", ("https", "cw.example.org", 443)),
        ("http://[::1]:80", ("http", "::1", 80)),
        ("null", None),
        ("file://", None),
        ("http://host:99999", None),
    ],
)
def test_origins_compare_by_scheme_host_and_port(
    text: str, expected: tuple[str, str, int] | None
) -> None:
    assert parse_origin(text) == expected
