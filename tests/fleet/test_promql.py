"""The Prometheus API client against a real Prometheus (Debian's ``prometheus``) and against
real local servers that are not Prometheus: every failure is one PromQLError with a message
that says what happened."""

from __future__ import annotations

import http.server
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from computewatch.fleet.promql import PrometheusClient, PromQLError, check_url, format_duration


@pytest.fixture(scope="module")
def prom_url(
    tmp_path_factory: pytest.TempPathFactory, prometheus: Callable[..., Any]
) -> Iterator[str]:
    d = tmp_path_factory.mktemp("promql")
    cfg = d / "prometheus.yml"
    cfg.write_text("global:\n  scrape_interval: 15s\n")
    with prometheus(cfg, d / "tsdb") as prom:
        yield prom.url


class _Handler(http.server.BaseHTTPRequestHandler):
    status = 200
    body = b"<html><body>hello</body></html>"
    ctype = "text/html"

    def _answer(self) -> None:
        self.send_response(self.status)
        self.send_header("Content-Type", self.ctype)
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    do_GET = do_POST = _answer

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def serve() -> Iterator[Callable[[int, bytes, str], str]]:
    servers: list[http.server.ThreadingHTTPServer] = []

    def start(status: int, body: bytes, ctype: str) -> str:
        handler = type("H", (_Handler,), {"status": status, "body": body, "ctype": ctype})
        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
        return f"http://127.0.0.1:{srv.server_address[1]}"

    yield start
    for s in servers:
        s.shutdown()
        s.server_close()


def test_instant_and_range(prom_url: str) -> None:
    c = PrometheusClient(prom_url + "/")
    assert c.url == prom_url
    now = time.time()
    got = c.instant('label_replace(vector(2.5), "team", "nlp", "", "")', now)
    assert len(got) == 1
    assert got[0].value == 2.5
    assert got[0].labels == {"team": "nlp"}
    assert c.instant("scalar(vector(7))", now)[0].value == 7
    assert c.instant("vector(0) / 0", now)[0].value != c.instant("vector(0) / 0", now)[0].value
    series = c.range("time()", now - 60, now, 15)
    assert len(series) == 1
    points = series[0].points
    assert len(points) == 5
    for t, v in points:
        assert v == pytest.approx(t)
    assert c.instant("computewatch_job_gpu_seconds_total", now) == []


def test_rejected_query_names_the_reason(prom_url: str) -> None:
    c = PrometheusClient(prom_url)
    with pytest.raises(
        PromQLError, match=r"rejected the query 'sum by \(': bad_data: .*parse error"
    ):
        c.instant("sum by (")
    with pytest.raises(PromQLError, match="positive step"):
        c.range("vector(1)", 0, 10, 0)


def test_nothing_listening(free_port: Callable[[], int]) -> None:
    port = free_port()
    with pytest.raises(PromQLError, match=f"cannot reach Prometheus at http://127.0.0.1:{port}"):
        PrometheusClient(f"http://127.0.0.1:{port}").instant("vector(1)")


def test_unknown_host() -> None:
    with pytest.raises(
        PromQLError, match=r"cannot reach Prometheus at http://no-such-host\.invalid"
    ):
        PrometheusClient("http://no-such-host.invalid:9090", timeout=10).instant("vector(1)")


def test_a_web_page_is_not_prometheus(serve: Callable[[int, bytes, str], str]) -> None:
    url = serve(200, b"<html>hi</html>", "text/html")
    with pytest.raises(PromQLError, match=r"answered HTTP 200 \(text/html\), not the Prometheus"):
        PrometheusClient(url).instant("vector(1)")
    url = serve(404, b"404 page not found", "text/plain")
    with pytest.raises(PromQLError, match="answered HTTP 404"):
        PrometheusClient(url).instant("vector(1)")


def test_an_error_document_is_reported(serve: Callable[[int, bytes, str], str]) -> None:
    body = b'{"status":"error","errorType":"unavailable","error":"too many queries"}'
    url = serve(503, body, "application/json")
    with pytest.raises(PromQLError, match="unavailable: too many queries"):
        PrometheusClient(url).instant("vector(1)")


def test_a_silent_server_times_out() -> None:
    with socket.socket() as s:  # accepts connections (backlog) and never answers
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
        with pytest.raises(PromQLError, match=r"did not answer within 0\.5 s"):
            PrometheusClient(url, timeout=0.5).instant("vector(1)")


@pytest.mark.parametrize(
    "url",
    ["localhost:9090", "ftp://h/", "http://", "http://h:x/", "http://h:0", "http://h/?a=1", ""],
)
def test_bad_urls(url: str) -> None:
    with pytest.raises(PromQLError, match="not a valid Prometheus URL"):
        check_url(url)


def test_format_duration() -> None:
    assert format_duration(3600.4) == "1h"  # the shortest spelling (units.format_promql_duration)
    assert format_duration(5400) == "1h30m"
    assert format_duration(0.2) == "1s"
