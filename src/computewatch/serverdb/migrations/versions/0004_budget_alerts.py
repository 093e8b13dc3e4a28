"""Budget alerts delivered: one row per budget, period and alert kind (the dashboard's
"once per period").

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "budget_alerts_sent",
        sa.Column(
            "budget_id",
            sa.Integer,
            sa.ForeignKey("budgets.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("period_start", sa.Float, primary_key=True),
        sa.Column("kind", sa.String(16), primary_key=True),
        sa.Column("sent_at", sa.Float, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("budget_alerts_sent")
