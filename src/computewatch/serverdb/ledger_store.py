"""The ledger in the server database: appending entries in the caller's transaction (so an
ingest and its ledger entry commit together or not at all), signed checkpoints, reading the
chain back, and the record of each run's declared model and compute.

Appends are serialised: on PostgreSQL by a transaction-scoped advisory lock (several server
processes append to one chain), on SQLite by the database's single writer.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping
from typing import Any, Final

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from sqlalchemy import delete, func, select, text
from sqlalchemy.orm import Session

from computewatch.ledger.chain import GENESIS, Entry, canonical, entry_hash, next_entry, utc_now
from computewatch.ledger.keys import CHECKPOINT_KIND, checkpoint_body
from computewatch.ledger.verify import PRUNE_KIND
from computewatch.serverdb.governance_models import LedgerEntryRow, LedgerStart, ModelRun

LEDGER_LOCK: Final = 7_261_533_002
"""pg_advisory_xact_lock key held while appending (any constant number; ours)."""

CHECKPOINT_EVERY: Final = 1000
"""A signed checkpoint after this many entries (and at every export)."""


def _lock(session: Session) -> None:
    if session.get_bind().dialect.name == "postgresql":
        session.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": LEDGER_LOCK})


def _entry(row: LedgerEntryRow) -> Entry:
    return Entry(row.seq, row.time, row.kind, json.loads(row.body), row.prev, row.hash)


def start(session: Session) -> tuple[int, str]:
    """``(first_seq, first_prev)`` of the kept chain."""
    row = session.get(LedgerStart, 1)
    return (1, GENESIS) if row is None else (row.first_seq, row.first_prev)


def head(session: Session) -> Entry | None:
    row = session.scalars(select(LedgerEntryRow).order_by(LedgerEntryRow.seq.desc()).limit(1))
    found = row.first()
    return None if found is None else _entry(found)


def append(session: Session, kind: str, body: Mapping[str, Any]) -> Entry:
    """Append one entry in the session's transaction (the caller commits)."""
    _lock(session)
    last = head(session)
    if last is None:
        first_seq, first_prev = start(session)
        entry = next_entry(None, kind, body)
        if (first_seq, first_prev) != (1, GENESIS):  # the chain was pruned to nothing
            entry = _following(first_seq, first_prev, kind, body)
    else:
        entry = next_entry(last, kind, body)
    session.add(
        LedgerEntryRow(
            seq=entry.seq,
            time=entry.time,
            kind=entry.kind,
            body=canonical(entry.body).decode("utf-8"),
            prev=entry.prev,
            hash=entry.hash,
        )
    )
    session.flush()
    return entry


def _following(seq: int, prev: str, kind: str, body: Mapping[str, Any]) -> Entry:
    when = utc_now()
    clean = json.loads(canonical(body))
    return Entry(seq, when, kind, clean, prev, entry_hash(seq, when, kind, clean, prev))


def checkpoint(session: Session, key: Ed25519PrivateKey) -> Entry | None:
    """Append a checkpoint signing the current head (none when the head is one already)."""
    _lock(session)
    last = head(session)
    if last is None or last.kind == CHECKPOINT_KIND:
        return None
    return append(session, CHECKPOINT_KIND, checkpoint_body(last, key))


def due_for_checkpoint(session: Session) -> bool:
    last_cp = session.scalar(
        select(func.max(LedgerEntryRow.seq)).where(LedgerEntryRow.kind == CHECKPOINT_KIND)
    )
    top = session.scalar(select(func.max(LedgerEntryRow.seq)))
    return top is not None and top - (last_cp or 0) >= CHECKPOINT_EVERY


def first_unsigned(session: Session) -> Entry | None:
    """The oldest entry after the last checkpoint (None when there is none)."""
    last_cp = session.scalar(
        select(func.max(LedgerEntryRow.seq)).where(LedgerEntryRow.kind == CHECKPOINT_KIND)
    )
    row = session.scalars(
        select(LedgerEntryRow)
        .where(LedgerEntryRow.seq > (last_cp or 0))
        .order_by(LedgerEntryRow.seq)
        .limit(1)
    ).first()
    return None if row is None else _entry(row)


def entries(session: Session, *, batch: int = 5000) -> Iterator[Entry]:
    """Every kept entry in chain order, read in batches."""
    after = -1
    while True:
        rows = session.scalars(
            select(LedgerEntryRow)
            .where(LedgerEntryRow.seq > after)
            .order_by(LedgerEntryRow.seq)
            .limit(batch)
        ).all()
        if not rows:
            return
        for r in rows:
            yield _entry(r)
        after = rows[-1].seq


def count(session: Session) -> int:
    return int(session.scalar(select(func.count()).select_from(LedgerEntryRow)) or 0)


def prune_before(session: Session, cutoff_time: str) -> int:
    """Delete entries older than ``cutoff_time`` (ISO 8601 UTC), remembering where the kept
    chain starts so that it still verifies. Returns how many were deleted."""
    _lock(session)
    keep = session.scalars(
        select(LedgerEntryRow)
        .where(LedgerEntryRow.time >= cutoff_time)
        .order_by(LedgerEntryRow.seq)
        .limit(1)
    ).first()
    if keep is None:
        return 0
    gone = session.execute(delete(LedgerEntryRow).where(LedgerEntryRow.seq < keep.seq))
    deleted = int(getattr(gone, "rowcount", 0) or 0)
    if deleted:
        row = session.get(LedgerStart, 1)
        if row is None:
            session.add(LedgerStart(id=1, first_seq=keep.seq, first_prev=keep.prev,
                                    pruned_at=time.time()))  # fmt: skip
        else:
            row.first_seq, row.first_prev, row.pruned_at = keep.seq, keep.prev, time.time()
        # the pruning itself goes into the chain: a start moved without it is tampering
        append(session, PRUNE_KIND, {"first_seq": keep.seq, "first_prev": keep.prev,
                                     "before": cutoff_time, "deleted": deleted})  # fmt: skip
    return deleted


def record_model_run(session: Session, row: ModelRun) -> None:
    """Insert or replace a run's declared model and compute (the newest upload wins)."""
    existing = session.get(ModelRun, row.run_id)
    if existing is None:
        session.add(row)
        return
    for column in [c.key for c in ModelRun.__table__.columns]:
        setattr(existing, column, getattr(row, column))
