"""An overloaded server says so at once: past ``--max-queued-uploads`` waiting uploads the next
is answered 429 with Retry-After (never 5xx, never a wait without bound), and every upload
retried as told is stored once. Real ``computewatch server`` on SQLite.

The test holds the database's write lock while the uploads arrive (another process's writer, as
in production), so they must wait whatever the machine's speed: on a fast machine 24 uploads
were otherwise stored as they came and the queue never filled."""

from __future__ import annotations

import concurrent.futures
import sqlite3
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from computewatch.upload.protocol import RunUpload


@pytest.mark.parametrize("db", ["sqlite"], indirect=True)
def test_uploads_past_the_queue_are_refused_at_once_then_stored(
    server: Callable[..., Any], make_upload: Callable[..., RunUpload], make_batch: Any
) -> None:
    s = server(args=["--max-queued-uploads", "1"])
    token = s.token("a", "ingest")
    bodies = {f"adm-{i}": make_batch(make_upload(id=f"adm-{i}")) for i in range(24)}
    answers: dict[str, list[int]] = {k: [] for k in bodies}
    retry_after: set[str] = set()

    def send(run_id: str) -> None:
        with httpx.Client(base_url=s.url, timeout=120) as c:
            for _ in range(1200):  # bounded (a minute): 429s are retried as the server asks
                r = c.post(
                    "/api/v1/runs",
                    json=bodies[run_id],
                    headers={"Authorization": f"Bearer {token}"},
                )
                answers[run_id].append(r.status_code)
                if r.status_code != 429:
                    return
                assert r.json()["error"] == "busy"
                retry_after.add(r.headers["Retry-After"])
                time.sleep(0.05)

    # Another writer holds the lock (within the server's busy timeout) while all 24 arrive.
    lock = sqlite3.connect(s.db_url.removeprefix("sqlite:///"), timeout=30, check_same_thread=False)
    lock.execute("BEGIN IMMEDIATE")
    release = threading.Timer(5.0, lock.rollback)
    release.start()
    try:
        with concurrent.futures.ThreadPoolExecutor(len(bodies)) as pool:
            # The first upload's turn comes and waits on the lock; the others then queue behind
            # it (sent together, they could all join its group and never queue).
            first = pool.submit(send, "adm-0")
            # (Authentication writes nothing, so the upload is counted while the lock is held.)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                up = httpx.get(f"{s.url}/healthz", timeout=10).json()["uploads"]
                if up["in_flight"] >= 1 and up["waiting"] == 0:
                    break
                time.sleep(0.02)
            else:
                pytest.fail(f"the first upload never reached its turn: {up}")
            list(pool.map(send, [k for k in bodies if k != "adm-0"]))
            first.result()
    finally:
        release.cancel()
        release.join()
        lock.close()
    codes = [c for a in answers.values() for c in a]
    assert set(codes) <= {200, 429}, codes
    assert 429 in codes and retry_after == {"1"}
    assert all(a[-1] == 200 for a in answers.values()), answers
    reader = s.client(token)
    for run_id in bodies:
        assert reader.get(f"/api/v1/runs/{run_id}").status_code == 200
    assert "Traceback" not in s.output()


def test_a_full_queue_refuses_before_the_token_and_the_body() -> None:
    """While the admission queue is full, an upload is answered 429 before anything reads its
    token or its body: the application behind is never called."""
    import asyncio
    from types import SimpleNamespace

    from computewatch.server.admission import Admission, EarlyRefusal

    async def scenario() -> tuple[list[dict[str, Any]], int, bool]:
        called = False

        async def inner(scope: Any, receive: Any, send: Any) -> None:
            nonlocal called
            called = True

        admission = Admission(1, 0)
        app = SimpleNamespace(state=SimpleNamespace(admission=(asyncio.get_running_loop(),
                                                               admission)))  # fmt: skip
        guard = EarlyRefusal(inner, "/api/v1/runs")
        sent: list[dict[str, Any]] = []

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        async def receive() -> dict[str, Any]:
            raise AssertionError("the body was read")

        scope = {"type": "http", "method": "POST", "path": "/api/v1/runs", "app": app,
                 "headers": [(b"authorization", b"Bearer not-a-token")]}  # fmt: skip
        await admission._turns.acquire()  # an upload being stored, none may wait
        await guard(scope, receive, send)
        refused = admission.refused
        admission._turns.release()
        await guard({**scope, "path": "/api/v1/runs/x"}, receive, send)  # other paths pass
        return sent, refused, called

    sent, refused, called = asyncio.run(scenario())
    assert sent[0]["status"] == 429 and (b"retry-after", b"1") in sent[0]["headers"]
    assert refused == 1 and called  # called for the other path only


def test_uploads_being_parsed_count_against_the_queue_at_arrival_slow_bodies_do_not() -> None:
    """An upload waits for every upload ahead of it, including those whose bodies arrived and
    are still being parsed: with one stored at once and two allowed to wait, an upload arriving
    while three are in flight (none yet parsed, so none waiting for the turn) is refused at once.
    (Counting only the parsed uploads let hundreds pile up before the queue at 500 live runs,
    answered after their clients gave up.) Requests whose bodies are still arriving count for
    nothing: three slow bodies inside the app do not shut a fourth upload out."""
    import asyncio  # the scenario runs on its own event loop
    from types import SimpleNamespace  # a stand-in app holding the admission

    from computewatch.server.admission import Admission, EarlyRefusal  # with the asyncio above

    async def scenario() -> tuple[list[int], list[int], int]:
        admission = Admission(1, 2)
        app = SimpleNamespace(state=SimpleNamespace(admission=(asyncio.get_running_loop(),
                                                               admission)))  # fmt: skip
        reading = asyncio.Event()
        entered = 0

        async def inner(scope: Any, receive: Any, send: Any) -> None:
            nonlocal entered
            entered += 1
            await reading.wait()  # the body still arriving
            await send({"type": "http.response.start", "status": 200, "headers": []})

        guard = EarlyRefusal(inner, "/api/v1/runs")
        statuses: list[int] = []

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                statuses.append(message["status"])

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": b"", "more_body": False}

        scope = {"type": "http", "method": "POST", "path": "/api/v1/runs", "app": app,
                 "headers": []}  # fmt: skip
        slow = [asyncio.create_task(guard(scope, receive, send)) for _ in range(4)]
        for _ in range(3):
            await asyncio.sleep(0)
        slow_bodies = list(statuses)  # four slow bodies: all let in
        admission.in_flight = 3  # three bodies arrived, being parsed
        await guard(scope, receive, send)  # refused before the app
        admission.in_flight = 2
        reading.set()
        await asyncio.gather(*slow)
        await guard(scope, receive, send)  # room again
        return slow_bodies, statuses, entered

    slow_bodies, statuses, entered = asyncio.run(scenario())
    assert slow_bodies == [] and entered == 5
    assert statuses == [429, 200, 200, 200, 200, 200], statuses


def test_the_queue_holds_no_more_than_the_writer_takes_in_the_longest_wait() -> None:
    """Uploads wait no longer than MAX_WAIT at the recent pace of the writer: after a group of
    one took 0.3 s (a pace of 0.6 s an upload: it waited for the group, then for its own), a
    queue bounded at 32 by count takes at most 3 waiting uploads for a 1 s wait (a count-only
    bound let 32 wait behind slow turns, longer than their clients waited)."""
    import asyncio  # the scenario runs on its own event loop
    from types import SimpleNamespace  # a stand-in request (is_disconnected, url)

    from computewatch.server.admission import Admission, GroupWriter, Overloaded

    release = threading.Event()
    calls = 0

    def store(items: Any) -> list[int]:
        nonlocal calls
        calls += 1
        if calls == 1:
            time.sleep(0.3)
        elif calls == 2:
            release.wait(10)  # the turn the others queue behind
        return list(items)

    async def scenario() -> tuple[int, float, int]:
        admission = Admission(1, 32, max_wait=1.0)
        writer: GroupWriter[int, int] = GroupWriter(admission, store)

        async def connected() -> bool:
            return False

        request: Any = SimpleNamespace(is_disconnected=connected, url=SimpleNamespace(path="/"))
        await writer.submit(request, 0)
        holder = asyncio.create_task(writer.submit(request, 1))
        while admission.storing == 0:
            await asyncio.sleep(0.01)
        waiters = []
        refused = 0
        for i in range(40):
            if admission.full():
                with pytest.raises(Overloaded):
                    await writer.submit(request, 100)
                refused += 1
                break
            waiters.append(asyncio.create_task(writer.submit(request, 2 + i)))
            await asyncio.sleep(0)
        waiting, pace = admission.waiting, admission.pace
        release.set()
        await asyncio.gather(holder, *waiters)
        return waiting, pace, refused

    waiting, pace, refused = asyncio.run(scenario())
    assert refused == 1
    assert pace >= 0.3
    assert 1 <= waiting <= 3, waiting
