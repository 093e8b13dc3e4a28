"""A run's series as parts appended per upload: ``run_series_parts`` replaces ``run_series``.

A full upload writes one part holding every series; a live upload that names the upload its
points continue (``series_base``) appends one part holding only the points from each series'
first new bucket on. Reading merges a run's parts in order (computewatch.serverdb.series).
The rows of ``run_series`` become one part per run, with the run's seq.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

_OLD = sa.table(
    "run_series",
    sa.column("id", sa.Integer),
    sa.column("run_id", sa.String),
    sa.column("name", sa.String),
    sa.column("labels", sa.JSON),
    sa.column("bucket_seconds", sa.Float),
    sa.column("points", sa.JSON),
)
_RUNS = sa.table("runs", sa.column("id", sa.String), sa.column("seq", sa.BigInteger))


def _parts() -> sa.Table:
    return op.create_table(
        "run_series_parts",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column(
            "run_id",
            sa.String(64),
            sa.ForeignKey("runs.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("seq", sa.BigInteger, nullable=False),
        sa.Column("series", sa.JSON, nullable=False),
    )


def upgrade() -> None:
    parts = _parts()
    op.create_index("ix_run_series_parts_run_id", "run_series_parts", ["run_id"])
    conn = op.get_bind()
    seqs = dict(conn.execute(sa.select(_RUNS.c.id, _RUNS.c.seq)).all())
    by_run: dict[str, list[dict[str, Any]]] = defaultdict(list)
    q = sa.select(_OLD).order_by(_OLD.c.run_id, _OLD.c.id)
    for row in conn.execute(q):
        by_run[row.run_id].append(
            {
                "name": row.name,
                "labels": row.labels,
                "bucket_seconds": row.bucket_seconds,
                "points": row.points,
            }
        )
    if by_run:
        conn.execute(
            sa.insert(parts),
            [{"run_id": r, "seq": seqs.get(r, 0), "series": s} for r, s in by_run.items()],
        )
    op.drop_index("ix_run_series_run_id", table_name="run_series")
    op.drop_table("run_series")


def downgrade() -> None:
    op.create_table(
        "run_series",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column(
            "run_id",
            sa.String(64),
            sa.ForeignKey("runs.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("labels", sa.JSON, nullable=False),
        sa.Column("bucket_seconds", sa.Float, nullable=False),
        sa.Column("points", sa.JSON, nullable=False),
    )
    op.create_index("ix_run_series_run_id", "run_series", ["run_id"])
    old = sa.table(
        "run_series_parts",
        sa.column("run_id", sa.String),
        sa.column("series", sa.JSON),
        sa.column("id", sa.Integer),
    )
    conn = op.get_bind()
    from computewatch.serverdb.series import merge_parts  # the same merge as the server's

    by_run: dict[str, list[list[dict[str, Any]]]] = defaultdict(list)
    for run_id, series in conn.execute(sa.select(old.c.run_id, old.c.series).order_by(old.c.id)):
        by_run[run_id].append(series)
    rows = [
        {"run_id": r, **{k: s[k] for k in ("name", "labels", "bucket_seconds", "points")}}
        for r, chunks in by_run.items()
        for s in merge_parts(chunks)
    ]
    if rows:
        conn.execute(sa.insert(_OLD), rows)
    op.drop_index("ix_run_series_parts_run_id", table_name="run_series_parts")
    op.drop_table("run_series_parts")
