"""Signed usage reports: the registry of node keys, and what the check of each run's latest
upload found.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "node_keys",
        sa.Column("key_id", sa.String(16), primary_key=True),
        sa.Column("public_key", sa.String(64), nullable=False),
        sa.Column("team", sa.String(200), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("registered_at", sa.Float, nullable=False),
        sa.Column("revoked_at", sa.Float, nullable=True),
    )
    op.create_index("ix_node_keys_team", "node_keys", ["team"])
    op.create_table(
        "run_signatures",
        sa.Column(
            "run_id",
            sa.String(64),
            sa.ForeignKey("runs.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("key_id", sa.String(16), nullable=True),
        sa.Column("checked_at", sa.Float, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("run_signatures")
    op.drop_index("ix_node_keys_team", table_name="node_keys")
    op.drop_table("node_keys")
