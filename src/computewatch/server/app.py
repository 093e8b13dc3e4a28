"""The FastAPI application: ``create_app(db_url)``.

Routes: ``/healthz``, ``/login`` (GET a form, POST the form field ``token``: sets the session
cookie), ``/logout`` (POST; GET shows a button), the API under ``/api/v1``
(computewatch.server.api; OpenAPI at ``/api/v1/openapi.json``, browsable at ``/api/v1/docs``)
and the web pages (computewatch.server.web, included where marked below). A database that
cannot be reached makes a request answer 503, and the connection pool reconnects once it is
back; a server whose connections are all in use answers 429 with ``Retry-After`` within a
second (computewatch.serverdb.engine.POOL_WAIT_SECONDS). Forged browser requests are refused
(computewatch.server.forgery), and a body must arrive within the body timeout
(computewatch.server.bodies).
"""

from __future__ import annotations

import asyncio
import contextlib
import html
import logging
import time
from collections.abc import AsyncIterator, Sequence
from typing import Annotated, Any, Final

from fastapi import Depends, FastAPI, Form, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.orm import Session
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from computewatch._version import __version__
from computewatch.ledger.chain import LedgerError
from computewatch.server import api, governance_api, ledger_api
from computewatch.server import goodput as goodput_api
from computewatch.server.access_log import AccessLog, AccessLogging
from computewatch.server.admission import (
    DEFAULT_MAX_QUEUED_UPLOADS,
    ClientGone,
    EarlyRefusal,
    Overloaded,
    client_gone,
    overloaded,
)
from computewatch.server.auth import (
    SESSION_COOKIE,
    LoginRequired,
    db_session,
    login_redirect,
    safe_next,
)
from computewatch.server.bodies import (
    DEFAULT_BODY_TIMEOUT_SECONDS,
    BodyDeadline,
    BodyTimeout,
    body_timed_out,
    client_went_away,
)
from computewatch.server.events import EventHub
from computewatch.server.forgery import ForgeryGuard
from computewatch.server.web import install_dashboard
from computewatch.serverdb.changes import prune_changes
from computewatch.serverdb.engine import CHECKPOINT_SECONDS, Database, open_database, upgrade
from computewatch.serverdb.tokens import (
    SESSION_SECONDS,
    authenticate,
    create_session,
    delete_session,
)

__all__ = ["ServerTiming", "create_app"]

log = logging.getLogger("computewatch.server")

PRUNE_SECONDS = 300.0
BUSY_RETRY_SECONDS: Final = 1
"""``Retry-After`` of a 429 answered when every database connection is in use; the clients add
jitter (computewatch.upload.client)."""


def _driver_message(exc: Exception) -> str:
    orig = getattr(exc, "orig", None) or exc
    lines = str(orig).strip().splitlines()
    return f"{type(orig).__name__}: {lines[0]}" if lines else type(orig).__name__


def _unavailable(request: Request, exc: Exception) -> Response:
    message = _driver_message(exc)
    locked = "locked" in message or "busy" in message
    log.warning(
        "%s %s: database %s: %s",
        request.method,
        request.url.path,
        "locked by another writer" if locked else "unavailable",
        message,
    )
    detail = (
        "the database is locked by another writer (SQLite waited its busy timeout); retry"
        if locked
        else "the database cannot be reached; retry"
    )
    return JSONResponse(
        {"error": "database_unavailable", "detail": detail},
        status_code=503,
        headers={"Retry-After": "5"},
    )


def _busy(request: Request) -> Response:
    log.info("%s %s: every database connection in use: 429", request.method, request.url.path)
    return JSONResponse(
        {
            "error": "busy",
            "detail": "the server is busy (every database connection is in use); retry after "
            f"{BUSY_RETRY_SECONDS} s",
        },
        status_code=429,
        headers={"Retry-After": str(BUSY_RETRY_SECONDS)},
    )


async def _db_error(request: Request, exc: Exception) -> Response:
    if isinstance(exc, PoolTimeout):
        return _busy(request)
    if isinstance(exc, OperationalError | InterfaceError) or (
        isinstance(exc, DBAPIError) and exc.connection_invalidated
    ):
        return _unavailable(request, exc)
    raise exc


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    codes = {400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found"}
    return JSONResponse(
        {"error": codes.get(exc.status_code, "error"), "detail": exc.detail},
        status_code=exc.status_code,
        headers=exc.headers,
    )


async def _validation_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    parts = []
    for e in exc.errors():
        where = ".".join(str(x) for x in e.get("loc", ()) if x not in ("query", "path", "body"))
        parts.append(f"{where}: {e.get('msg', 'invalid')}")
    return JSONResponse(
        {"error": "invalid", "detail": "; ".join(parts) or "invalid request"}, status_code=422
    )


async def _ledger_unreadable(request: Request, exc: Exception) -> Response:
    """The ledger cannot be read (an entry altered in the database): said in one line, in the
    log and to the caller, never a traceback."""
    log.warning("%s %s: %s", request.method, request.url.path, exc)
    detail = str(exc)
    if request.url.path.startswith("/api/"):
        return JSONResponse({"error": "ledger_unreadable", "detail": detail}, status_code=500)
    return HTMLResponse(
        "<!doctype html><html lang=en><meta charset=utf-8><title>computewatch: error</title>"
        f"<h1>Cannot show this page</h1><p>{html.escape(detail)}</p></html>",
        status_code=500,
    )


async def _login_required(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, LoginRequired)
    return login_redirect(exc.next_path)


_LOGIN_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>computewatch: log in</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>body{{font-family:system-ui,sans-serif;max-width:28rem;margin:4rem auto;padding:0 1rem}}
input{{width:100%;padding:.5rem;margin:.5rem 0;box-sizing:border-box}}.error{{color:#b00}}</style>
</head><body><h1>computewatch</h1>
<form method="post" action="/login">
<label for="token">Token</label>
<input id="token" name="token" type="password" autocomplete="off" required autofocus>
<input type="hidden" name="next" value="{next}">
{error}<button type="submit">Log in</button></form>
<p>Make a token with <code>computewatch server token create --team TEAM --scope read</code>.</p>
</body></html>
"""


_LOGOUT_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>computewatch: log out</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>body{font-family:system-ui,sans-serif;max-width:28rem;margin:4rem auto;padding:0 1rem}
</style></head><body><h1>computewatch</h1>
<form method="post" action="/logout"><button type="submit">Log out</button></form>
</body></html>
"""


def _login_page(next_path: str, error: str = "", status: int = 200) -> HTMLResponse:
    err = f'<p class="error">{html.escape(error)}</p>' if error else ""
    return HTMLResponse(
        _LOGIN_PAGE.format(next=html.escape(safe_next(next_path)), error=err),
        status_code=status,
        headers={"Cache-Control": "no-store"},
    )


class ServerTiming:
    """ASGI middleware: ``Server-Timing: app;dur=MS`` on every response, the time the app took
    until the response started (what the benchmarks call server time)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()

        async def timed(message: Message) -> None:
            if message["type"] == "http.response.start":
                ms = (time.perf_counter() - start) * 1000
                headers = list(message.get("headers", []))
                headers.append((b"server-timing", f"app;dur={ms:.2f}".encode()))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, timed)


def create_app(
    db_url: str | None = None,
    *,
    database: Database | None = None,
    migrate: bool = True,
    secure_cookies: bool = False,
    require_signed: bool = False,
    body_timeout: float = DEFAULT_BODY_TIMEOUT_SECONDS,
    allowed_origins: Sequence[str] = (),
    max_queued_uploads: int = DEFAULT_MAX_QUEUED_UPLOADS,
) -> FastAPI:
    """The server on ``db_url`` (see computewatch.serverdb.engine.parse_url; the default SQLite
    file when None), or on an open ``database``. Migrates the schema to the newest revision
    unless ``migrate`` is False. ``secure_cookies``: mark the session cookie Secure (under TLS;
    also set when a request arrives over HTTPS). ``require_signed``: refuse uploads whose usage
    report is unsigned or signed by a key not registered for the team (docs/server.md).
    ``body_timeout``: seconds a request's body has to arrive in full (408 after).
    ``allowed_origins``: origins (``https://cw.example.org``) whose browser requests count as
    the server's own besides the one each request names in ``Host`` (a proxy that rewrites
    ``Host``). ``max_queued_uploads``: uploads that may wait for their turn before the next
    is answered 429 (computewatch.server.admission)."""
    db = database if database is not None else open_database(db_url, background_checkpoints=True)
    if migrate:
        upgrade(db)
    hub = EventHub(db)
    access_log = AccessLog(db)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async def prune() -> None:
            while True:
                with contextlib.suppress(Exception):  # the database away: next time
                    await asyncio.to_thread(_prune, db)
                await asyncio.sleep(PRUNE_SECONDS)

        async def checkpoints() -> None:  # SQLite's, off the loop (Database.checkpoint)
            while db.background_checkpoints:
                await asyncio.sleep(CHECKPOINT_SECONDS)
                with contextlib.suppress(Exception):  # locked or away: next time
                    await asyncio.to_thread(db.checkpoint)

        task = asyncio.create_task(prune())
        checkpointer = asyncio.create_task(checkpoints())
        upkeep = asyncio.create_task(governance_api.maintain(db))  # the ledger's upkeep
        logging_task = asyncio.create_task(access_log.run())
        try:
            yield
        finally:
            task.cancel()
            upkeep.cancel()
            logging_task.cancel()  # writes what is queued, then ends
            checkpointer.cancel()
            await asyncio.gather(task, upkeep, logging_task, checkpointer, return_exceptions=True)
            # Their database work runs in the loop's default executor (asyncio.to_thread), which
            # a cancel does not stop: let it finish before the pool is disposed.
            await asyncio.get_running_loop().shutdown_default_executor()
            hub.close()
            db.dispose()

    app = FastAPI(
        title="computewatch server",
        version=__version__,
        description="Runs uploaded from every machine: ingest, lists, usage, live events. "
        "Authenticate with Authorization: Bearer TOKEN. Field names: docs/server.md.",
        openapi_url="/api/v1/openapi.json",
        docs_url="/api/v1/docs",
        redoc_url=None,
        lifespan=lifespan,
    )
    app.add_middleware(BodyDeadline, seconds=body_timeout)
    app.add_middleware(ForgeryGuard, trusted_origins=tuple(allowed_origins))
    app.add_middleware(ServerTiming)
    app.state.db = db
    app.state.events = hub
    app.state.access_log = access_log
    app.state.secure_cookies = secure_cookies
    app.state.require_signed = require_signed
    app.state.max_queued_uploads = max_queued_uploads
    for exc_type in (OperationalError, InterfaceError, PoolTimeout, DBAPIError):
        app.add_exception_handler(exc_type, _db_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(LoginRequired, _login_required)
    app.add_exception_handler(LedgerError, _ledger_unreadable)
    app.add_exception_handler(BodyTimeout, body_timed_out)
    app.add_exception_handler(ClientDisconnect, client_went_away)
    app.add_exception_handler(Overloaded, overloaded)
    app.add_exception_handler(ClientGone, client_gone)

    @app.get("/healthz", include_in_schema=False)
    def healthz(session: Annotated[Session, Depends(db_session)]) -> dict[str, Any]:
        session.execute(text("SELECT 1"))
        return {
            "status": "ok",
            "database": db.dialect,
            "version": __version__,
            "event_streams": hub.subscriber_count,
            "uploads": api.upload_counters(app),
        }

    app.include_router(api.router)
    app.include_router(governance_api.router)
    app.include_router(ledger_api.router)
    app.include_router(goodput_api.router)
    app.add_middleware(AccessLogging, log=access_log)
    app.add_middleware(EarlyRefusal, path="/api/v1/runs")  # outermost: refused before all else

    # The web pages (computewatch.server.web) are included here, before the fallback /login
    # form below, so that theirs wins when they define one.
    install_dashboard(app)

    @app.get("/login", include_in_schema=False)
    def login_form(next: str = "/") -> HTMLResponse:
        return _login_page(next)

    @app.post("/login", include_in_schema=False)
    def login(
        request: Request,
        session: Annotated[Session, Depends(db_session)],
        token: Annotated[str, Form()] = "",
        next: Annotated[str, Form()] = "/",
    ) -> Response:
        info = authenticate(session, token.strip())
        if info is None:
            return _login_page(next, "Unknown or revoked token.", status=401)
        access_log.note_use(info.id)
        session.commit()  # the read ends: a write after it waits its turn (see writing)
        with db.writing():
            cookie = create_session(session, info)
        response = RedirectResponse(safe_next(next), status_code=303)
        response.set_cookie(
            SESSION_COOKIE,
            cookie,
            max_age=int(SESSION_SECONDS),
            httponly=True,
            samesite="strict",
            secure=bool(app.state.secure_cookies) or request.url.scheme == "https",
            path="/",
        )
        return response

    @app.get("/logout", include_in_schema=False)
    def logout_form() -> HTMLResponse:
        # Logging out changes state: a GET (an <img> on any page) must not do it.
        return HTMLResponse(_LOGOUT_PAGE, headers={"Cache-Control": "no-store"})

    @app.post("/logout", include_in_schema=False)
    def logout(request: Request, session: Annotated[Session, Depends(db_session)]) -> Response:
        cookie = request.cookies.get(SESSION_COOKIE)
        if cookie:
            with db.writing():
                delete_session(session, cookie)
        response = RedirectResponse("/login", status_code=303)
        response.delete_cookie(SESSION_COOKIE, path="/", httponly=True, samesite="strict")
        return response

    return app


def _prune(db: Database) -> None:
    with db.writing(), db.session() as s:
        prune_changes(s)
