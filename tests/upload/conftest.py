"""A stand-in ingest server (the standard library's ``http.server`` on 127.0.0.1) for the upload
client's unit tests, which checks every batch it receives against the server's models (a test
whose client sent one the server would refuse fails), and stored runs written by hand. The
end-to-end tests against the real ``computewatch server`` are under tests/server/clients/."""

from __future__ import annotations

import gzip
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from computewatch.readings import Kind
from computewatch.store import COMPLETED, RunRow, Store
from computewatch.upload.schema import InvalidBatch, validate_batch

T0 = 1_700_000_000.0


@dataclass
class Request:
    headers: dict[str, str]
    body: dict[str, Any]
    raw_size: int


@dataclass
class FakeIngest:
    """Answers ``POST /api/v1/runs`` as the protocol says (keeps the highest ``seq`` of each
    run, ``stored: false`` for one it holds), or as told: ``status``/``reply`` for a refusal,
    ``hang`` seconds before answering."""

    server: ThreadingHTTPServer
    requests: list[Request] = field(default_factory=list)
    held: dict[str, dict[str, Any]] = field(default_factory=dict)
    status: int = 200
    reply: bytes | None = None
    hang: float = 0.0
    no_gzip: bool = False
    refused_gzip: int = 0
    release: threading.Event = field(default_factory=threading.Event)
    invalid: list[str] = field(default_factory=list)
    """Why each batch the server's models (computewatch.upload.schema) refuse was refused."""

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def runs_seen(self) -> list[dict[str, Any]]:
        return [r for req in self.requests for r in req.body.get("runs", [])]


def _handler(state: FakeIngest) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            packed = self.headers.get("Content-Encoding") == "gzip"
            if packed and state.no_gzip:  # a server that takes plain JSON only
                state.refused_gzip += 1
                out = b'{"detail": "body: not valid JSON"}'
                self.send_response(422)
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)
                return
            data = gzip.decompress(raw) if packed else raw
            body = json.loads(data)
            state.requests.append(Request(dict(self.headers), body, len(raw)))
            try:
                validate_batch(body)
            except InvalidBatch as e:
                state.invalid.append(str(e))
            if state.hang:
                state.release.wait(state.hang)
            if state.status != 200 or state.reply is not None:
                out = state.reply if state.reply is not None else b""
                self.send_response(state.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)
                return
            results = []
            for run in body["runs"]:
                have = state.held.get(run["id"])
                stored = have is None or run["seq"] > have["seq"]
                if stored:
                    state.held[run["id"]] = run
                results.append({"id": run["id"], "seq": run["seq"], "stored": stored})
            out = json.dumps({"protocol": 1, "results": results}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

    return Handler


@pytest.fixture
def ingest() -> Iterator[FakeIngest]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    state = FakeIngest(server)
    server.RequestHandlerClass = _handler(state)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    yield state
    state.release.set()
    server.shutdown()
    server.server_close()
    thread.join(5)
    assert state.invalid == [], "the client sent batches the server refuses"


def stored_run(
    store: Store,
    run_id: str = "feed0001",
    *,
    n: int = 30,
    status: str = COMPLETED,
    tags: dict[str, str] | None = None,
    command: list[str] | None = None,
    counter_per_second: float = 5.0,
    spike_at: int | None = None,
) -> RunRow:
    """A run of ``n`` one-second ticks with a gauge (50, or 99 at ``spike_at``) and a counter
    growing ``counter_per_second`` per second; finished with a summary unless ``status`` is
    running."""
    key = store.create_run(
        run_id=run_id,
        name=f"run-{run_id}",
        tags=tags or {},
        command=command or ["python", "train.py"],
        cwd="/tmp",
        mode="run",
        started_at=T0,
        interval_seconds=1.0,
        host={"hostname": "box", "allowed_cores": 2.0, "logical_cpus": 2},
    )
    gauge = [99.0 if i == spike_at else 50.0 for i in range(n)]
    store.write_batch(
        key,
        series=[
            (0, "host_load1", {}, Kind.GAUGE),
            (1, "tree_cpu_seconds_total", {"scope": "tree"}, Kind.COUNTER),
        ],
        ticks=[(i, 100.0 + i, T0 + i) for i in range(n)],
        samples=[(key, i, 0, gauge[i]) for i in range(n)]
        + [(key, i, 1, counter_per_second * i) for i in range(n)],
        data_until=T0 + n - 1,
    )
    if status != "running":
        from computewatch.analysis.summary import build_summary

        store.update_run(key, status=status, exit_code=0, ended_at=T0 + n)
        row = store.run_by_key(key)
        store.update_run(key, summary=build_summary(store, row))
    return store.run_by_key(key)


def wait_until(pred: Any, timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.02)
    raise AssertionError("timed out")
