"""Live intensity against a fake Electricity Maps server on 127.0.0.1 (no other network)."""

from __future__ import annotations

import datetime as dt
import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from computewatch.accounting.live_intensity import (
    LiveIntensity,
    LiveIntensityClient,
    LiveIntensityError,
)

TOKEN = "test-token-123"
GOOD = {
    "zone": "DE",
    "carbonIntensity": 302,
    "datetime": "2026-11-29T15:00:00.000Z",
    "updatedAt": "2026-11-29T15:03:12.000Z",
    "emissionFactorType": "lifecycle",
    "isEstimated": False,
}


@dataclass
class FakeServer:
    """What the fake answers (status, body, delay) and what it received (path, headers)."""

    status: int = 200
    body: bytes = json.dumps(GOOD).encode()
    delay_s: float = 0.0
    requests: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)
    base_url: str = ""


def _handler(fake: FakeServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            fake.requests.append((self.path, {k.lower(): v for k, v in self.headers.items()}))
            if fake.delay_s and fake.release.wait(fake.delay_s):
                return  # released at teardown: the client gave up long ago
            try:
                self.send_response(fake.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(fake.body)))
                self.end_headers()
                self.wfile.write(fake.body)
            except OSError:
                pass

        def log_message(self, format: str, *args: object) -> None:
            pass

    return Handler


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def fake() -> Iterator[FakeServer]:
    state = FakeServer()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    server.daemon_threads = True
    state.base_url = f"http://127.0.0.1:{server.server_address[1]}/v3"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield state
    finally:
        state.release.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def client(fake: FakeServer, timeout: float = 2.0) -> LiveIntensityClient:
    return LiveIntensityClient(TOKEN, base_url=fake.base_url, timeout=timeout)


def test_latest_reads_intensity_and_sends_the_token(fake: FakeServer) -> None:
    got = client(fake).latest("DE")
    assert got == LiveIntensity(
        zone="DE",
        g_per_kwh=302.0,
        datetime=dt.datetime(2026, 11, 29, 15, tzinfo=dt.UTC),
    )
    assert got.source == "Electricity Maps (live)"
    (path, headers), *_ = fake.requests
    assert path == "/v3/carbon-intensity/latest?zone=DE"
    assert headers["auth-token"] == TOKEN


def test_zone_is_url_encoded_and_trailing_slash_ignored(fake: FakeServer) -> None:
    LiveIntensityClient(TOKEN, base_url=fake.base_url + "/", timeout=2).latest("US-CAL-CISO")
    LiveIntensityClient(TOKEN, base_url=fake.base_url, timeout=2).latest("a b&c")
    assert [p for p, _ in fake.requests] == [
        "/v3/carbon-intensity/latest?zone=US-CAL-CISO",
        "/v3/carbon-intensity/latest?zone=a+b%26c",
    ]


@pytest.mark.parametrize(
    ("status", "needle"),
    [
        (401, "rejected the token (HTTP 401)"),
        (403, "rejected the token (HTTP 403)"),
        (404, "does not know zone 'DE' (HTTP 404)"),
        (429, "rate limit"),
        (500, "server error (HTTP 500)"),
        (503, "server error (HTTP 503)"),
        (418, "HTTP 418"),
    ],
)
def test_http_errors_become_readable_errors(fake: FakeServer, status: int, needle: str) -> None:
    fake.status = status
    fake.body = b'{"error": "nope"}'
    with pytest.raises(LiveIntensityError) as info:
        client(fake).latest("DE")
    assert needle in str(info.value)
    assert TOKEN not in str(info.value)
    assert info.value.__cause__ is None and info.value.__suppress_context__


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        (b"<html>gateway</html>", "not valid JSON"),
        (b"\xff\xfe", "not valid JSON"),
        (b"[1, 2]", "not a JSON object"),
        (json.dumps({**GOOD, "carbonIntensity": None}).encode(), "carbonIntensity"),
        (json.dumps({**GOOD, "carbonIntensity": -3}).encode(), "carbonIntensity"),
        (json.dumps({**GOOD, "carbonIntensity": True}).encode(), "carbonIntensity"),
        (json.dumps({k: v for k, v in GOOD.items() if k != "datetime"}).encode(), "datetime"),
        (json.dumps({**GOOD, "datetime": "yesterday"}).encode(), "datetime"),
    ],
)
def test_malformed_answers_become_readable_errors(
    fake: FakeServer, body: bytes, needle: str
) -> None:
    fake.body = body
    with pytest.raises(LiveIntensityError, match=needle):
        client(fake).latest("DE")


def test_naive_datetime_is_taken_as_utc(fake: FakeServer) -> None:
    fake.body = json.dumps({**GOOD, "datetime": "2026-11-29T15:00:00"}).encode()
    assert client(fake).latest("DE").datetime.tzinfo is dt.UTC


def test_slow_answer_hits_the_timeout(fake: FakeServer) -> None:
    fake.delay_s = 10.0
    with pytest.raises(LiveIntensityError, match=r"did not answer within 0\.2 s"):
        client(fake, timeout=0.2).latest("DE")


def test_connection_refused() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    port = server.server_address[1]
    server.server_close()  # nothing listens on the port any more
    c = LiveIntensityClient(TOKEN, base_url=f"http://127.0.0.1:{port}", timeout=2)
    with pytest.raises(LiveIntensityError, match="connection refused"):
        c.latest("DE")


@pytest.mark.parametrize(
    "make",
    [
        lambda: LiveIntensityClient(""),
        lambda: LiveIntensityClient(TOKEN, base_url="file:///etc/passwd"),
        lambda: LiveIntensityClient(TOKEN, timeout=0),
    ],
)
def test_constructor_refuses_bad_settings(make: Callable[[], object]) -> None:
    with pytest.raises(ValueError):
        make()


def test_repr_hides_the_token() -> None:
    assert TOKEN not in repr(LiveIntensityClient(TOKEN))
