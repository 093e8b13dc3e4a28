"""Who is calling: a bearer token (``Authorization: Bearer TOKEN``) or a browser's session
cookie, as a typed :class:`Principal`.

Scopes: ``read`` reads its team's runs; ``ingest`` uploads runs for its team and reads them;
``admin`` reads every team's runs (and may upload, for its own team). No or an unknown token:
401. A scope that does not allow the call: 403. Tokens never travel in a query string.

Pages use :func:`page_principal`: an unauthenticated browser is sent to ``/login?next=PATH``
(:class:`LoginRequired` and its handler) rather than answered 401.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Annotated, Final
from urllib.parse import quote

from fastapi import Depends, HTTPException, Request
from fastapi.responses import RedirectResponse
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from computewatch.errors import ComputewatchError
from computewatch.serverdb.engine import Database
from computewatch.serverdb.tokens import Scope, TokenInfo, look_up, session_token

__all__ = [
    "CSRF_FIELD",
    "SESSION_COOKIE",
    "LoginRequired",
    "Principal",
    "check_form_token",
    "csrf_token",
    "current_principal",
    "db_session",
    "get_database",
    "login_redirect",
    "optional_principal",
    "page_principal",
    "require_admin",
    "require_ingest",
    "require_read",
    "safe_next",
]

SESSION_COOKIE: Final = "computewatch_session"
CSRF_FIELD: Final = "csrf"
"""The form field that carries a page form's anti-forgery token (:func:`csrf_token`)."""


@dataclass(frozen=True)
class Principal:
    """The caller: its token's team, scope and id."""

    team: str
    scope: Scope
    token_id: int

    @property
    def teams(self) -> frozenset[str] | None:
        """The teams whose runs the caller sees: None (every team) for an admin."""
        return None if self.scope == "admin" else frozenset({self.team})

    @property
    def can_ingest(self) -> bool:
        return self.scope in ("ingest", "admin")

    @property
    def is_admin(self) -> bool:
        return self.scope == "admin"


# The dependencies that neither read the database nor block are coroutines: FastAPI runs a plain
# function's dependency in the thread pool, a hand-over each way per request.


async def get_database(request: Request) -> Database:
    db: Database = request.app.state.db
    return db


def db_session(db: Annotated[Database, Depends(get_database)]) -> Iterator[Session]:
    """A database session for one request, closed after it."""
    with db.session() as session:
        yield session


def _principal(info: TokenInfo) -> Principal:
    return Principal(info.team, info.scope, info.id)


def _bearer(request: Request) -> str | None:
    header = request.headers.get("authorization")
    if not header:
        return None
    kind, _, value = header.partition(" ")
    if kind.lower() != "bearer" or not value.strip():
        return ""
    return value.strip()


async def optional_principal(
    request: Request, db: Annotated[Database, Depends(get_database)]
) -> Principal | None:
    """The caller, or None when the request carries no valid token or session. A bearer token
    wins over the cookie. The look-up takes a connection of its own and gives it back before
    the route runs: a request that then reads a slow body, or streams events for an hour,
    holds no pooled connection meanwhile. On SQLite the look-up (a read of a local file, a
    fraction of a millisecond) runs on the event loop when the pool has an idle connection: a
    hand-over to a worker thread and back cost more, and under load the loop waited for the
    interpreter's lock behind the threads. Otherwise (a database server, no idle connection)
    in a worker thread."""
    token = _bearer(request)
    cookie = request.cookies.get(SESSION_COOKIE) if token is None else None
    info: TokenInfo | None = None
    if token or cookie:
        if db.dialect == "sqlite" and db.connection_free():
            info = _look_up(db, token, cookie)
        else:
            info = await run_in_threadpool(_look_up, db, token, cookie)
    principal = _principal(info) if info else None
    request.state.principal = principal  # for the access log (computewatch.server.governance_api)
    return principal


def _look_up(db: Database, token: str | None, cookie: str | None) -> TokenInfo | None:
    if token:
        return look_up(db.engine, token)
    if not cookie:
        return None
    with db.session() as session:
        return session_token(session, cookie)


async def current_principal(
    principal: Annotated[Principal | None, Depends(optional_principal)],
) -> Principal:
    """The caller; 401 when the request is not authenticated."""
    if principal is None:
        raise HTTPException(
            status_code=401,
            detail="authentication required: send Authorization: Bearer TOKEN "
            "(computewatch server token create)",
            headers={"WWW-Authenticate": "Bearer"},
        )
    return principal


async def require_read(principal: Annotated[Principal, Depends(current_principal)]) -> Principal:
    """Any scope reads (its own team's runs; an admin every team's)."""
    return principal


async def require_ingest(principal: Annotated[Principal, Depends(current_principal)]) -> Principal:
    if not principal.can_ingest:
        raise HTTPException(
            status_code=403, detail=f"this token's scope ({principal.scope}) cannot upload runs"
        )
    return principal


async def require_admin(principal: Annotated[Principal, Depends(current_principal)]) -> Principal:
    if not principal.is_admin:
        raise HTTPException(
            status_code=403, detail=f"this token's scope ({principal.scope}) is not admin"
        )
    return principal


class LoginRequired(ComputewatchError):
    """Raised by :func:`page_principal`; the app answers with a redirect to ``/login``."""

    def __init__(self, next_path: str) -> None:
        super().__init__(next_path)
        self.next_path = next_path


def safe_next(path: str | None) -> str:
    """A redirect target after login: a path on this server only (no ``//host``, no scheme)."""
    if not path or not path.startswith("/") or path.startswith("//") or "\\" in path:
        return "/"
    return path


def login_redirect(next_path: str) -> RedirectResponse:
    return RedirectResponse(f"/login?next={quote(safe_next(next_path), safe='/')}", 303)


async def page_principal(
    request: Request, principal: Annotated[Principal | None, Depends(optional_principal)]
) -> Principal:
    """The caller of a page; an unauthenticated browser is redirected to /login."""
    if principal is None:
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        raise LoginRequired(target)
    return principal


def csrf_token(request: Request) -> str:
    """The anti-forgery token of this browser's session, for a hidden ``csrf`` field in every
    form that changes state: derived from the session cookie (HttpOnly, so a page of another
    origin can neither read the cookie nor compute the token); empty without a session."""
    cookie = request.cookies.get(SESSION_COOKIE)
    if not cookie:
        return ""
    return hashlib.sha256(b"computewatch-csrf\0" + cookie.encode()).hexdigest()[:40]


def check_form_token(request: Request, token: str | None) -> None:
    """403 unless ``token`` is this session's :func:`csrf_token` (a form posted with the
    session cookie). Requests authenticated by a bearer token carry no cookie to forge and
    pass."""
    if _bearer(request) is not None:
        return
    expected = csrf_token(request)
    if not expected or not token or not hmac.compare_digest(expected, token):
        raise HTTPException(
            status_code=403,
            detail="this form's anti-forgery token is missing or stale: reload the page and "
            "submit it again",
        )
