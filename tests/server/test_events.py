"""Live events and scale-out: several ``computewatch server`` processes on one database. An
upload through one shows up as a Server-Sent Event on the other (PostgreSQL: LISTEN/NOTIFY;
SQLite: the change table each process polls), filtered by the reader's team."""

from __future__ import annotations

import contextlib
import json
import queue
import socket
import threading
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from computewatch.upload.protocol import RunUpload


class EventReader:
    """Reads ``/api/v1/events`` in a thread; ``next(timeout)`` is the next run event."""

    def __init__(self, url: str, token: str, headers: dict[str, str] | None = None) -> None:
        self.events: queue.Queue[dict[str, Any]] = queue.Queue()
        self.ready = threading.Event()
        self.status: int | None = None
        self._client = httpx.Client(timeout=httpx.Timeout(60, read=None))
        self._headers = {"Authorization": f"Bearer {token}", **(headers or {})}
        self._url = url
        self._socket: socket.socket | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        assert self.ready.wait(30), "event stream did not open"

    def _run(self) -> None:
        try:
            with self._client.stream(
                "GET", f"{self._url}/api/v1/events", headers=self._headers
            ) as r:
                self._socket = r.extensions["network_stream"].get_extra_info("socket")
                self.status = r.status_code
                self.ready.set()
                event: dict[str, Any] = {}
                for line in r.iter_lines():
                    if line.startswith("id: "):
                        event["event_id"] = int(line[4:])
                    elif line.startswith("data: "):
                        event.update(json.loads(line[6:]))
                    elif line == "" and event:
                        self.events.put(event)
                        event = {}
        except httpx.HTTPError:
            pass
        finally:
            self.ready.set()

    def next(self, timeout: float = 30) -> dict[str, Any]:
        try:
            return self.events.get(timeout=timeout)
        except queue.Empty:
            pytest.fail(f"no event within {timeout} s")

    def close(self) -> None:
        """End the reading thread before the connection is closed: a thread still blocked in a
        read of a closed socket reads from whatever socket reuses its descriptor next."""
        if self._socket is not None:
            with contextlib.suppress(OSError):
                self._socket.shutdown(socket.SHUT_RDWR)  # the blocked read returns at once
        self._thread.join(timeout=30)
        self._client.close()


@pytest.mark.slow
def test_an_upload_through_one_server_is_an_event_on_another(
    server: Callable[..., Any], make_upload: Callable[..., RunUpload], make_batch: Any
) -> None:
    a = server()
    b = server(db_url=a.db_url)
    ingest = a.token("ml", "ingest")
    before = make_upload()  # stored before anyone listens: never an event
    assert a.client(ingest).post("/api/v1/runs", json=make_batch(before)).status_code == 200
    reader = EventReader(b.url, b.token("ml", "read"))
    other_team = EventReader(b.url, b.token("other", "read"))
    admin = EventReader(b.url, b.token("ops", "admin"))
    try:
        assert reader.status == 200
        run = make_upload(status="running", final=False, ended_at=None)
        r = a.client(ingest).post("/api/v1/runs", json=make_batch(run))
        assert r.status_code == 200, r.text
        ev = reader.next()
        assert (ev["id"], ev["team"], ev["seq"], ev["status"], ev["final"]) == (
            run["id"], "ml", 1, "running", False,
        )  # fmt: skip
        assert admin.next()["id"] == run["id"]
        done = make_upload(id=run["id"], seq=2)
        a.client(ingest).post("/api/v1/runs", json=make_batch(done))
        ev2 = reader.next()
        assert (ev2["seq"], ev2["status"], ev2["final"]) == (2, "completed", True)
        assert ev2["event_id"] > ev["event_id"]
        # the other team saw nothing of it
        assert other_team.events.empty()
        # a reader that reconnects with Last-Event-ID gets what it missed
        late = EventReader(b.url, b.token("ml", "read"), {"Last-Event-ID": str(ev["event_id"])})
        try:
            assert late.next()["seq"] == 2
        finally:
            late.close()
    finally:
        reader.close()
        other_team.close()
        admin.close()


def test_events_need_a_token(server: Callable[..., Any]) -> None:
    s = server()
    assert httpx.get(f"{s.url}/api/v1/events").status_code == 401
