"""Forgery from real pages, in Chromium: a victim logged in to the dashboard visits an attacker's
page on another port of the same host (same site: the SameSite=Strict cookie goes along) or on
another host name. The page auto-submits a ``text/plain`` form that uploads a run, logs the
victim's browser into the attacker's team, and loads ``/logout`` as an image. None of it may
take effect; the victim's own session goes on working."""

from __future__ import annotations

import html
import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, BrowserContext
from tests.conftest import free_loopback_port

from computewatch.upload.protocol import RunUpload

pytestmark = pytest.mark.parametrize("db", ["sqlite"], indirect=True)


class Attacker:
    """A page server of the attacker's: ``pages[path]`` is the HTML it serves."""

    def __init__(self) -> None:
        self.port = free_loopback_port()
        self.pages: dict[str, str] = {}
        pages = self.pages

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                out = pages.get(self.path, "not found").encode()
                self.send_response(200 if self.path in pages else 404)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


@pytest.fixture
def attacker() -> Iterator[Attacker]:
    a = Attacker()
    yield a
    a.close()


def _auto_submit(action: str, fields: str, enctype: str = "") -> str:
    return (
        f'<!doctype html><html><body><form method="post" action="{html.escape(action)}"'
        f"{enctype}>{fields}</form><script>document.forms[0].submit()</script></body></html>"
    )


def _logged_in(browser: Browser, base: str, token: str) -> BrowserContext:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.goto(f"{base}/login", wait_until="load")
    page.fill("input[name=token]", token)
    with page.expect_navigation():
        page.click("button[type=submit]")
    assert "/login" not in page.url, page.url
    return context


def _me(context: BrowserContext, base: str) -> Any:
    r = context.request.get(f"{base}/api/v1/me")
    return r.json() if r.ok else r.status


def _visit(context: BrowserContext, url: str) -> None:
    page = context.new_page()
    page.goto(url, wait_until="load")
    # the auto-submitted form navigates once more: let it land
    page.wait_for_load_state("load")
    time.sleep(0.5)
    page.close()


@pytest.mark.parametrize("attacker_host", ["127.0.0.1", "localhost"])
def test_an_attacking_page_can_neither_upload_nor_log_in_nor_log_out(
    server: Callable[..., Any],
    browser: Browser,
    attacker: Attacker,
    attacker_host: str,
    make_upload: Callable[..., RunUpload],
    make_batch: Any,
) -> None:
    s = server()
    victim = s.token("victims", "ingest")
    theirs = s.token("attackers", "ingest")
    context = _logged_in(browser, s.url, victim)
    try:
        assert _me(context, s.url)["team"] == "victims"
        # a text/plain form whose name=value body is the JSON of an upload
        body = json.dumps(make_batch(make_upload(id="csrf-run")))
        cut = body.rindex("}")
        field = (
            f'<input type="hidden" name="{html.escape(body[:cut])}" '
            f'value="{html.escape(body[cut:])}">'
        )
        attacker.pages["/upload"] = _auto_submit(
            f"{s.url}/api/v1/runs", field, ' enctype="text/plain"'
        )
        attacker.pages["/login"] = _auto_submit(
            f"{s.url}/login",
            f'<input type="hidden" name="token" value="{theirs}">'
            '<input type="hidden" name="next" value="/">',
        )
        attacker.pages["/logout"] = (
            f'<!doctype html><html><body><img src="{s.url}/logout"></body></html>'
        )
        origin = f"http://{attacker_host}:{attacker.port}"
        _visit(context, f"{origin}/upload")
        _visit(context, f"{origin}/login")
        _visit(context, f"{origin}/logout")
        r = httpx.get(
            f"{s.url}/api/v1/runs/csrf-run", headers={"Authorization": f"Bearer {victim}"}
        )
        assert r.status_code == 404, "the forged upload was stored"
        assert _me(context, s.url) != 401, "the image logged the victim out"
        assert _me(context, s.url)["team"] == "victims", "the forged login took over"
        # the dashboard itself still works for the victim
        page = context.new_page()
        response = page.goto(f"{s.url}/runs", wait_until="load")
        assert response is not None and response.ok and "/login" not in page.url
        # and its own log-out button logs out
        page.goto(f"{s.url}/logout", wait_until="load")
        with page.expect_navigation():
            page.click("button[type=submit]")
        assert _me(context, s.url) == 401
    finally:
        context.close()
