"""Admission of uploads: a bounded wait for the ingest's turn, so that an overloaded server says
so at once (429 with ``Retry-After``) instead of queueing without limit and storing, long after,
uploads whose clients gave up waiting.

Each server process has one writer, which stores a group of uploads at a time. At most
``queue`` more wait for their turn, and no more than the writers get through in
:data:`MAX_WAIT_SECONDS` at the pace of the recent turns: one more is refused at once. A queue
bounded by count alone let uploads wait longer than their clients do (a live upload gives up
after 5 s) when each turn slowed under load: the server then stored uploads nobody was waiting
for while every client timed out, and almost nothing got through. An upload whose client went
away while it waited is dropped when its turn comes (nobody would receive the answer, and the
client sends it again).

The writer stores the uploads that wait for it together (:class:`GroupWriter`): each turn takes
every upload waiting (up to a group's bound) and stores them in one transaction, each in a
savepoint of its own, so that the commit and the hand-over to the writer's thread (on
PostgreSQL also a connection's check-out and its ping) are paid once per group, and a queue
that grows under load drains faster rather than slower.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, Generic, TypeVar

from fastapi import Request
from fastapi.responses import JSONResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from computewatch.errors import ComputewatchError

__all__ = [
    "DEFAULT_MAX_QUEUED_UPLOADS",
    "RETRY_AFTER_SECONDS",
    "Admission",
    "ClientGone",
    "EarlyRefusal",
    "GroupWriter",
    "Overloaded",
    "client_gone",
    "overloaded",
]

log = logging.getLogger("computewatch.server")

DEFAULT_MAX_QUEUED_UPLOADS: Final = 32
"""Uploads that may wait for their turn per server process (``--max-queued-uploads``)."""
RETRY_AFTER_SECONDS: Final = 1
"""``Retry-After`` of a refused upload; the clients add jitter and back off."""
MAX_WAIT_SECONDS: Final = 2.0
"""The longest an upload is let wait for its turn, at the pace of the recent turns: well under
the live uploader's timeout (5 s at its default interval), so that what waits is answered."""
MAX_GROUP: Final = 32
"""The most uploads one turn of a :class:`GroupWriter` stores together (one transaction)."""
_PACE_WEIGHT: Final = 0.2
"""Weight of the newest turn in the moving average of a turn's duration."""


class Overloaded(ComputewatchError):
    """More uploads wait than the server takes: answered 429 with ``Retry-After``."""


class ClientGone(ComputewatchError):
    """The client of a waiting upload disconnected before its turn."""


class Admission:
    """At most ``concurrent`` uploads stored at once, at most ``queue`` waiting."""

    def __init__(self, concurrent: int, queue: int, max_wait: float = MAX_WAIT_SECONDS) -> None:
        if concurrent < 1 or queue < 0 or not max_wait > 0:
            raise ValueError("admission needs concurrent >= 1, queue >= 0 and max_wait > 0")
        self.concurrent = concurrent
        self.queue = queue
        self.max_wait = max_wait
        self.pace = 0.0
        """Moving average of a turn's duration, seconds (0 before the first)."""
        self._turns = asyncio.Semaphore(concurrent)
        self._waiting = 0
        self.refused = 0
        """Uploads answered 429 since the start."""
        self.dropped = 0
        """Uploads dropped because their client left while they waited."""
        self.storing = 0
        """Uploads being stored now (a group in the writer's turn, or one in a turn of its own)."""
        self.in_flight = 0
        """Uploads whose bodies have arrived, from then to their answer (being parsed, waiting,
        being stored; counted by the ingest route): an upload waits for every one ahead of it,
        including those still being parsed, which the queue of parsed uploads does not count;
        refusing at arrival on that queue alone let hundreds pile up before it under load, to
        be answered after their clients gave up. Bodies still arriving are not counted: slow
        clients hold nothing, and must not shut the others out."""

    @property
    def waiting(self) -> int:
        return self._waiting

    def bound(self) -> int:
        """How many uploads may wait now: ``queue``, and no more than the writers take in
        ``max_wait`` at the recent pace (at least one)."""
        if self.pace <= 0:
            return self.queue
        return min(self.queue, max(1, int(self.concurrent * self.max_wait / self.pace)))

    def full(self) -> bool:
        """Whether the next upload would be refused now."""
        return self._turns.locked() and self._waiting >= self.bound()

    def crowded(self) -> bool:
        """Whether an upload arriving now is refused before its token and body are read: the
        queue is :meth:`full`, or, besides those being stored now, as many uploads are in
        flight (their bodies arrived: being parsed, waiting) as may wait (a group being stored
        holds up to 32: counting them as waiting starved the next group)."""
        return self.full() or self.in_flight >= max(self.storing, self.concurrent) + self.bound()

    def busy_message(self) -> str:
        return (
            f"the server is busy ({self.in_flight} uploads in flight, {self._waiting} waiting "
            "for their turn, "
            f"{self.pace * 1000:.0f} ms each); retry after {RETRY_AFTER_SECONDS} s"
        )

    def _paced(self, seconds: float) -> None:
        self.pace = seconds if self.pace <= 0 else self.pace + _PACE_WEIGHT * (seconds - self.pace)

    def refuse_if_full(self) -> None:
        """:class:`Overloaded` when the next upload would be refused now (counted)."""
        if self.full():
            self.refused += 1
            raise Overloaded(self.busy_message())


T = TypeVar("T")
R = TypeVar("R")


@dataclass
class _Waiting(Generic[T, R]):
    request: Request
    item: T
    done: asyncio.Future[R]


class GroupWriter(Generic[T, R]):
    """A server process's one writer, storing the uploads waiting for it together.

    ``store`` (called in the writer's own thread) stores a group of items in order and returns
    one outcome per item; a group is every upload waiting when the writer's turn begins, up to
    ``max_group``. Refused at once (:class:`Overloaded`) past the admission's bound
    (:meth:`Admission.refuse_if_full`); an upload whose client left while it waited
    is dropped (:class:`ClientGone`) when its group is formed. The pace (the admission's bound
    on the queue) is twice a turn's duration per upload stored (see :meth:`_drain`)."""

    def __init__(
        self,
        admission: Admission,
        store: Callable[[Sequence[T]], Sequence[R]],
        max_group: int = MAX_GROUP,
        store_now: Callable[[Sequence[T]], Sequence[R] | None] | None = None,
    ) -> None:
        if max_group < 1:
            raise ValueError("a group holds at least one upload")
        self.admission = admission
        self.store = store
        self.store_now = store_now
        """Stores a group on the event loop itself when it can do so without waiting (the
        writer's turn free, a connection idle, no other process holding SQLite's write lock),
        else None: the group then goes to the writer's thread (``store``)."""
        self.stored_on_loop = 0
        """Uploads of the groups ``store_now`` stored."""
        self.max_group = max_group
        self.groups = 0
        """Turns taken since the start (each stored one group)."""
        self.stored = 0
        """Uploads handed to ``store`` since the start."""
        self._pending: list[_Waiting[T, R]] = []
        self._drainer: asyncio.Task[None] | None = None
        # A thread of its own: in the pool that authentication and parsing use, the writer
        # waited behind every request in flight for a thread, and stored nothing meanwhile.
        # Started when uploads wait and let go when none is left (an app made per event loop,
        # as tests make them, leaves no idle thread behind).
        self._thread: concurrent.futures.ThreadPoolExecutor | None = None

    async def submit(self, request: Request, item: T) -> R:
        """``item``'s outcome once its group is stored; :class:`Overloaded` at once when the
        queue is full, :class:`ClientGone` when its client left while it waited."""
        adm = self.admission
        adm.refuse_if_full()
        waiting: _Waiting[T, R] = _Waiting(
            request, item, asyncio.get_running_loop().create_future()
        )
        self._pending.append(waiting)
        adm._waiting += 1
        if self._drainer is None:
            self._drainer = asyncio.create_task(self._drain())
        return await waiting.done

    async def _drain(self) -> None:
        adm = self.admission
        loop = asyncio.get_running_loop()
        try:
            while self._pending:
                group = self._pending[: self.max_group]
                del self._pending[: self.max_group]
                adm._waiting -= len(group)
                live: list[_Waiting[T, R]] = []
                for w in group:
                    if w.done.done():  # its request was cancelled meanwhile
                        continue
                    if await w.request.is_disconnected():
                        adm.dropped += 1
                        path = w.request.url.path
                        w.done.set_exception(
                            ClientGone(f"the client of {path} went away while it waited")
                        )
                    else:
                        live.append(w)
                if not live:
                    continue
                async with adm._turns:  # the turn: what Admission.full() sees as busy
                    adm.storing += len(live)
                    began = time.monotonic()
                    items = [w.item for w in live]
                    try:
                        outcomes = self.store_now(items) if self.store_now else None
                        if outcomes is not None:
                            self.stored_on_loop += len(live)
                        else:
                            if self._thread is None:
                                self._thread = concurrent.futures.ThreadPoolExecutor(
                                    1, "computewatch-writer"
                                )
                            outcomes = await loop.run_in_executor(self._thread, self.store, items)
                    except Exception as e:  # the group's callers each get it, as alone
                        for w in live:
                            if not w.done.done():
                                w.done.set_exception(e)
                        continue
                    finally:
                        adm.storing -= len(live)
                        self.groups += 1
                        self.stored += len(live)
                    # An upload waits for the group being stored, then for the whole of its
                    # own, answered only at its commit: twice a group's time per upload bounds
                    # its wait, and the queue is held to max_wait at that pace.
                    adm._paced(2 * (time.monotonic() - began) / len(live))
                for w, outcome in zip(live, outcomes, strict=True):
                    if not w.done.done():
                        w.done.set_result(outcome)
        finally:
            self._drainer = None
            if self._thread is not None:
                self._thread.shutdown(wait=False)
                self._thread = None
            for w in self._pending:  # cancelled with uploads still waiting: none is left hanging
                if not w.done.done():
                    w.done.cancel()
            adm._waiting -= len(self._pending)
            self._pending.clear()


async def overloaded(request: Request, exc: Exception) -> Response:
    """429 with ``Retry-After`` for :class:`Overloaded`."""
    log.info("%s %s: %s", request.method, request.url.path, exc)
    return JSONResponse(
        {"error": "busy", "detail": str(exc)},
        status_code=429,
        headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
    )


async def client_gone(request: Request, exc: Exception) -> Response:
    """An upload dropped because its client left: one line; the answer goes nowhere."""
    log.info("%s", exc)
    return Response(status_code=400)


class EarlyRefusal:
    """ASGI middleware: an upload (``POST`` to ``path``) that arrives while the admission queue
    is full, or while as many uploads are in flight as are stored at once and may wait
    (:meth:`Admission.crowded`), is answered 429 at once, before its token is checked (a
    database query) and its body read and decompressed: an overloaded server spends nothing on
    an upload it refuses.
    The admission is the one the ingest route made on this event loop (``app.state.admission``,
    a ``(loop, Admission)`` pair); before the first upload there is none and nothing is refused
    here."""

    def __init__(self, app: ASGIApp, path: str) -> None:
        self.app = app
        self.path = path

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST" and scope["path"] == self.path:
            made = getattr(getattr(scope.get("app"), "state", None), "admission", None)
            if made is not None and made[0] is asyncio.get_running_loop() and made[1].crowded():
                admission: Admission = made[1]
                admission.refused += 1
                response = JSONResponse(
                    {"error": "busy", "detail": admission.busy_message()},
                    status_code=429,
                    headers={"Retry-After": str(RETRY_AFTER_SECONDS), "Connection": "close"},
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)
