"""The reverse-proxy set-ups docs/server.md shows, run for real: nginx and Caddy, configured from
the documentation's own blocks (tests/server/proxies.py), terminating TLS with a throw-away CA in
front of a real ``computewatch server`` on 127.0.0.1.

Through each proxy: ``computewatch push`` over HTTPS (and an upload at the 16 MiB body limit,
compressed and not), the event stream and the dashboard's live updates, the session cookie's
``Secure`` flag, the dashboard's pages in Chromium, redirects that keep the proxy's address, and
the accounts' access log recording the client the proxy forwarded (X-Forwarded-For, trusted from
127.0.0.1 only), not the proxy and not a forged header.

The test client connects from 127.0.0.2 (all of 127.0.0.0/8 is loopback on Linux) while the
proxy reaches the server from 127.0.0.1, so the two addresses differ.
"""

from __future__ import annotations

import contextlib
import json
import queue
import random
import socket
import string
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import ConsoleMessage, sync_playwright
from tests.conftest import CLI
from tests.server.conftest import ServerProcess, batch, synthetic_upload
from tests.server.proxies import PROXIES, Pki, Proxy, make_pki
from tests.server.web.conftest import EVENTS_OPEN

from computewatch.cli import server as cli_server
from computewatch.governance import accounts
from computewatch.server import serve
from computewatch.serverdb.engine import open_database
from computewatch.upload.client import Client, encode_batch
from computewatch.upload.protocol import MAX_BODY_BYTES, PROTOCOL_HEADER

PY = sys.executable
CLIENT_ADDRESS = "127.0.0.2"
FORGED = "203.0.113.9"  # TEST-NET-3: what a client claims in its own X-Forwarded-For
EVENTS = "/api/v1/events"
WAIT = 60.0  # a bound on waits for something that must come, not a timing assertion
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run",
                 "--disable-quic"]  # fmt: skip

pytestmark = pytest.mark.parametrize("db", ["sqlite"], indirect=True)


@dataclass
class Stack:
    """A server on 127.0.0.1 and a proxy in front of it."""

    server: ServerProcess
    proxy: Proxy
    pki: Pki
    admin: str
    ingest: str
    clients: list[httpx.Client]

    def client(self, token: str | None = None, *, via_proxy: bool = True) -> httpx.Client:
        """A client from 127.0.0.2, to the proxy (or straight to the server)."""
        transport = httpx.HTTPTransport(verify=self.pki.context(), local_address=CLIENT_ADDRESS)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        base = self.proxy.url if via_proxy else self.server.url
        c = httpx.Client(base_url=base, transport=transport, headers=headers, timeout=WAIT)
        self.clients.append(c)
        return c

    def access_log(self, team: str) -> list[dict[str, Any]]:
        return _access_log(self.server, team)


def _access_log(server: ServerProcess, team: str) -> list[dict[str, Any]]:
    """The server's access log for ``team``, decrypted with the server's key."""
    db = open_database(server.db_url)
    try:
        with db.session() as session:
            return accounts.access_log(
                session, team, accounts.cipher(server.home / "accounts.key"), limit=1000
            )
    finally:
        db.dispose()


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(params=sorted(PROXIES))
def stack(
    request: pytest.FixtureRequest, server: Callable[..., ServerProcess], pki: Pki, tmp_path: Path
) -> Iterator[Stack]:
    s = server()
    proxy = PROXIES[request.param](tmp_path / request.param, pki, s.port)
    st = Stack(s, proxy, pki, s.token("ml", "admin"), s.token("ml", "ingest"), [])
    try:
        yield st
    finally:
        for c in st.clients:
            c.close()
        proxy.stop()


def _ingest(st: Stack, *runs: Any) -> httpx.Response:
    return st.client(st.ingest).post(
        "/api/v1/runs",
        content=encode_batch(batch(*runs)),
        headers={"Content-Type": "application/json", PROTOCOL_HEADER: "1"},
    )


# -- push -----------------------------------------------------------------------------------------


@pytest.mark.slow
def test_push_over_https_through_the_proxy(
    stack: Stack, cw: CLI, monkeypatch: pytest.MonkeyPatch
) -> None:
    cw.ok("run", "--quiet", "--name", "proxied", "--", PY, "-c", "pass")
    run_id = cw.json("runs")[0]["id"]
    monkeypatch.setenv("COMPUTEWATCH_TOKEN", stack.ingest)
    # Without the CA the proxy's certificate is refused: one line, exit 1, nothing sent.
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    r = cw("push", "--server", stack.proxy.url)
    assert r.returncode == 1, r.stderr
    assert "certificate" in r.stderr.lower() and "Traceback" not in r.stderr
    # Trusting it (OpenSSL's SSL_CERT_FILE, which Python's default context reads): stored.
    monkeypatch.setenv("SSL_CERT_FILE", str(stack.pki.ca))
    doc = json.loads(cw.ok("push", "--server", stack.proxy.url, "--json").stdout)
    assert doc["stored"] == [run_id] and doc["error"] is None
    d = stack.client(stack.admin).get(f"/api/v1/runs/{run_id}")
    assert d.status_code == 200, d.text
    assert d.json()["run"]["name"] == "proxied"


def _upload_of(size: int, run_id: str) -> bytes:
    """An encoded batch of one run of exactly ``size`` bytes of JSON, padded with a document
    of random printable characters (gzip keeps about 80 % of them: a body that stays large on
    the wire)."""
    up = synthetic_upload(run_id)
    up["meta"] = {"config": {"blob": ""}}
    rest = size - len(encode_batch(batch(up)))
    assert rest > 0
    alphabet = "".join(c for c in string.ascii_letters + string.digits + string.punctuation
                       if c not in '"\\')  # fmt: skip
    rng = random.Random(run_id)
    up["meta"] = {"config": {"blob": "".join(rng.choices(alphabet, k=rest))}}
    body = encode_batch(batch(up))
    assert len(body) == size
    return body


@pytest.mark.slow
@pytest.mark.parametrize("compressed", [True, False], ids=["gzip", "plain"])
def test_an_upload_at_the_body_limit_passes_the_proxy(
    stack: Stack, compressed: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The client's largest request: 16 MiB of JSON, gzip-compressed (the proxy sees the
    compressed size), or plain, as the client sends it to a server that refuses gzip."""
    monkeypatch.setenv("SSL_CERT_FILE", str(stack.pki.ca))
    client = Client(stack.proxy.url, stack.ingest, timeout=WAIT, gzip=compressed)
    body = _upload_of(MAX_BODY_BYTES, "at-the-limit")
    answer = client.ingest_body(body)
    assert [(x["id"], x["stored"]) for x in answer["results"]] == [("at-the-limit", True)]
    if compressed:
        assert client.wire_bytes > MAX_BODY_BYTES * 3 // 4
    else:
        assert client.wire_bytes == MAX_BODY_BYTES
    # One byte more is the server's refusal (413 too_large), passed through by the proxy.
    over = _upload_of(MAX_BODY_BYTES + 1, "over-the-limit")
    r = stack.client(stack.ingest).post(
        "/api/v1/runs", content=over,
        headers={"Content-Type": "application/json", PROTOCOL_HEADER: "1"},
    )  # fmt: skip
    assert r.status_code == 413 and r.json()["error"] == "too_large", r.text
    assert stack.client(stack.admin).get("/api/v1/runs/over-the-limit").status_code == 404


# -- events ---------------------------------------------------------------------------------------


class _Stream:
    """An event stream read on a thread; its lines go to ``lines``."""

    def __init__(self, client: httpx.Client, path: str = EVENTS) -> None:
        self.lines: queue.Queue[str | BaseException] = queue.Queue()
        self._stop = threading.Event()
        self._client = client
        self._socket: socket.socket | None = None
        self._thread = threading.Thread(target=self._read, args=(path,), daemon=True)
        self._thread.start()

    def _read(self, path: str) -> None:
        try:
            with self._client.stream("GET", path, headers={"Accept": "text/event-stream"}) as r:
                self._socket = r.extensions["network_stream"].get_extra_info("socket")
                self.lines.put(f"HTTP {r.status_code} {r.headers.get('content-type')}")
                for line in r.iter_lines():
                    self.lines.put(line)
                    if self._stop.is_set():
                        return
        except BaseException as e:  # shown by next() in the test's thread
            self.lines.put(e)

    def next(self) -> str:
        item = self.lines.get(timeout=WAIT)
        if isinstance(item, BaseException):
            raise AssertionError(f"the event stream failed: {item!r}")
        return item

    def until(self, pred: Callable[[str], bool]) -> str:
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            line = self.next()
            if pred(line):
                return line
        raise AssertionError(f"no such line on the event stream within {WAIT:g} s")

    def close(self) -> None:
        """End the reading thread before the connection is closed: a thread still blocked in a
        read of a closed socket reads from whatever socket reuses its descriptor next (it once
        took the first bytes, ``HTTP/``, of another client's answer)."""
        self._stop.set()
        if self._socket is not None:
            with contextlib.suppress(OSError):
                self._socket.shutdown(socket.SHUT_RDWR)  # the blocked read returns at once
        self._thread.join(timeout=WAIT)
        self._client.close()


def test_events_reach_an_open_stream_through_the_proxy(stack: Stack) -> None:
    stream = _Stream(stack.client(stack.admin))
    try:
        assert stream.next() == "HTTP 200 text/event-stream; charset=utf-8"
        # The stream's opening comment arrives while the stream stays open: not buffered.
        stream.until(lambda line: line.startswith(": computewatch events"))
        r = _ingest(stack, synthetic_upload("streamed1", final=False, status="running"))
        assert r.status_code == 200, r.text
        data = stream.until(lambda line: line.startswith("data:"))
        assert json.loads(data.removeprefix("data:"))["id"] == "streamed1"
    finally:
        stream.close()


# -- the access log -------------------------------------------------------------------------------


def test_the_access_log_records_the_client_the_proxy_forwarded(stack: Stack) -> None:
    c = stack.client(stack.admin)
    # A client's own X-Forwarded-For is not believed: the proxy appends the address it saw,
    # and the server takes the nearest address that is not a trusted proxy.
    assert c.get("/api/v1/me", headers={"X-Forwarded-For": FORGED}).status_code == 200
    stream = _Stream(stack.client(stack.admin))
    try:
        stream.until(lambda line: line.startswith(": computewatch events"))
    finally:
        stream.close()
    # Straight to the server from an address that is not 127.0.0.1: the header is ignored.
    direct = stack.client(stack.admin, via_proxy=False)
    assert direct.get("/api/v1/me", headers={"X-Forwarded-For": FORGED}).status_code == 200

    def three_rows() -> list[dict[str, Any]] | None:
        rows = stack.access_log("ml")
        return rows if len(rows) >= 3 else None

    rows = CLI.wait_for(three_rows, WAIT, "three access-log rows")
    seen = {(row["action"].rsplit(" ", 1)[0], row["ip"]) for row in rows}
    assert ("GET /api/v1/me", CLIENT_ADDRESS) in seen
    assert ("GET /api/v1/events", CLIENT_ADDRESS) in seen
    assert {row["ip"] for row in rows} == {CLIENT_ADDRESS}, rows


def test_forwarded_headers_are_believed_only_from_the_allowed_addresses(
    server: Callable[..., ServerProcess],
) -> None:
    """``--forwarded-allow-ips`` names the proxy (here 127.0.0.3, as a proxy on another host
    would be): its headers are believed, those of any other address (127.0.0.1 included, once
    the list does not name it) are not."""
    assert cli_server.DEFAULT_FORWARDED_ALLOW_IPS == serve.DEFAULT_FORWARDED_ALLOW_IPS
    s = server(args=["--forwarded-allow-ips", "10.9.8.0/24, 127.0.0.3"])
    admin = s.token("ml", "admin")
    forwarded = {"X-Forwarded-For": FORGED, "X-Forwarded-Proto": "https"}

    def from_(address: str) -> httpx.Client:
        transport = httpx.HTTPTransport(local_address=address)
        return httpx.Client(base_url=s.url, transport=transport, timeout=WAIT)

    with from_("127.0.0.3") as proxy, from_("127.0.0.1") as local:
        auth = {"Authorization": f"Bearer {admin}"}
        assert proxy.get("/api/v1/me", headers={**auth, **forwarded}).status_code == 200
        assert proxy.get("/api/v1/me", headers=auth).status_code == 200
        assert local.get("/api/v1/runs", headers={**auth, **forwarded}).status_code == 200
        login = {"data": {"token": admin}, "headers": forwarded, "follow_redirects": False}
        assert "Secure" in proxy.post("/login", **login).headers["set-cookie"]
        assert "Secure" not in local.post("/login", **login).headers["set-cookie"]

    def three_rows() -> list[tuple[str, str]] | None:  # the log is written in batches
        got = sorted((row["action"], row["ip"]) for row in _access_log(s, "ml"))
        return got if len(got) >= 3 else None

    got = CLI.wait_for(three_rows, WAIT, "three access-log rows")
    assert got == [
        ("GET /api/v1/me 200", "127.0.0.3"),
        ("GET /api/v1/me 200", FORGED),
        ("GET /api/v1/runs 200", "127.0.0.1"),
    ]


# -- cookies, redirects, the dashboard ------------------------------------------------------------


def test_login_through_the_proxy_sets_a_secure_cookie(stack: Stack) -> None:
    c = stack.client()
    r = c.post("/login", data={"token": stack.admin, "next": "/runs"}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/runs"
    cookie = r.headers["set-cookie"]
    assert cookie.startswith("computewatch_session=")
    assert {"Secure", "HttpOnly", "SameSite=strict"} <= {p.strip() for p in cookie.split(";")}
    # Straight to the server over plain HTTP the same login's cookie is not Secure: the flag
    # comes from the proxy's X-Forwarded-Proto.
    plain = httpx.post(
        f"{stack.server.url}/login", data={"token": stack.admin}, follow_redirects=False
    )
    assert "Secure" not in plain.headers["set-cookie"]


def test_redirects_keep_the_proxy_address(stack: Stack) -> None:
    """Redirects the server makes absolute (a trailing slash) point at the proxy, port and
    https included: the proxy passes the Host the client sent."""
    r = stack.client(stack.admin).get("/api/v1/runs/", follow_redirects=False)
    assert r.status_code == 307
    assert r.headers["location"] == f"{stack.proxy.url}/api/v1/runs"


@pytest.mark.slow
def test_the_dashboard_through_the_proxy_in_chromium(stack: Stack) -> None:
    assert _ingest(stack, synthetic_upload("done0001", name="finished")).status_code == 200
    errors: list[str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            context = browser.new_context(ignore_https_errors=True)
            page = context.new_page()

            def console(m: ConsoleMessage) -> None:
                if m.type in ("error", "warning"):
                    errors.append(f"console {m.type}: {m.text}")

            page.on("console", console)
            page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
            page.on(
                "requestfailed",
                lambda r: (
                    None
                    if EVENTS in r.url and r.failure == "net::ERR_ABORTED"  # leaving a page
                    else errors.append(f"{r.url}: {r.failure}")
                ),
            )
            page.on(
                "response",
                lambda r: errors.append(f"HTTP {r.status}: {r.url}") if r.status >= 400 else None,
            )
            base = stack.proxy.url
            page.goto(f"{base}/login?next=/")
            page.fill("#token", stack.admin)
            with page.expect_navigation():
                page.click("button[type=submit]")
            assert page.url == f"{base}/"
            (cookie,) = [c for c in context.cookies() if c["name"] == "computewatch_session"]
            assert cookie["secure"] and cookie["httpOnly"], cookie
            for path in ("/runs", "/usage", "/budgets", "/governance", "/runs/done0001", "/"):
                response = page.goto(base + path, wait_until="load")
                assert response is not None and response.ok, (path, response and response.status)
            # The live path: the "Now" page's event stream, through the proxy, shows a run
            # that starts while the page is open.
            page.wait_for_function(EVENTS_OPEN)
            events_url = page.evaluate("window.computewatchEvents.source.url")
            assert events_url == f"{base}{EVENTS}"
            up = synthetic_upload("live0001", name="just-started", final=False,
                                  status="running", ended_at=None)  # fmt: skip
            assert _ingest(stack, up).status_code == 200
            page.wait_for_selector("#running tr[data-run=live0001]", timeout=WAIT * 1000)
            assert page.evaluate("window.computewatchEvents.received") >= 1
            context.close()
        finally:
            browser.close()
    assert errors == [], errors
