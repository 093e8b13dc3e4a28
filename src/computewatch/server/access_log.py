"""The access log: one row per authenticated request (team, token id, ``METHOD /path status``,
the client's address encrypted as the accounts' personal data), written off the request path,
with each token's last use (``tokens.last_used_at``, at most once a minute per token).

:class:`AccessLogging` is a plain ASGI middleware: when a request's response has started and
authentication named a principal (``request.state.principal``), it queues the row, stamped
with the time the request ended. One task per server process (:meth:`AccessLog.run`, started
by the app's lifespan) writes what is queued every :data:`FLUSH_SECONDS` in one transaction,
and the rest when the server stops. Before, each request wrote its row in a transaction of its
own after answering: on SQLite a second write per upload, waiting for the same writer lock as
the uploads. Authentication wrote the token's last use itself, on the request's path: a
request then waited for the writer (another process's, or a group of uploads) before it was
even authenticated. A row queued when the process is killed (SIGKILL) within the last
:data:`FLUSH_SECONDS` is lost; a database that refuses a flush keeps the rows for the next one,
up to :data:`MAX_PENDING` (past that the oldest go, and the server log says how many).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Final, cast

from cryptography.fernet import Fernet
from sqlalchemy import Table, insert
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from computewatch.governance import accounts
from computewatch.server.auth import Principal
from computewatch.serverdb.accounts_models import AccessLogRow
from computewatch.serverdb.engine import Database
from computewatch.serverdb.tokens import LAST_USED_RESOLUTION, note_uses

__all__ = ["FLUSH_SECONDS", "MAX_PENDING", "AccessLog", "AccessLogging"]

FLUSH_SECONDS: Final = 0.25
"""How often the queued rows are written."""
MAX_PENDING: Final = 100_000
"""Rows kept while the database refuses them; past that the oldest are dropped (and said)."""

_LOG = logging.getLogger("computewatch.server")
_TABLE = cast(Table, AccessLogRow.__table__)


@dataclass(frozen=True, slots=True)
class _Row:
    at: float
    team: str
    token_id: int
    action: str
    ip: str


class AccessLog:
    """Rows queued by requests, written by :meth:`run` in batches (thread-safe)."""

    def __init__(self, db: Database, key: Path | None = None) -> None:
        self.db = db
        self._key = key
        self._pending: deque[_Row] = deque()
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self.dropped = 0
        self._uses: dict[int, float] = {}  # token id -> last use, not yet written
        self._noted: dict[int, float] = {}  # token id -> last use written
        self._ciphers: dict[tuple[str, int], Fernet] = {}

    def add(self, principal: Principal, action: str, ip: str) -> None:
        row = _Row(time.time(), principal.team, principal.token_id, action[:300], ip)
        with self._lock:
            if len(self._pending) >= MAX_PENDING:
                self._pending.popleft()
                self.dropped += 1
            self._pending.append(row)
            self._use(principal.token_id, row.at)

    def note_use(self, token_id: int) -> None:
        """Token ``token_id`` was used now (a login: a request with no access-log row)."""
        with self._lock:
            self._use(token_id, time.time())

    def _use(self, token_id: int, at: float) -> None:
        """Written with the next flush unless the last use written is less than
        LAST_USED_RESOLUTION older (the caller holds the lock)."""
        if at - self._noted.get(token_id, float("-inf")) > LAST_USED_RESOLUTION:
            self._uses[token_id] = max(at, self._uses.get(token_id, at))

    @property
    def pending(self) -> int:
        return len(self._pending)

    def flush(self) -> int:
        """Write every queued row and token use in one transaction; the rows written. On
        failure they stay queued (the caller's next flush tries again) and the error is
        raised."""
        with self._write_lock:
            with self._lock:
                rows = list(self._pending)
                uses = dict(self._uses)
            if not rows and not uses:
                return 0
            with self.db.writing(), self.db.session() as session:
                if rows:
                    key = self._cipher()
                    values = [
                        {"at": r.at, "team": r.team, "token_id": r.token_id, "action": r.action,
                         "ip": key.encrypt(r.ip.encode())}
                        for r in rows
                    ]  # fmt: skip
                    session.connection().execute(insert(_TABLE), values)
                note_uses(session, uses)
                session.commit()
            with self._lock:
                for _ in range(min(len(rows), len(self._pending))):
                    self._pending.popleft()
                for token_id, at in uses.items():
                    self._noted[token_id] = max(at, self._noted.get(token_id, at))
                    if self._uses.get(token_id) == at:
                        del self._uses[token_id]
            return len(rows)

    async def run(self) -> None:
        """Flush every FLUSH_SECONDS until cancelled, then once more."""
        said = 0
        try:
            while True:
                await asyncio.sleep(FLUSH_SECONDS)
                if not self._pending and not self._uses:
                    continue
                try:
                    await asyncio.to_thread(self.flush)
                except Exception as e:  # the database away: the rows wait for the next flush
                    _LOG.warning("access log not written (%s); %d rows wait", e, self.pending)
                if self.dropped > said:
                    _LOG.warning("access log: %d rows dropped (the database refused them for "
                                 "too long)", self.dropped - said)  # fmt: skip
                    said = self.dropped
        finally:
            with contextlib.suppress(Exception):
                self.flush()

    def _cipher(self) -> Fernet:
        """The accounts' cipher, read once per key file (and again when the file changes)."""
        path = self._key or accounts.key_path()
        try:
            mtime = path.stat().st_mtime_ns
        except OSError:
            return accounts.cipher(path)  # made there the first time
        held = self._ciphers.get((str(path), mtime))
        if held is None:
            held = self._ciphers[(str(path), mtime)] = accounts.cipher(path)
        return held


class AccessLogging:
    """ASGI middleware: queues an access-log row for every request authentication named a
    principal for, once its response has started (its status known)."""

    def __init__(self, app: ASGIApp, log: AccessLog) -> None:
        self.app = app
        self.log = log

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 0

        async def sent(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        scope.setdefault("state", {})  # where request.state keeps what authentication found
        try:
            await self.app(scope, receive, sent)
        finally:
            state = scope.get("state")
            principal = state.get("principal") if isinstance(state, dict) else None
            if status and isinstance(principal, Principal):
                client = scope.get("client")
                ip = str(client[0]) if client else "unknown"
                self.log.add(principal, f"{scope['method']} {scope['path']} {status}", ip)
