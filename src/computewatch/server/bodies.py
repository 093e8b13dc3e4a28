"""Request bodies that arrive too slowly, or not at all.

:class:`BodyDeadline` gives a request's body ``seconds`` from the request's start to arrive in
full; past that, reading it raises :class:`BodyTimeout`, which the app answers 408 and closes
the connection. Nothing is held while a body trickles in (authentication gave its database
connection back before the route ran), so a slow client costs a socket and a little memory,
and a deadline bounds even that. A client that goes away mid-body raises Starlette's
``ClientDisconnect``: the app logs it in one line (:func:`client_went_away`).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Final

from fastapi import Request
from fastapi.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from computewatch.errors import ComputewatchError

__all__ = [
    "DEFAULT_BODY_TIMEOUT_SECONDS",
    "BodyDeadline",
    "BodyTimeout",
    "body_timed_out",
    "client_went_away",
]

log = logging.getLogger("computewatch.server")

DEFAULT_BODY_TIMEOUT_SECONDS: Final = 30.0


class BodyTimeout(ComputewatchError):
    """The request's body did not arrive within the server's body timeout."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"the request body did not arrive within {seconds:g} s")
        self.seconds = seconds


class BodyDeadline:
    """ASGI middleware: the body of each HTTP request must arrive within ``seconds`` of the
    request's start."""

    def __init__(self, app: ASGIApp, seconds: float = DEFAULT_BODY_TIMEOUT_SECONDS) -> None:
        if not seconds > 0:
            raise ValueError("the body timeout must be positive")
        self.app = app
        self.seconds = seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.seconds
        complete = False

        async def timed_receive() -> Message:
            nonlocal complete
            if complete:
                return await receive()
            remaining = deadline - loop.time()
            try:
                async with asyncio.timeout(max(remaining, 0.0)):
                    message = await receive()
            except TimeoutError:
                raise BodyTimeout(self.seconds) from None
            if message["type"] != "http.request" or not message.get("more_body", False):
                complete = True
            return message

        await self.app(scope, timed_receive, send)


async def body_timed_out(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, BodyTimeout)
    log.info(
        "request body timed out: %s %s after %g s", request.method, request.url.path, exc.seconds
    )
    return JSONResponse(
        {"error": "timeout", "detail": f"{exc}: send it faster, or in smaller batches"},
        status_code=408,
        headers={"Connection": "close"},
    )


async def client_went_away(request: Request, exc: Exception) -> Response:
    """A client that disconnected before its body was read: one line, no traceback (the
    answer goes nowhere)."""
    client = request.client.host if request.client else "?"
    log.info("client %s went away during %s %s", client, request.method, request.url.path)
    return Response(status_code=400)
