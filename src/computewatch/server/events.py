"""Live events: every stored upload, fanned out to the ``/api/v1/events`` streams of every
server process on the database.

On PostgreSQL an ingest sends ``NOTIFY computewatch_runs`` (in its transaction, so only once it
commits) and each server process LISTENs on one connection of its own, handing what arrives
within a tenth of a second to the streams together; after a lost connection it catches up from
the ``run_changes`` table. On SQLite each process polls ``run_changes``
(twice a second). Either way one thread per process reads the database and hands each change to
the streams' queues; a stream filters what its caller may see.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from computewatch.serverdb.changes import Change, changes_after, last_change_id
from computewatch.serverdb.engine import Database
from computewatch.serverdb.ingest import NOTIFY_CHANNEL

__all__ = ["EventHub", "Subscription"]

log = logging.getLogger("computewatch.server")

POLL_SECONDS: Final = 0.5
QUEUE_SIZE: Final = 1000
SEEN_SIZE: Final = 10_000
CATCH_UP_MARGIN: Final = 1000
"""Catch-up rereads this many ids below the highest seen (ids commit out of order)."""
NOTIFY_WINDOW_SECONDS: Final = 0.1
"""On PostgreSQL, notifications that arrive within this long of the first one are handed to the
streams together: an event reaches a stream at most this much later than one by one, and under
load each stream is woken and written to ten times a second at most rather than at every
upload of its team (2,000 live runs and 200 streams a process: 8,000 writes a second)."""


@dataclass(eq=False)  # hashed by identity: a set holds them
class Subscription:
    queue: asyncio.Queue[Change | None]
    loop: asyncio.AbstractEventLoop
    teams: frozenset[str] | None
    overflowed: bool = False


class EventHub:
    """One reader thread per process (started with the first subscriber), many subscribers."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._subs: set[Subscription] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last = 0
        self._seen: set[int] = set()
        self._order: collections.deque[int] = collections.deque()

    # -- subscribers (called on the event loop) --

    def subscribe(self, teams: frozenset[str] | None) -> Subscription:
        sub = Subscription(asyncio.Queue(QUEUE_SIZE), asyncio.get_running_loop(), teams)
        with self._lock:
            self._subs.add(sub)
            if self._thread is None:
                self._start()
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        with self._lock:
            self._subs.discard(sub)

    @property
    def subscriber_count(self) -> int:
        """How many streams are subscribed now (each one's subscription ends with it)."""
        with self._lock:
            return len(self._subs)

    # -- the reader thread --

    def _start(self) -> None:
        with self._db.session() as s:
            self._last = last_change_id(s)
        target: Callable[[], None] = (
            self._listen if self._db.dialect == "postgresql" else self._poll
        )
        self._thread = threading.Thread(target=target, name="computewatch-events", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        with self._lock:
            for sub in self._subs:
                with contextlib.suppress(RuntimeError):
                    sub.loop.call_soon_threadsafe(_put, sub, None)
            self._subs.clear()

    def _publish(self, changes: Sequence[Change]) -> None:
        """Hand ``changes`` to the subscribers that may see them: one hand-over per event loop
        for the whole batch (a poll's worth), not one per change and subscriber, which woke a
        busy loop thousands of times a second."""
        new: list[Change] = []
        for change in changes:
            # On PostgreSQL, notifications come in commit order, which ids need not follow:
            # remember what was sent rather than only the highest id.
            if change.change in self._seen:
                continue
            self._seen.add(change.change)
            self._order.append(change.change)
            if len(self._order) > SEEN_SIZE:
                self._seen.discard(self._order.popleft())
            self._last = max(self._last, change.change)
            new.append(change)
        if not new:
            return
        with self._lock:
            subs = list(self._subs)
        by_loop: dict[asyncio.AbstractEventLoop, list[Subscription]] = {}
        for sub in subs:
            by_loop.setdefault(sub.loop, []).append(sub)
        for loop, theirs in by_loop.items():
            with contextlib.suppress(RuntimeError):  # its loop closed: they are going away
                loop.call_soon_threadsafe(_deliver, theirs, new)

    def _catch_up(self, margin: int = 0) -> None:
        after = max(0, self._last - margin)
        with self._db.session() as s:
            while True:
                batch = changes_after(s, after)
                self._publish(batch)
                if len(batch) < 1000:
                    return
                after = batch[-1].change

    def _poll(self) -> None:
        while not self._stop.wait(POLL_SECONDS):
            try:
                self._catch_up()
            except Exception as e:  # the database is away: try again at the next tick
                log.warning("live events: cannot read changes: %s", type(e).__name__)

    def _listen(self) -> None:
        # psycopg is the PostgreSQL driver: imported only when serving PostgreSQL.
        import psycopg

        url = self._db.url.set(drivername="postgresql")
        dsn = url.render_as_string(hide_password=False)
        margin = 0  # the first connection: what came after the hub started
        while not self._stop.is_set():
            try:
                with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
                    conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
                    # anything stored while no connection listened (after a reconnect, ids
                    # a little below the highest seen too: they may commit out of order)
                    self._catch_up(margin)
                    margin = CATCH_UP_MARGIN
                    while not self._stop.is_set():
                        # the first notification, then what else comes within the window:
                        # published together (one hand-over, one write a stream)
                        got = list(conn.notifies(timeout=1.0, stop_after=1))
                        if not got:
                            continue
                        got.extend(conn.notifies(timeout=NOTIFY_WINDOW_SECONDS))
                        changes = [c for n in got if (c := _parse(n.payload)) is not None]
                        if changes:
                            self._publish(changes)
            except Exception as e:
                log.warning("live events: PostgreSQL connection lost: %s", type(e).__name__)
                self._stop.wait(1.0)


def _put(sub: Subscription, change: Change | None) -> None:
    try:
        sub.queue.put_nowait(change)
    except asyncio.QueueFull:
        sub.overflowed = True


def _deliver(subs: Sequence[Subscription], changes: Sequence[Change]) -> None:
    """On the subscribers' loop: each change into the queue of each subscriber that may see
    it."""
    for sub in subs:
        for change in changes:
            if sub.teams is None or change.team in sub.teams:
                _put(sub, change)


def _parse(payload: str) -> Change | None:
    try:
        d: Any = json.loads(payload)
        return Change(
            int(d["change"]),
            str(d["id"]),
            str(d["team"]),
            int(d["seq"]),
            str(d["status"]),
            bool(d["final"]),
        )
    except (ValueError, KeyError, TypeError):
        return None
