"""The feed of stored uploads (``run_changes``) that live events are made of."""

from __future__ import annotations

import time
from dataclasses import dataclass

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from computewatch.serverdb.models import RunChange

__all__ = ["Change", "changes_after", "last_change_id", "prune_changes"]

KEEP_SECONDS = 3600.0


@dataclass(frozen=True)
class Change:
    """One stored upload: which run, whose, at which ``seq``, its status then."""

    change: int
    id: str
    team: str
    seq: int
    status: str
    final: bool


def last_change_id(session: Session) -> int:
    return int(session.scalar(select(func.max(RunChange.id))) or 0)


def changes_after(
    session: Session, after: int, teams: frozenset[str] | None = None, *, limit: int = 1000
) -> list[Change]:
    q = select(RunChange).where(RunChange.id > after)
    if teams is not None:
        q = q.where(RunChange.team.in_(sorted(teams)))
    q = q.order_by(RunChange.id).limit(limit)
    return [Change(c.id, c.run_id, c.team, c.seq, c.status, c.final) for c in session.scalars(q)]


def prune_changes(session: Session, keep_seconds: float = KEEP_SECONDS) -> int:
    """Delete changes older than ``keep_seconds`` (commits); how many went."""
    n = session.execute(delete(RunChange).where(RunChange.at < time.time() - keep_seconds))
    session.commit()
    return int(getattr(n, "rowcount", 0) or 0)
