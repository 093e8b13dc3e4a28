"""The ledger in the server database, a transparency log: appending entries in the caller's
transaction (so an ingest and its ledger entry commit together or not at all) with the hashes of
the Merkle tree's complete subtrees they close, signed tree heads, witnesses' cosignatures,
inclusion and consistency proofs from the stored subtrees, reading the log back, and the record
of each run's declared model and compute.

Appends are serialised: on PostgreSQL by a transaction-scoped advisory lock (several server
processes append to one log), on SQLite by the database's single writer. An append reads the
tree's size and the O(log n) subtree hashes of its right edge, and writes the entry and the
subtrees it completes (two rows on average): no state is kept between transactions, so several
processes append to one tree.
"""

from __future__ import annotations

import time as _time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from sqlalchemy import delete, func, select, text
from sqlalchemy.orm import Session

from computewatch.ledger.chain import LedgerError, utc_now
from computewatch.ledger.jcs import loads as jcs_loads
from computewatch.ledger.keys import decode_public, encode_public, key_id
from computewatch.ledger.log import LogEntry, clean_body, line_from_parts
from computewatch.ledger.merkle import (
    CompactRange,
    consistency_proof,
    inclusion_proof,
    leaf_hash,
    needed_nodes,
    node_hash,
)
from computewatch.ledger.note import (
    Checkpoint,
    cosigner_key_hash,
    parse_checkpoint,
    parse_signature_line,
    sign_checkpoint,
    signature_line,
)
from computewatch.ledger.verify import PRUNE_KIND
from computewatch.serverdb.governance_models import (
    LedgerCosignature,
    LedgerEntryRow,
    LedgerHead,
    LedgerMeta,
    LedgerNode,
    LedgerStart,
    ModelRun,
)

LEDGER_LOCK: Final = 7_261_533_002
"""pg_advisory_xact_lock key held while appending or signing (any constant number; ours)."""
ORIGIN_PREFIX: Final = "computewatch.ledger/"

__all__ = [
    "LEDGER_LOCK",
    "Head",
    "add_cosignature",
    "append",
    "consistency",
    "cosigned_heads",
    "count",
    "entries",
    "head_at",
    "inclusion",
    "latest_head",
    "lines",
    "origin",
    "prefix",
    "prune_before",
    "record_model_run",
    "root_at",
    "sign_head",
    "size",
    "start",
]


def node_id(level: int, index: int) -> int:
    return level << 48 | index


def _lock(session: Session) -> None:
    if session.get_bind().dialect.name == "postgresql":
        session.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": LEDGER_LOCK})


def start(session: Session) -> int:
    """The seq of the first kept entry (1 unless older entries were pruned)."""
    row = session.get(LedgerStart, 1)
    return 1 if row is None else row.first_seq


def size(session: Session) -> int:
    """The tree's size: the last entry's seq (pruned entries still count)."""
    top = session.scalar(select(func.max(LedgerEntryRow.seq)))
    return int(top) if top is not None else start(session) - 1


def _edge_ids(n: int) -> list[int]:
    """The ids of the complete subtrees whose hashes make the compact range of ``n`` leaves,
    largest first."""
    return [node_id(lv, (n >> lv) - 1) for lv in range(n.bit_length() - 1, -1, -1) if n >> lv & 1]


def _nodes(session: Session, ids: Sequence[int]) -> dict[int, bytes]:
    if not ids:
        return {}
    rows = session.execute(select(LedgerNode.id, LedgerNode.hash).where(LedgerNode.id.in_(ids)))
    return {int(i): bytes(h) for i, h in rows}


def compact_range(session: Session, n: int) -> CompactRange:
    ids = _edge_ids(n)
    found = _nodes(session, ids)
    missing = [i for i in ids if i not in found]
    if missing:
        level, index = missing[0] >> 48, missing[0] & ((1 << 48) - 1)
        raise LedgerError(
            f"the ledger's tree lacks the hash of subtree ({level}, {index}) of a tree of {n} "
            "entries: its subtree hashes were deleted or never written (ledger verify --db)"
        )
    levels = [i >> 48 for i in ids]
    return CompactRange(n, [(lv, found[i]) for lv, i in zip(levels, ids, strict=True)])


def root_at(session: Session, n: int) -> bytes:
    return compact_range(session, n).root()


def prefix(session: Session) -> list[bytes]:
    """The compact range of the pruned entries (those before :func:`start`)."""
    return [h for _, h in compact_range(session, start(session) - 1).stack]


def _sql(session: Session, sql: str) -> str:
    """``sql`` written with ``?`` placeholders, in the driver's own style (psycopg: ``%s``)."""
    return sql if session.get_bind().dialect.paramstyle == "qmark" else sql.replace("?", "%s")


def append(session: Session, kind: str, body: Mapping[str, Any]) -> LogEntry:
    """Append one entry in the session's transaction (the caller commits), with the hashes of
    the subtrees it completes. Four statements on the transaction's own driver cursor (the
    ingest's path: through the ORM, each statement cost more than all the hashing)."""
    if not kind or not isinstance(kind, str):
        raise LedgerError("a ledger entry needs a kind")
    clean, body_text = clean_body(body)
    _lock(session)
    cur = session.connection().connection.cursor()  # the DB-API cursor, in this transaction
    try:
        cur.execute("SELECT max(seq) FROM ledger_entries")
        (top,) = cur.fetchone() or (None,)
        n = int(top) if top is not None else start(session) - 1
        ids = _edge_ids(n)
        edge: list[tuple[int, bytes]] = []
        if ids:
            marks = ",".join("?" * len(ids))
            cur.execute(_sql(session, f"SELECT id, hash FROM ledger_nodes WHERE id IN ({marks})"),
                        tuple(ids))  # fmt: skip
            found: dict[int, bytes] = {int(i): bytes(h) for i, h in cur.fetchall()}
            if len(found) != len(ids):
                compact_range(session, n)  # says which subtree is missing
            edge = [(i >> 48, found[i]) for i in ids]
        seq, when = n + 1, utc_now()
        h = leaf_hash(line_from_parts(seq, when, kind, body_text))
        rows = [(node_id(0, n), h)]
        level, index = 0, n
        while edge and edge[-1][0] == level:
            _, left = edge.pop()
            h, level, index = node_hash(left, h), level + 1, index >> 1
            rows.append((node_id(level, index), h))
        cur.execute(
            _sql(session, "INSERT INTO ledger_entries (seq, time, kind, body) VALUES (?, ?, ?, ?)"),
            (seq, when, kind, body_text),
        )
        cur.executemany(_sql(session, "INSERT INTO ledger_nodes (id, hash) VALUES (?, ?)"), rows)
    finally:
        cur.close()
    return LogEntry(seq, when, kind, clean)


# -- reading ---------------------------------------------------------------------------------------


def entries(
    session: Session, *, upto: int | None = None, batch: int = 5000, after: int = 0
) -> Iterator[LogEntry]:
    """Every kept entry in order (up to seq ``upto``), read in batches; a body that is not
    JSON (the database altered) is a :class:`LedgerError` naming the entry."""
    for seq, when, kind, body in _rows(session, upto=upto, batch=batch, after=after):
        try:
            doc = jcs_loads(body)
        except (ValueError, RecursionError) as e:
            raise LedgerError(
                f"ledger entry {seq} cannot be read: its body is not JSON ({e}); the database "
                "was altered ('computewatch ledger verify --db URL' checks the whole log)"
            ) from None
        yield LogEntry(seq, when, kind, doc if isinstance(doc, dict) else {})


def _rows(
    session: Session, *, upto: int | None, batch: int, after: int = 0
) -> Iterator[tuple[int, str, str, str]]:
    while True:
        q = (
            select(
                LedgerEntryRow.seq, LedgerEntryRow.time, LedgerEntryRow.kind, LedgerEntryRow.body
            )
            .where(LedgerEntryRow.seq > after)
            .order_by(LedgerEntryRow.seq)
            .limit(batch)
        )
        if upto is not None:
            q = q.where(LedgerEntryRow.seq <= upto)
        rows = session.execute(q).all()
        if not rows:
            return
        for r in rows:
            yield int(r[0]), r[1], r[2], r[3]
        after = int(rows[-1][0])


def lines(session: Session, *, upto: int | None = None, batch: int = 5000) -> Iterator[bytes]:
    """Every kept entry's bytes, in order (up to seq ``upto``)."""
    for seq, when, kind, body in _rows(session, upto=upto, batch=batch):
        yield line_from_parts(seq, when, kind, body)


def leaves(session: Session, first: int, upto: int, *, batch: int = 20000) -> Iterator[bytes]:
    """The stored leaf hashes of entries ``first`` to ``upto``, in order (a missing one is a
    :class:`LedgerError` naming it)."""
    seq = first
    while seq <= upto:
        last = min(upto, seq + batch - 1)
        rows = dict(
            session.execute(
                select(LedgerNode.id, LedgerNode.hash).where(
                    LedgerNode.id >= node_id(0, seq - 1), LedgerNode.id <= node_id(0, last - 1)
                )
            ).all()
        )
        for s in range(seq, last + 1):
            h = rows.get(node_id(0, s - 1))
            if h is None:
                raise LedgerError(f"the tree stores no leaf hash for entry {s}")
            yield bytes(h)
        seq = last + 1


def count(session: Session) -> int:
    return int(session.scalar(select(func.count()).select_from(LedgerEntryRow)) or 0)


def entry(session: Session, seq: int) -> bytes | None:
    row = session.get(LedgerEntryRow, seq)
    return None if row is None else line_from_parts(row.seq, row.time, row.kind, row.body)


# -- heads and cosignatures ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Head:
    size: int
    root: bytes
    signed_at: int
    key_id: str
    public_key: str
    note: str
    """The log's checkpoint note (its own signature only)."""
    cosignatures: tuple[str, ...] = ()
    """Witnesses' signature lines."""

    def text(self) -> str:
        """The note with the witnesses' cosignatures appended."""
        return self.note + "".join(line + "\n" for line in self.cosignatures)

    def checkpoint(self) -> Checkpoint:
        return parse_checkpoint(self.text())


def origin(session: Session) -> str | None:
    row = session.get(LedgerMeta, "origin")
    return None if row is None else row.value


def _head(session: Session, row: LedgerHead) -> Head:
    cosigs = session.scalars(
        select(LedgerCosignature.line)
        .where(LedgerCosignature.size == row.size)
        .order_by(LedgerCosignature.witness, LedgerCosignature.key_hash)
    ).all()
    return Head(
        row.size,
        bytes(row.root),
        row.signed_at,
        row.key_id,
        row.public_key,
        row.note,
        tuple(cosigs),
    )


def latest_head(session: Session) -> Head | None:
    row = session.scalars(select(LedgerHead).order_by(LedgerHead.size.desc()).limit(1)).first()
    return None if row is None else _head(session, row)


def head_at(session: Session, n: int) -> Head | None:
    row = session.get(LedgerHead, n)
    return None if row is None else _head(session, row)


def heads(session: Session, *, newest: int | None = None) -> Iterator[Head]:
    """The stored heads, smallest first (without cosignatures): every one, or the ``newest``
    ones and every head a witness cosigned."""
    q = select(LedgerHead)
    if newest is not None:
        floor = session.scalar(
            select(LedgerHead.size).order_by(LedgerHead.size.desc()).offset(newest - 1).limit(1)
        )
        if floor is not None:
            cosigned = select(LedgerCosignature.size)
            q = q.where((LedgerHead.size >= floor) | LedgerHead.size.in_(cosigned))
    for row in session.scalars(q.order_by(LedgerHead.size)):
        yield Head(row.size, bytes(row.root), row.signed_at, row.key_id, row.public_key, row.note)


KEEP_EVERY_HEAD_SECONDS: Final = 86_400.0
"""Heads younger than this are all kept; older ones, one per hour and every cosigned one (a
server signing every 10 s would otherwise keep three million a year)."""


def thin_heads(session: Session, now: float) -> int:
    """Delete heads older than :data:`KEEP_EVERY_HEAD_SECONDS` but the first of each hour, the
    cosigned ones and the newest (proofs need no stored head: they come from the subtree
    hashes). Returns how many were deleted."""
    cutoff = int(now - KEEP_EVERY_HEAD_SECONDS)
    newest = session.scalar(select(func.max(LedgerHead.size)))
    rows = session.execute(
        select(LedgerHead.size, LedgerHead.signed_at)
        .where(LedgerHead.signed_at < cutoff, LedgerHead.size != newest)
        .where(LedgerHead.size.not_in(select(LedgerCosignature.size)))
        .order_by(LedgerHead.size)
    ).all()
    hours: set[int] = set()
    gone = []
    for size_, signed_at in rows:
        hour = int(signed_at) // 3600
        if hour in hours:
            gone.append(size_)
        hours.add(hour)
    for i in range(0, len(gone), 500):
        session.execute(delete(LedgerHead).where(LedgerHead.size.in_(gone[i : i + 500])))
    return len(gone)


def head_keys(session: Session) -> dict[str, str]:
    """Key id -> base64 public key of every key a stored head was signed with."""
    return {
        kid: pk
        for kid, pk in session.execute(select(LedgerHead.key_id, LedgerHead.public_key).distinct())
    }


def sign_head(session: Session, key: Ed25519PrivateKey, *, now: float | None = None) -> Head:
    """Sign the tree at its current size (the caller commits); the latest head when it covers
    the tree already. The log's origin is fixed at its first head:
    ``computewatch.ledger/<id of the first key>``."""
    _lock(session)
    n = size(session)
    latest = latest_head(session)
    if latest is not None and latest.size >= n:
        return latest
    name = origin(session)
    if name is None:
        name = ORIGIN_PREFIX + key_id(key.public_key())
        session.add(LedgerMeta(name="origin", value=name))
    root = root_at(session, n)
    t = int(_time.time() if now is None else now)
    cp = sign_checkpoint(name, n, root, t, key)
    row = LedgerHead(
        size=n,
        root=root,
        signed_at=t,
        key_id=key_id(key.public_key()),
        public_key=encode_public(key.public_key()),
        note=cp.text(),
    )
    session.add(row)
    session.flush()
    return Head(n, root, t, row.key_id, row.public_key, row.note)


def add_cosignature(session: Session, n: int, line: str, public_key: str) -> bool:
    """Keep a witness's cosignature of the head at size ``n``; a :class:`LedgerError` when there
    is no such head or the signature does not hold. False when it was held already."""
    held = head_at(session, n)
    if held is None:
        raise LedgerError(f"no signed head at size {n}")
    sig = parse_signature_line(line)
    key = decode_public(public_key)
    if sig.key_hash != cosigner_key_hash(sig.name, key):
        raise LedgerError("the cosignature's key hash is not that of the public key given")
    cp = parse_checkpoint(held.note).with_signature(sig)
    t = cp.cosigned_by(sig.name, key)
    if t is None:
        raise LedgerError(f"the cosignature by {sig.name} does not verify on the head at size {n}")
    kh = sig.key_hash.hex()
    if session.get(LedgerCosignature, (n, sig.name, kh)) is not None:
        return False
    session.add(
        LedgerCosignature(
            size=n,
            witness=sig.name,
            key_hash=kh,
            public_key=encode_public(key),
            signed_at=t,
            line=signature_line(sig),
            received_at=_time.time(),
        )
    )
    session.flush()
    return True


def cosigned_heads(session: Session, upto: int) -> list[Head]:
    """For each witness, the newest head up to size ``upto`` it cosigned (with every
    cosignature that head holds)."""
    rows = session.execute(
        select(
            LedgerCosignature.witness, LedgerCosignature.key_hash, func.max(LedgerCosignature.size)
        )
        .where(LedgerCosignature.size <= upto)
        .group_by(LedgerCosignature.witness, LedgerCosignature.key_hash)
    ).all()
    out: list[Head] = []
    for n in sorted({int(r[2]) for r in rows}):
        h = head_at(session, n)
        if h is not None:
            out.append(h)
    return out


# -- proofs ----------------------------------------------------------------------------------------


def _getter(session: Session, build: Any) -> Any:
    wanted = needed_nodes(build)
    found = _nodes(session, [node_id(lv, i) for lv, i in wanted])

    def node(level: int, index: int) -> bytes:
        h = found.get(node_id(level, index))
        if h is None:
            raise LedgerError(f"the ledger's tree lacks the hash of subtree ({level}, {index})")
        return h

    return node


def inclusion(session: Session, seq: int, n: int) -> list[bytes]:
    """The audit path of entry ``seq`` in the tree of ``n`` entries (one query)."""

    def build(node: Any) -> list[bytes]:
        return inclusion_proof(node, seq - 1, n)

    return build(_getter(session, build))


def consistency(session: Session, old: int, new: int) -> list[bytes]:
    """The proof that the tree of ``old`` entries is a prefix of the tree of ``new`` (one
    query)."""

    def build(node: Any) -> list[bytes]:
        return consistency_proof(node, old, new)

    return build(_getter(session, build))


# -- retention and models --------------------------------------------------------------------------


def prune_before(
    session: Session, cutoff_time: str, carry: Callable[[int], Mapping[str, Any]] | None = None
) -> int:
    """Delete entries older than ``cutoff_time`` (ISO 8601 UTC), remembering where the kept log
    starts; the tree's subtree hashes stay, so roots and proofs still cover every entry. The
    prune entry records it, with ``carry(first kept seq)`` as its ``governance`` (what the
    deleted entries added up to). Returns how many were deleted."""
    _lock(session)
    keep = session.scalar(
        select(func.min(LedgerEntryRow.seq)).where(LedgerEntryRow.time >= cutoff_time)
    )
    if keep is None or keep <= start(session):
        return 0
    carried = None if carry is None else carry(keep)
    gone = session.execute(delete(LedgerEntryRow).where(LedgerEntryRow.seq < keep))
    deleted = int(getattr(gone, "rowcount", 0) or 0)
    if deleted:
        row = session.get(LedgerStart, 1)
        if row is None:
            session.add(LedgerStart(id=1, first_seq=keep, first_prev="", pruned_at=_time.time()))
        else:
            row.first_seq, row.first_prev, row.pruned_at = keep, "", _time.time()
        session.flush()
        # the pruning itself goes into the log: a start moved without it is tampering
        body: dict[str, Any] = {"first_seq": keep, "before": cutoff_time, "deleted": deleted}
        if carried is not None:
            body["governance"] = dict(carried)
        append(session, PRUNE_KIND, body)
    return deleted


def record_model_run(session: Session, row: ModelRun) -> None:
    """Insert or replace a run's declared model and compute (the newest upload wins)."""
    existing = session.get(ModelRun, row.run_id)
    if existing is None:
        session.add(row)
        return
    for column in [c.key for c in ModelRun.__table__.columns]:
        setattr(existing, column, getattr(row, column))
