"""Event streams hold nothing they do not need: a bad ``Last-Event-ID`` is a 400 (not a 500),
every subscription ends with its stream (``/healthz`` counts them), streams and slow bodies hold
no database connection, a client that goes away mid-upload is one log line, and a server whose
connections are all taken answers 429 with ``Retry-After`` at once.

Real ``computewatch server`` processes on SQLite (tests/server/conftest.py), except the pool
test, which runs the app in-process on a pool of one connection.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy.exc import TimeoutError as SqlTimeout
from tests.server.test_events import EventReader

from computewatch.server.app import create_app
from computewatch.serverdb.engine import open_database, upgrade
from computewatch.serverdb.tokens import create_token
from computewatch.upload.protocol import RunUpload

pytestmark = pytest.mark.parametrize("db", ["sqlite"], indirect=True)


def _streams(client: httpx.Client) -> int:
    r = client.get("/healthz")
    assert r.status_code == 200, r.text
    n: int = r.json()["event_streams"]
    return n


def _wait_streams(client: httpx.Client, n: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while _streams(client) != n:
        if time.monotonic() > deadline:
            pytest.fail(f"{_streams(client)} event streams, expected {n}")
        time.sleep(0.05)


@pytest.mark.parametrize(
    "bad", [b"99999999999999999999", b"-1", b"12a", b"\xb2", b"1" * 400], ids=repr
)
def test_a_bad_last_event_id_is_400_and_subscribes_nothing(
    server: Callable[..., Any], bad: bytes
) -> None:
    s = server()
    reader = s.client(s.token("a", "read"))
    r = reader.get("/api/v1/events", headers={"Last-Event-ID": bad})
    assert r.status_code == 400, r.text
    assert "Last-Event-ID" in r.json()["detail"]
    assert _streams(s.client()) == 0
    assert "Traceback" not in s.output()


def test_every_subscription_ends_with_its_stream(server: Callable[..., Any]) -> None:
    s = server()
    token = s.token("a", "read")
    readers = [EventReader(s.url, token) for _ in range(3)]
    readers.append(EventReader(s.url, token, headers={"Last-Event-ID": "0"}))
    try:
        assert all(r.status == 200 for r in readers)
        _wait_streams(s.client(), 4)
    finally:
        for r in readers:
            r.close()
    _wait_streams(s.client(), 0)


def test_many_streams_hold_no_connection(
    server: Callable[..., Any], make_upload: Callable[..., RunUpload], make_batch: Any
) -> None:
    # More open streams than the pool has connections (16 + 16): every other call still goes.
    s = server()
    token = s.token("a", "ingest")
    readers = [EventReader(s.url, token) for _ in range(40)]
    try:
        api = s.client(token, timeout=20)
        assert api.get("/healthz").status_code == 200
        assert api.get("/api/v1/me").status_code == 200
        r = api.post("/api/v1/runs", json=make_batch(make_upload(id="while-streaming")))
        assert r.status_code == 200, r.text
        assert readers[0].next()["id"] == "while-streaming"
    finally:
        for r in readers:
            r.close()


def _slow_upload(port: int, token: str, declared: int) -> socket.socket:
    """An authenticated upload whose body never arrives past its first bytes."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    head = (
        f"POST /api/v1/runs HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {declared}\r\n\r\n"
    )
    sock.sendall(head.encode() + b'{"protocol": 1, ')
    return sock


def _read_to_close(sock: socket.socket) -> str:
    chunks = []
    while chunk := sock.recv(4096):
        chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace")


def test_slow_bodies_hold_nothing_and_time_out(server: Callable[..., Any]) -> None:
    s = server(args=["--body-timeout", "3"])
    token = s.token("a", "ingest")
    socks = [_slow_upload(s.port, token, 10_000) for _ in range(40)]
    try:
        api = s.client(token, timeout=20)
        assert api.get("/api/v1/me").status_code == 200
        assert api.get("/api/v1/runs").status_code == 200
        answer = _read_to_close(socks[0])  # after the body timeout
        assert answer.startswith("HTTP/1.1 408"), answer
        assert "did not arrive within 3 s" in answer
    finally:
        for sock in socks:
            sock.close()


def test_a_client_gone_mid_upload_is_one_info_line(server: Callable[..., Any]) -> None:
    s = server()
    token = s.token("a", "ingest")
    for _ in range(3):
        _slow_upload(s.port, token, 10_000).close()
    api = s.client(token)
    deadline = time.monotonic() + 30
    while s.output().count("went away during POST /api/v1/runs") < 3:
        assert time.monotonic() < deadline, s.output()[-3000:]
        time.sleep(0.05)
    assert api.get("/healthz").status_code == 200
    out = s.output()
    assert "Exception in ASGI application" not in out and "Traceback" not in out, out[-3000:]


def test_a_server_out_of_connections_answers_429_with_retry_after_at_once(
    db_url: str, make_upload: Callable[..., RunUpload], make_batch: Any
) -> None:
    setup = open_database(db_url)
    upgrade(setup)
    with setup.session() as s:
        token, _ = create_token(s, team="a", scope="ingest")
    setup.dispose()
    database = open_database(db_url, pool_size=1, pool_wait=0.2)
    app = create_app(database=database)
    with TestClient(app) as client:
        headers = {"Authorization": f"Bearer {token}"}
        # take both connections (one pooled, one overflow) and keep them (the server's own
        # background work may hold one for a moment)
        held = []
        deadline = time.monotonic() + 60
        while len(held) < 2:
            try:
                held.append(database.engine.connect())
            except SqlTimeout:
                assert time.monotonic() < deadline, "the server's background work kept a connection"
        try:
            r = client.post(
                "/api/v1/runs", json=make_batch(make_upload(id="busy")), headers=headers
            )
            assert r.status_code == 429, r.text
            assert r.headers["Retry-After"] == "1"
            assert r.json()["error"] == "busy"
            assert client.get("/healthz").status_code == 429
        finally:
            for c in held:
                c.close()
        r = client.post("/api/v1/runs", json=make_batch(make_upload(id="busy")), headers=headers)
        assert r.status_code == 200, r.text
