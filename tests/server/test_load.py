"""A real ``computewatch server`` on SQLite under load it must survive (no timing asserted:
every client waits generously, and what is checked is the answer, not how fast it came).

* 64 open ``GET /api/v1/events`` streams leave the rest of the API answering: ``/healthz`` and
  ``/api/v1/me`` answer 200 while they are open (an event stream holds no database connection).
* 64 uploads at once are answered 200 or 429 (with ``Retry-After``), never a 5xx; after
  retrying the 429s as told, all 64 runs are stored once.
* A body that trickles in and then stalls is given up after ``--body-timeout`` seconds, and the
  server goes on answering.

benchmarks/bench_server_load.py measures the same server to the knee.
"""

from __future__ import annotations

import asyncio
import socket
import time
import uuid
from collections.abc import Callable
from urllib.parse import urlsplit

import httpx
import pytest
from tests.server.conftest import ServerProcess, batch, synthetic_upload

from computewatch import jsonout

pytestmark = pytest.mark.parametrize("db", ["sqlite"], indirect=True)

STREAMS = 64
UPLOADS = 64
CLIENT_TIMEOUT = 20.0
"""How long a client waits for an answer: generous, the test asserts the answer itself."""
OPEN_TIMEOUT = 60.0
"""How long all the event streams together may take to open."""
RETRIES = 20
"""Retries of one upload answered 429 (each after its Retry-After)."""
BODY_TIMEOUT = 2


def _limits(n: int) -> httpx.Limits:
    return httpx.Limits(max_connections=n + 8, max_keepalive_connections=n + 8)


async def _open_stream(
    client: httpx.AsyncClient, token: str, opened: asyncio.Queue[int], stop: asyncio.Event
) -> None:
    """One event stream: report its status once its first line came, then hold it open."""
    async with client.stream(
        "GET",
        "/api/v1/events",
        headers={"Authorization": f"Bearer {token}", "Accept": "text/event-stream"},
    ) as r:
        if r.status_code != 200:
            await opened.put(r.status_code)
            return
        async for _ in r.aiter_lines():
            break  # the stream's comment line: it is open
        await opened.put(r.status_code)
        await stop.wait()


def test_event_streams_leave_the_api_answering(
    server: Callable[..., ServerProcess],
) -> None:
    s = server()
    reader = s.token("ml", "read")

    async def scenario() -> tuple[list[int], int, int]:
        timeout = httpx.Timeout(CLIENT_TIMEOUT, read=None)  # a stream is quiet between events
        async with httpx.AsyncClient(
            base_url=s.url, timeout=timeout, limits=_limits(STREAMS)
        ) as streams:
            opened: asyncio.Queue[int] = asyncio.Queue()
            stop = asyncio.Event()
            tasks = [
                asyncio.create_task(_open_stream(streams, reader, opened, stop))
                for _ in range(STREAMS)
            ]
            statuses: list[int] = []
            deadline = time.monotonic() + OPEN_TIMEOUT
            try:
                while len(statuses) < STREAMS and time.monotonic() < deadline:
                    try:
                        statuses.append(await asyncio.wait_for(opened.get(), 1.0))
                    except TimeoutError:
                        failed = [t for t in tasks if t.done() and t.exception() is not None]
                        if failed:
                            why = failed[0].exception()
                            raise AssertionError(f"a stream failed: {why!r}") from None
                # with every stream open: the rest of the API
                async with httpx.AsyncClient(base_url=s.url, timeout=CLIENT_TIMEOUT) as c:
                    health = await c.get("/healthz")
                    me = await c.get("/api/v1/me", headers={"Authorization": f"Bearer {reader}"})
            finally:
                stop.set()
                for t in tasks:
                    t.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
            return statuses, health.status_code, me.status_code

    statuses, health, me = asyncio.run(scenario())
    assert len(statuses) == STREAMS, f"{len(statuses)} of {STREAMS} streams opened"
    assert statuses == [200] * STREAMS, sorted(statuses)
    assert health == 200
    assert me == 200
    assert s.proc is not None and s.proc.poll() is None


def test_concurrent_uploads_are_answered_200_or_429_and_all_stored(
    server: Callable[..., ServerProcess],
) -> None:
    s = server()
    ingest = s.token("ml", "ingest")
    admin = s.token("ops", "admin")
    ids = [uuid.uuid4().hex for _ in range(UPLOADS)]
    bodies = {i: jsonout.dumps(batch(synthetic_upload(i, seq=3))).encode() for i in ids}

    async def upload(c: httpx.AsyncClient, run_id: str, seen: list[int]) -> bool:
        for _ in range(RETRIES):
            r = await c.post(
                "/api/v1/runs",
                content=bodies[run_id],
                headers={"Authorization": f"Bearer {ingest}", "Content-Type": "application/json"},
            )
            seen.append(r.status_code)
            if r.status_code != 429:
                return r.status_code == 200
            retry_after = r.headers.get("retry-after")
            assert retry_after is not None, "a 429 without Retry-After"
            await asyncio.sleep(min(float(retry_after), 5.0))
        return False

    async def scenario() -> tuple[list[int], list[bool]]:
        seen: list[int] = []
        async with httpx.AsyncClient(
            base_url=s.url, timeout=CLIENT_TIMEOUT, limits=_limits(UPLOADS)
        ) as c:
            ok = await asyncio.gather(*(upload(c, i, seen) for i in ids))
        return seen, list(ok)

    seen, ok = asyncio.run(scenario())
    assert set(seen) <= {200, 429}, sorted(seen)
    assert all(ok), f"{ok.count(False)} of {UPLOADS} uploads not stored after {RETRIES} tries"
    c = s.client(admin, timeout=CLIENT_TIMEOUT)
    page = c.get("/api/v1/runs", params={"limit": 500})
    assert page.status_code == 200, page.text
    stored = [r for r in page.json()["runs"] if r["id"] in bodies]
    assert sorted(r["id"] for r in stored) == sorted(ids)  # each once
    assert {r["seq"] for r in stored} == {3}


def _read_answer(sock: socket.socket, limit: float) -> bytes:
    """What the server sends until it closes the connection or ends one answer, within
    ``limit`` seconds; raises TimeoutError when it sends nothing that long."""
    sock.settimeout(limit)
    got = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            return got
        got += chunk
        _, sep, _ = got.partition(b"\r\n\r\n")
        if sep:
            return got


def test_a_stalled_body_times_out(server: Callable[..., ServerProcess]) -> None:
    s = server(args=["--body-timeout", str(BODY_TIMEOUT)])
    ingest = s.token("ml", "ingest")
    body = jsonout.dumps(batch(synthetic_upload(uuid.uuid4().hex))).encode()
    where = urlsplit(s.url)
    assert where.hostname is not None and where.port is not None
    with socket.create_connection((where.hostname, where.port), timeout=CLIENT_TIMEOUT) as sock:
        head = (
            f"POST /api/v1/runs HTTP/1.1\r\nHost: {where.netloc}\r\n"
            f"Authorization: Bearer {ingest}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode()
        sock.sendall(head)
        # a quarter of the body, a little at a time, then nothing more
        quarter = len(body) // 4
        for k in range(0, quarter, max(1, quarter // 5)):
            sock.sendall(body[k : min(k + max(1, quarter // 5), quarter)])
            time.sleep(0.2)
        try:
            answer = _read_answer(sock, BODY_TIMEOUT + CLIENT_TIMEOUT)
        except TimeoutError:
            pytest.fail(f"the server still waits for the body after {CLIENT_TIMEOUT:g} s more")
    # either an answer that says so (408) or a closed connection, never a stored run
    assert answer == b"" or answer.split(b" ", 2)[1] == b"408", answer[:300]
    c = s.client(timeout=CLIENT_TIMEOUT)
    assert c.get("/healthz").status_code == 200
