"""API tokens and browser sessions.

A token is 32 random bytes, URL-safe base64, prefixed ``cw_`` so that secret scanners and
people can tell one; only its SHA-256 is stored. A token belongs to one team and has one scope:
``ingest`` (upload runs, read the team's runs), ``read`` (read the team's runs) or ``admin``
(everything, every team). A browser session is a random cookie value, stored hashed, tied to the
token it logged in with: revoking the token ends its sessions.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal, Protocol, cast

from sqlalchemy import Engine, Table, bindparam, delete, or_, select, update
from sqlalchemy.orm import Session

from computewatch.errors import UsageError
from computewatch.serverdb import prepared
from computewatch.serverdb.models import Token, WebSession

__all__ = [
    "SCOPES",
    "SESSION_SECONDS",
    "Scope",
    "TokenInfo",
    "authenticate",
    "create_session",
    "create_token",
    "delete_session",
    "hash_secret",
    "list_tokens",
    "note_uses",
    "revoke_token",
    "session_token",
    "validate_team",
]

Scope = Literal["ingest", "read", "admin"]
SCOPES: Final[tuple[Scope, ...]] = ("ingest", "read", "admin")
TOKEN_PREFIX: Final = "cw_"
SESSION_SECONDS: Final = 12 * 3600.0
LAST_USED_RESOLUTION: Final = 60.0
"""``last_used_at`` is written at most this often per token (a read is not a write each time)."""

_TEAM = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")


@dataclass(frozen=True)
class TokenInfo:
    """What is known of a token (never the token itself)."""

    id: int
    name: str | None
    team: str
    scope: Scope
    created_at: float
    last_used_at: float | None
    revoked_at: float | None


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8", "surrogateescape")).hexdigest()


def validate_team(team: str) -> str:
    """A team name: letters, digits, ``.``, ``_``, ``-``, starting with a letter or digit."""
    if not _TEAM.match(team):
        raise UsageError(
            f"team name {team!r}: use letters, digits, '.', '_' and '-' (200 at most), "
            "starting with a letter or digit"
        )
    return team


class _TokenRow(Protocol):
    id: int
    name: str | None
    team: str
    scope: str
    created_at: float
    last_used_at: float | None
    revoked_at: float | None


def _info(t: Token | _TokenRow) -> TokenInfo:
    scope: Scope = t.scope if t.scope in SCOPES else "read"
    return TokenInfo(t.id, t.name, t.team, scope, t.created_at, t.last_used_at, t.revoked_at)


def create_token(
    session: Session, *, team: str, scope: str, name: str | None = None
) -> tuple[str, TokenInfo]:
    """A new token for ``team`` with ``scope``: (the token, its record). Commits."""
    validate_team(team)
    if scope not in SCOPES:
        raise UsageError(f"scope {scope!r}: use one of {', '.join(SCOPES)}")
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    row = Token(
        token_hash=hash_secret(token),
        name=name,
        team=team,
        scope=scope,
        created_at=time.time(),
        last_used_at=None,
        revoked_at=None,
    )
    session.add(row)
    session.commit()
    return token, _info(row)


def list_tokens(session: Session, *, team: str | None = None) -> list[TokenInfo]:
    q = select(Token).order_by(Token.id)
    if team is not None:
        q = q.where(Token.team == team)
    return [_info(t) for t in session.scalars(q)]


def revoke_token(session: Session, token_id: int) -> TokenInfo | None:
    """Revoke token ``token_id`` (and end its browser sessions); None when there is none.
    Revoking twice keeps the first time. Commits."""
    row = session.get(Token, token_id)
    if row is None:
        return None
    session.commit()  # the read ends here: see authenticate
    if row.revoked_at is None:
        row.revoked_at = time.time()
    session.execute(delete(WebSession).where(WebSession.token_id == token_id))
    session.commit()
    return _info(row)


def authenticate(session: Session, token: str) -> TokenInfo | None:
    """The live token ``token`` is, or None (unknown or revoked). A read only: the token's
    last use is written off the request's path (:func:`note_uses`, by the server's access
    log), so that a request never waits for the database's writer to authenticate."""
    if not _plausible(token):
        return None
    return _live(prepared.first(session.connection(), _BY_HASH, {"b_hash": hash_secret(token)}))


def look_up(engine: Engine, token: str) -> TokenInfo | None:
    """:func:`authenticate` outside any session: on SQLite one statement on a pooled
    connection (computewatch.serverdb.prepared.read_first), as the server authenticates every
    request on its event loop."""
    if not _plausible(token):
        return None
    return _live(prepared.read_first(engine, _BY_HASH, {"b_hash": hash_secret(token)}))


def _plausible(token: str) -> bool:
    return bool(token) and len(token) <= 200


def _live(row: tuple[Any, ...] | None) -> TokenInfo | None:
    """The token a row of :data:`_BY_HASH` holds, None when there is none or it is revoked."""
    if row is None:
        return None
    token_id, name, team, scope, created_at, last_used_at, revoked_at = row
    if revoked_at is not None:
        return None
    known: Scope = scope if scope in SCOPES else "read"
    return TokenInfo(token_id, name, team, known, created_at, last_used_at, None)


def note_uses(session: Session, uses: Mapping[int, float]) -> None:
    """Record each token's last use (token id → time), never moving one back. Does not
    commit: the caller writes it with the rest of its transaction."""
    for token_id, at in uses.items():
        session.execute(
            update(Token)
            .where(Token.id == token_id)
            .where(or_(Token.last_used_at.is_(None), Token.last_used_at < at))
            .values(last_used_at=at)
        )


_TOKENS = cast(Table, Token.__table__)
_BY_HASH = select(
    _TOKENS.c.id,
    _TOKENS.c.name,
    _TOKENS.c.team,
    _TOKENS.c.scope,
    _TOKENS.c.created_at,
    _TOKENS.c.last_used_at,
    _TOKENS.c.revoked_at,
).where(_TOKENS.c.token_hash == bindparam("b_hash"))
"""The look-up of every authenticated request, made once with a bound parameter (a Core row,
no ORM object: computewatch.serverdb.ingest says why)."""


def create_session(session: Session, token: TokenInfo, *, seconds: float = SESSION_SECONDS) -> str:
    """A new browser session for ``token``: the cookie value to set. Commits."""
    value = secrets.token_urlsafe(32)
    now = time.time()
    session.execute(delete(WebSession).where(WebSession.expires_at < now))
    session.add(
        WebSession(
            id_hash=hash_secret(value), token_id=token.id, created_at=now, expires_at=now + seconds
        )
    )
    session.commit()
    return value


def session_token(session: Session, cookie: str) -> TokenInfo | None:
    """The live token behind the session cookie ``cookie``, or None (unknown, expired,
    revoked)."""
    if not cookie or len(cookie) > 200:
        return None
    ws = session.get(WebSession, hash_secret(cookie))
    if ws is None or ws.expires_at < time.time():
        return None
    row = session.get(Token, ws.token_id)
    if row is None or row.revoked_at is not None:
        return None
    return _info(row)


def delete_session(session: Session, cookie: str) -> None:
    session.execute(delete(WebSession).where(WebSession.id_hash == hash_secret(cookie)))
    session.commit()
