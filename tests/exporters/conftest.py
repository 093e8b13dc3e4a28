"""``otlp_receiver``: a local OTLP/HTTP metrics endpoint that decodes each request with the
official ``opentelemetry-proto`` definitions (protobuf body, gzip or not)."""

from __future__ import annotations

import gzip
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)


@dataclass
class Point:
    name: str
    unit: str
    kind: str  # gauge, sum
    monotonic: bool
    value: float
    attributes: dict[str, str]
    resource: dict[str, str]


@dataclass
class OtlpReceiver:
    """Decoded requests; ``delay`` seconds before answering, ``status`` to answer with."""

    requests: list[ExportMetricsServiceRequest] = field(default_factory=list)
    encodings: list[str] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    delay: float = 0.0
    status: int = 200
    cond: threading.Condition = field(default_factory=threading.Condition)
    release: threading.Event = field(default_factory=threading.Event)
    url: str = ""

    def points(self, name: str | None = None) -> list[Point]:
        out: list[Point] = []
        with self.cond:
            reqs = list(self.requests)
        for req in reqs:
            for rm in req.resource_metrics:
                res = {a.key: a.value.string_value for a in rm.resource.attributes}
                for sm in rm.scope_metrics:
                    for m in sm.metrics:
                        if name is not None and m.name != name:
                            continue
                        which = m.WhichOneof("data")
                        data: Any = getattr(m, which)
                        for dp in data.data_points:
                            v = dp.as_double if dp.WhichOneof("value") == "as_double" else dp.as_int
                            attrs = {a.key: a.value.string_value for a in dp.attributes}
                            mono = bool(getattr(data, "is_monotonic", False))
                            out.append(Point(m.name, m.unit, which, mono, v, attrs, res))
        return out

    def wait(self, pred: Any, timeout: float = 60.0) -> None:
        with self.cond:
            assert self.cond.wait_for(lambda: pred(self), timeout), "OTLP receiver: timed out"


@pytest.fixture
def otlp_receiver() -> Iterator[OtlpReceiver]:
    rec = OtlpReceiver()
    rec.release.set()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            enc = self.headers.get("Content-Encoding") or ""
            if enc == "gzip":
                body = gzip.decompress(body)
            assert self.headers.get("Content-Type") == "application/x-protobuf"
            req = ExportMetricsServiceRequest()
            req.ParseFromString(body)
            if rec.delay:
                rec.release.wait(rec.delay)
            with rec.cond:
                rec.requests.append(req)
                rec.encodings.append(enc)
                rec.paths.append(self.path)
                rec.cond.notify_all()
            payload = ExportMetricsServiceResponse().SerializeToString()
            self.send_response(rec.status)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    host, port = server.server_address[:2]
    rec.url = f"http://{host!s}:{port}"
    yield rec
    rec.release.set()
    server.shutdown()
    server.server_close()
