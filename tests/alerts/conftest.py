"""Fixtures for the alert tests: a local HTTP receiver."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest


class Receiver:
    """A real HTTP server on 127.0.0.1 that records JSON bodies.

    ``fail_first`` requests get HTTP ``fail_status``; while ``hold`` is clear, requests wait.
    """

    def __init__(self) -> None:
        self.bodies: list[Any] = []
        self.paths: list[str] = []
        self.requests = 0
        self.fail_first = 0
        self.fail_status = 503
        self.hold = threading.Event()
        self.hold.set()
        self.arrived = threading.Condition()
        rec = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with rec.arrived:
                    rec.requests += 1
                    n = rec.requests
                    rec.arrived.notify_all()
                rec.hold.wait(60)
                if n <= rec.fail_first:
                    self.send_response(rec.fail_status)
                    self.end_headers()
                    return
                with rec.arrived:
                    rec.bodies.append(json.loads(body))
                    rec.paths.append(self.path)
                    rec.arrived.notify_all()
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}"

    def wait(self, pred: Any, timeout: float = 30.0) -> None:
        with self.arrived:
            assert self.arrived.wait_for(lambda: pred(self), timeout), "receiver: timed out"

    def stop(self) -> None:
        self.hold.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.stop()
