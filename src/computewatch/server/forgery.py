"""Cross-site request forgery: a request that changes state and is carried by the browser's
session cookie must come from the server's own pages.

A browser attaches the ``SameSite=Strict`` session cookie to every request of the same *site*,
and a site ignores the port: a page on ``http://127.0.0.1:38999`` (another program of the same
machine) posting to ``http://127.0.0.1:8765`` sends the cookie along. So, following OWASP's
guidance, every state-changing request (not GET, HEAD or OPTIONS) carried by the cookie must:

- come from this origin: ``Sec-Fetch-Site: same-origin`` (or ``none``, typed by the user) when
  the browser sends it, else an ``Origin`` equal to the server's own (scheme, host and port, as
  the request reached it; ``--allowed-origin`` adds the public origin of a proxy that rewrites
  ``Host``); a cookie request with neither header is refused: every current browser sends one;
- under ``/api/``, be JSON (``Content-Type: application/json``): a form of another page can send
  ``text/plain`` without a preflight, never JSON;
- (pages) carry the form's anti-forgery token, checked by the route
  (computewatch.server.auth.check_form_token).

``/login`` carries no cookie yet but is checked the same way (a forged login would put the
victim in the attacker's session). Requests with an ``Authorization`` header are not carried by
the cookie (a bearer token wins over it) and pass untouched.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.requests import cookie_parser
from starlette.types import ASGIApp, Receive, Scope, Send

from computewatch.jsonout import dumps as json_dumps
from computewatch.server.auth import SESSION_COOKIE

__all__ = ["SAFE_METHODS", "ForgeryGuard", "forgery_reason", "parse_origin"]

SAFE_METHODS: Final = frozenset({"GET", "HEAD", "OPTIONS"})
_DEFAULT_PORTS: Final = {"http": 80, "https": 443}

Origin = tuple[str, str, int]
"""(scheme, host in lower case, port)."""


def parse_origin(text: str) -> Origin | None:
    """``scheme://host[:port]`` as a comparable triple; None when it is not one (``null``)."""
    try:
        parts = urlsplit(text.strip())
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.hostname:
        return None
    return scheme, parts.hostname.lower(), port or _DEFAULT_PORTS[scheme]


def _own_origin(scope: Scope, headers: Headers) -> Origin | None:
    scheme = str(scope.get("scheme", "http"))
    host = headers.get("host")
    if not host:
        server = scope.get("server")
        if not server:
            return None
        host = f"{server[0]}:{server[1]}"
    return parse_origin(f"{scheme}://{host}")


def forgery_reason(scope: Scope, headers: Headers, trusted: Iterable[Origin] = ()) -> str | None:
    """Why this request is refused as a possible forgery; None when it may go on."""
    method = str(scope.get("method", "GET")).upper()
    if method in SAFE_METHODS or "authorization" in headers:
        return None
    path = str(scope.get("path", ""))
    cookies = cookie_parser(headers.get("cookie", ""))
    by_cookie = SESSION_COOKIE in cookies
    login = path.rstrip("/").endswith("/login")
    if not by_cookie and not login:
        return None
    site = headers.get("sec-fetch-site")
    origin_header = headers.get("origin")
    if site is not None:
        if site.lower() not in ("same-origin", "none"):
            return f"a request from another site or origin (Sec-Fetch-Site: {site})"
    elif origin_header is not None:
        origin = parse_origin(origin_header)
        own = _own_origin(scope, headers)
        if origin is None or (origin != own and origin not in set(trusted)):
            return f"a request from another origin ({origin_header})"
    elif by_cookie:
        return (
            "a request carried by the session cookie with neither Origin nor Sec-Fetch-Site: "
            "use the dashboard's own pages, or an Authorization: Bearer token"
        )
    if by_cookie and path.startswith("/api/"):
        ctype = headers.get("content-type", "").split(";")[0].strip().lower()
        if ctype != "application/json":
            return (
                "a browser request to the API must send Content-Type: application/json "
                f"(not {ctype or 'none'})"
            )
    return None


class ForgeryGuard:
    """ASGI middleware: answers 403 ``{"error": "forbidden", "detail": ...}`` to a request
    :func:`forgery_reason` refuses, before any route or body read."""

    def __init__(self, app: ASGIApp, trusted_origins: Iterable[str] = ()) -> None:
        self.app = app
        self.trusted = tuple(o for o in (parse_origin(t) for t in trusted_origins) if o)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            reason = forgery_reason(scope, Headers(scope=scope), self.trusted)
            if reason is not None:
                body = json_dumps({"error": "forbidden", "detail": reason}).encode()
                await send(
                    {
                        "type": "http.response.start",
                        "status": 403,
                        "headers": [
                            (b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()),
                            (b"cache-control", b"no-store"),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)
