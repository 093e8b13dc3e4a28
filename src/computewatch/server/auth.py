"""Who is calling: a bearer token (``Authorization: Bearer TOKEN``) or a browser's session
cookie, as a typed :class:`Principal`.

Scopes: ``read`` reads its team's runs; ``ingest`` uploads runs for its team and reads them;
``admin`` reads every team's runs (and may upload, for its own team). No or an unknown token:
401. A scope that does not allow the call: 403. Tokens never travel in a query string.

Pages use :func:`page_principal`: an unauthenticated browser is sent to ``/login?next=PATH``
(:class:`LoginRequired` and its handler) rather than answered 401.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Annotated, Final
from urllib.parse import quote

from fastapi import Depends, HTTPException, Request
from fastapi.responses import RedirectResponse
from sqlalchemy.orm import Session

from computewatch.errors import ComputewatchError
from computewatch.serverdb.engine import Database
from computewatch.serverdb.tokens import Scope, TokenInfo, authenticate, session_token

__all__ = [
    "SESSION_COOKIE",
    "LoginRequired",
    "Principal",
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


def get_database(request: Request) -> Database:
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


def optional_principal(
    request: Request, session: Annotated[Session, Depends(db_session)]
) -> Principal | None:
    """The caller, or None when the request carries no valid token or session. A bearer token
    wins over the cookie."""
    token = _bearer(request)
    info: TokenInfo | None = None
    if token is not None:
        info = authenticate(session, token) if token else None
    elif cookie := request.cookies.get(SESSION_COOKIE):
        info = session_token(session, cookie)
    principal = _principal(info) if info else None
    request.state.principal = principal  # for the access log (computewatch.server.governance_api)
    return principal


def current_principal(
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


def require_read(principal: Annotated[Principal, Depends(current_principal)]) -> Principal:
    """Any scope reads (its own team's runs; an admin every team's)."""
    return principal


def require_ingest(principal: Annotated[Principal, Depends(current_principal)]) -> Principal:
    if not principal.can_ingest:
        raise HTTPException(
            status_code=403, detail=f"this token's scope ({principal.scope}) cannot upload runs"
        )
    return principal


def require_admin(principal: Annotated[Principal, Depends(current_principal)]) -> Principal:
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


def page_principal(
    request: Request, principal: Annotated[Principal | None, Depends(optional_principal)]
) -> Principal:
    """The caller of a page; an unauthenticated browser is redirected to /login."""
    if principal is None:
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        raise LoginRequired(target)
    return principal
