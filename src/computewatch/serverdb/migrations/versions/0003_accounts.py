"""Know-your-customer: accounts (personal data encrypted) and the access log.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "accounts",
        sa.Column("name", sa.String(200), primary_key=True),
        sa.Column("country", sa.String(2), nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("verified_at", sa.Float, nullable=True),
        sa.Column("reverify_due", sa.Float, nullable=True),
        sa.Column("caps", sa.JSON, nullable=False),
        sa.Column("pii", sa.LargeBinary, nullable=False),
        sa.Column("pii_sha256", sa.String(64), nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
    )
    op.create_table(
        "access_log",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("at", sa.Float, nullable=False),
        sa.Column("team", sa.String(200), nullable=True),
        sa.Column("token_id", sa.Integer, nullable=True),
        sa.Column("action", sa.String(300), nullable=False),
        sa.Column("ip", sa.LargeBinary, nullable=False),
    )
    op.create_index("ix_access_log_team_at", "access_log", ["team", "at"])


def downgrade() -> None:
    op.drop_table("access_log")
    op.drop_table("accounts")
