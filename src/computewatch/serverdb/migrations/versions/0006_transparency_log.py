"""The ledger becomes a transparency log: the Merkle tree's subtree hashes, signed heads (C2SP
checkpoint notes), witnesses' cosignatures and the log's settings; entries lose the hash chain's
``prev`` and ``hash`` (their bodies are rewritten in RFC 8785 form, the tree built over them,
and an entry ``chain-migrated`` records the old chain's last hash so an export of the old format
still ties to the new log); at most one open obligation per model and tier.

Entries pruned before this migration (a chain starting past seq 1) become leaves of a fixed
form, ``{"body":{},"kind":"pruned","seq":N,"time":""}`` (docs/ledger.md).

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import sqlalchemy as sa
from alembic import op

from computewatch.ledger.jcs import MAX_EXACT_INT, dumps
from computewatch.ledger.log import line_from_parts
from computewatch.ledger.merkle import leaf_hash, node_hash

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

_BATCH = 5000


def _node_id(level: int, index: int) -> int:
    return level << 48 | index


def _exact(v: Any) -> Any:
    """A body as RFC 8785 carries it: integers beyond 2**53 become decimal strings."""
    if isinstance(v, bool) or v is None:
        return v
    if isinstance(v, int) and abs(v) > MAX_EXACT_INT:
        return str(v)
    if isinstance(v, dict):
        return {k: _exact(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_exact(x) for x in v]
    return v


class _Tree:
    """Appends leaves and writes the complete subtrees they close."""

    def __init__(self, conn: sa.Connection, nodes: sa.Table) -> None:
        self.conn, self.table = conn, nodes
        self.size = 0
        self.stack: list[tuple[int, bytes]] = []
        self.pending: list[dict[str, Any]] = []

    def append(self, line: bytes) -> None:
        h, level, index = leaf_hash(line), 0, self.size
        self.pending.append({"id": _node_id(0, index), "hash": h})
        while self.stack and self.stack[-1][0] == level:
            _, left = self.stack.pop()
            h, level, index = node_hash(left, h), level + 1, index >> 1
            self.pending.append({"id": _node_id(level, index), "hash": h})
        self.stack.append((level, h))
        self.size += 1
        if len(self.pending) >= _BATCH:
            self.flush()

    def flush(self) -> None:
        if self.pending:
            self.conn.execute(sa.insert(self.table), self.pending)
            self.pending = []


def upgrade() -> None:
    nodes = op.create_table(
        "ledger_nodes",
        sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("hash", sa.LargeBinary(32), nullable=False),
    )
    op.create_table(
        "ledger_heads",
        sa.Column("size", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("root", sa.LargeBinary(32), nullable=False),
        sa.Column("signed_at", sa.BigInteger, nullable=False),
        sa.Column("key_id", sa.String(16), nullable=False),
        sa.Column("public_key", sa.String(64), nullable=False),
        sa.Column("note", sa.Text, nullable=False),
    )
    op.create_table(
        "ledger_cosignatures",
        sa.Column("size", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("witness", sa.String(200), primary_key=True),
        sa.Column("key_hash", sa.String(8), primary_key=True),
        sa.Column("public_key", sa.String(64), nullable=False),
        sa.Column("signed_at", sa.BigInteger, nullable=False),
        sa.Column("line", sa.Text, nullable=False),
        sa.Column("received_at", sa.Float, nullable=False),
    )
    op.create_table(
        "ledger_meta",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("value", sa.Text, nullable=False),
    )
    conn = op.get_bind()
    tree = _Tree(conn, nodes)
    entries = sa.table(
        "ledger_entries",
        sa.column("seq", sa.BigInteger),
        sa.column("time", sa.String),
        sa.column("kind", sa.String),
        sa.column("body", sa.Text),
        sa.column("hash", sa.String),
    )
    start = conn.execute(sa.text("SELECT first_seq FROM ledger_start WHERE id = 1")).first()
    first = 1 if start is None else int(start[0])
    for seq in range(1, first):
        tree.append(line_from_parts(seq, "", "pruned", "{}"))
    last: tuple[int, str] | None = None
    count, after = 0, 0
    while True:
        rows = conn.execute(
            sa.select(entries.c.seq, entries.c.time, entries.c.kind, entries.c.body, entries.c.hash)
            .where(entries.c.seq > after)
            .order_by(entries.c.seq)
            .limit(_BATCH)
        ).all()
        if not rows:
            break
        for seq, time, kind, body, digest in rows:
            text = dumps(_exact(json.loads(body))).decode("utf-8")
            if text != body:
                conn.execute(sa.update(entries).where(entries.c.seq == seq).values(body=text))
            tree.append(line_from_parts(seq, time, kind, text))
            last, count = (seq, digest), count + 1
        after = rows[-1][0]
    with op.batch_alter_table("ledger_entries") as batch:
        batch.drop_column("prev")
        batch.drop_column("hash")
    if last is not None:  # the old chain's head, committed to in the new tree
        seq = last[0] + 1
        when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        body = dumps(
            {"format": 1, "last_seq": last[0], "last_hash": last[1], "entries": count}
        ).decode("utf-8")
        conn.execute(
            sa.text("INSERT INTO ledger_entries (seq, time, kind, body) VALUES (:s, :t, :k, :b)"),
            {"s": seq, "t": when, "k": "chain-migrated", "b": body},
        )
        tree.append(line_from_parts(seq, when, "chain-migrated", body))
    tree.flush()
    _one_open_obligation(conn, tree)
    op.create_index(
        "ux_obligations_open",
        "obligations",
        ["model", "tier"],
        unique=True,
        sqlite_where=sa.text("state = 'open'"),
        postgresql_where=sa.text("state = 'open'"),
    )


def _one_open_obligation(conn: sa.Connection, tree: _Tree) -> None:
    """Duplicate open obligations (a status request racing the upkeep could open two) become
    ``merged`` into the oldest, each with an ``obligation-merged`` entry."""
    rows = conn.execute(
        sa.text("SELECT id, model, tier FROM obligations WHERE state = 'open' ORDER BY id")
    ).all()
    kept: dict[tuple[str, str], int] = {}
    for oid, model, tier in rows:
        into = kept.setdefault((model, tier), oid)
        if into == oid:
            continue
        conn.execute(sa.text("UPDATE obligations SET state = 'merged' WHERE id = :i"), {"i": oid})
        seq = tree.size + 1
        when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        body = dumps({"obligation": oid, "into": into, "model": model, "tier": tier}).decode()
        conn.execute(
            sa.text(
                "INSERT INTO ledger_entries (seq, time, kind, body) "
                "VALUES (:s, :t, 'obligation-merged', :b)"
            ),
            {"s": seq, "t": when, "b": body},
        )
        tree.append(line_from_parts(seq, when, "obligation-merged", body))
    tree.flush()


def downgrade() -> None:
    op.drop_index("ux_obligations_open", table_name="obligations")
    with op.batch_alter_table("ledger_entries") as batch:
        batch.add_column(sa.Column("prev", sa.String(64), nullable=False, server_default=""))
        batch.add_column(sa.Column("hash", sa.String(64), nullable=False, server_default=""))
    for table in ("ledger_meta", "ledger_cosignatures", "ledger_heads", "ledger_nodes"):
        op.drop_table(table)
