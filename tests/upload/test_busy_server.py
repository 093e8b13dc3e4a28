"""A busy server (429 or 503 with ``Retry-After``): the client asks again after the time it
names, with jitter, a bounded number of times and never past its deadline; ``push`` and the
live uploader get the run through once the server has room."""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from computewatch.upload.client import (
    Client,
    ServerBusy,
    ServerFailed,
    busy_delay,
    parse_retry_after,
)
from computewatch.upload.protocol import IngestBatch

TOKEN = "cwt_busy-token-value"


@dataclass
class BusyServer:
    """Answers 429 (``Retry-After: retry_after``) to the first ``busy`` requests, then 200."""

    server: ThreadingHTTPServer
    busy: int = 2
    status: int = 429
    retry_after: str | None = "1"
    seen: list[float] = field(default_factory=list)

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"


@pytest.fixture
def busy_server() -> Iterator[BusyServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    state = BusyServer(server)

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            state.seen.append(time.monotonic())
            if len(state.seen) <= state.busy:
                out = b'{"error": "busy", "detail": "every database connection is in use"}'
                self.send_response(state.status)
                if state.retry_after is not None:
                    self.send_header("Retry-After", state.retry_after)
            else:
                out = json.dumps(
                    {"protocol": 1, "results": [{"id": "r1", "seq": 1, "stored": True}]}
                ).encode()
                self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

    server.RequestHandlerClass = Handler
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    yield state
    server.shutdown()
    server.server_close()
    thread.join(5)


def _batch() -> IngestBatch:
    run = {
        "id": "r1", "seq": 1, "final": True, "name": None, "status": "completed",
        "exit_code": 0, "started_at": 1.0, "ended_at": 2.0, "host": "h", "user": "u",
        "project": None, "tags": {}, "command": ["true"], "summary": None, "meta": {},
        "series": [],
    }  # fmt: skip
    return {"protocol": 1, "runs": [run]}  # type: ignore[list-item]


class Sleeps:
    def __init__(self) -> None:
        self.delays: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


def test_a_busy_server_is_asked_again_after_the_time_it_names(busy_server: BusyServer) -> None:
    sleeps = Sleeps()
    client = Client(busy_server.url, TOKEN, sleep=sleeps, rng=random.Random(1))
    answer = client.ingest(_batch())
    assert answer["results"][0]["stored"] is True
    assert len(busy_server.seen) == 3 and client.busy_waits == 2
    # at least what it asked (1 s), doubled at the second time, at most half again (jitter)
    assert 1.0 <= sleeps.delays[0] <= 1.5 and 2.0 <= sleeps.delays[1] <= 3.0


def test_503_with_retry_after_is_busy_and_without_it_a_failure(busy_server: BusyServer) -> None:
    busy_server.status = 503
    sleeps = Sleeps()
    assert Client(busy_server.url, TOKEN, sleep=sleeps).ingest(_batch())["results"]
    assert len(sleeps.delays) == 2
    busy_server.seen.clear()
    busy_server.retry_after = None
    with pytest.raises(ServerFailed) as e:
        Client(busy_server.url, TOKEN, sleep=sleeps).ingest(_batch())
    assert not isinstance(e.value, ServerBusy) and e.value.retryable
    assert len(busy_server.seen) == 1


def test_the_retries_are_bounded_in_count_wait_and_deadline(busy_server: BusyServer) -> None:
    busy_server.busy = 100
    sleeps = Sleeps()
    with pytest.raises(ServerBusy) as e:
        Client(busy_server.url, TOKEN, sleep=sleeps, busy_retries=3).ingest(_batch())
    assert e.value.retryable and e.value.retry_after == 1.0
    assert "busy (429)" in str(e.value) and TOKEN not in str(e.value)
    assert len(sleeps.delays) == 3 and len(busy_server.seen) == 4
    busy_server.seen.clear()
    short = Client(busy_server.url, TOKEN, sleep=Sleeps(), max_busy_wait=2.0)
    with pytest.raises(ServerBusy):
        short.ingest(_batch())
    assert len(busy_server.seen) <= 2
    busy_server.seen.clear()
    with pytest.raises(ServerBusy):
        Client(busy_server.url, TOKEN, sleep=Sleeps()).ingest_body(
            json.dumps(_batch()).encode(), deadline=time.monotonic() + 0.5
        )
    assert len(busy_server.seen) == 1


def test_clients_turned_away_together_do_not_come_back_together() -> None:
    rng = random.Random(7)
    delays = [busy_delay(1.0, 1, rng) for _ in range(50)]
    assert min(delays) >= 1.0 and max(delays) <= 1.5
    assert len({round(d, 3) for d in delays}) > 40
    assert busy_delay(None, 1, random.Random(0)) >= 1.0
    assert busy_delay(400.0, 3, random.Random(0)) <= 300 * 1.5


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("1", 1.0),
        (" 120 ", 120.0),
        ("100000", 300.0),
        ("-5", None),
        ("soon", None),
        ("", None),
        (None, None),
        ("Wed, 21 Oct 2015 07:28:00 GMT", 0.0),
    ],
)
def test_retry_after_is_read_as_the_rfc_says(value: str | None, expected: float | None) -> None:
    assert parse_retry_after(value, now=2_000_000_000.0) == expected


def test_retry_after_as_a_date_in_the_future() -> None:
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:30 GMT", now=1445412480.0) == 30.0
