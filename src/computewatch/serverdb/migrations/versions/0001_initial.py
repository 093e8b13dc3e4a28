"""The initial schema: runs (denormalized figures), run_docs (summary, documents), run_tags,
run_series, run_changes, tokens, web_sessions, budgets.

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "runs",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("team", sa.String(200), nullable=False),
        sa.Column("user", sa.String(200), nullable=False),
        sa.Column("project", sa.String(200), nullable=True),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("name", sa.String(500), nullable=True),
        sa.Column("status", sa.String(32), nullable=False),
        sa.Column("exit_code", sa.Integer, nullable=True),
        sa.Column("started_at", sa.Float, nullable=False),
        sa.Column("started_day", sa.String(10), nullable=False),
        sa.Column("ended_at", sa.Float, nullable=True),
        sa.Column("duration_seconds", sa.Float, nullable=True),
        sa.Column("gpu_model", sa.String(200), nullable=True),
        sa.Column("gpu_count", sa.Integer, nullable=False),
        sa.Column("gpu_hours", sa.Float, nullable=False),
        sa.Column("idle_gpu_hours", sa.Float, nullable=True),
        sa.Column("gpu_utilization", sa.Float, nullable=True),
        sa.Column("mfu", sa.Float, nullable=True),
        sa.Column("cpu_hours", sa.Float, nullable=True),
        sa.Column("cpu_method", sa.String(64), nullable=True),
        sa.Column("kwh", sa.Float, nullable=True),
        sa.Column("kwh_low", sa.Float, nullable=True),
        sa.Column("kwh_high", sa.Float, nullable=True),
        sa.Column("kwh_method", sa.String(64), nullable=True),
        sa.Column("cost_usd", sa.Float, nullable=True),
        sa.Column("cost_low", sa.Float, nullable=True),
        sa.Column("cost_high", sa.Float, nullable=True),
        sa.Column("cost_method", sa.String(64), nullable=True),
        sa.Column("co2e_kg", sa.Float, nullable=True),
        sa.Column("co2e_low", sa.Float, nullable=True),
        sa.Column("co2e_high", sa.Float, nullable=True),
        sa.Column("co2e_method", sa.String(64), nullable=True),
        sa.Column("seq", sa.BigInteger, nullable=False),
        sa.Column("final", sa.Boolean, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
        sa.Column("command", sa.JSON, nullable=False),
        sa.Column("tags", sa.JSON, nullable=False),
    )
    for col in ("team", "user", "project", "status", "started_at", "updated_at"):
        op.create_index(f"ix_runs_{col}", "runs", [col])
    op.create_index("ix_runs_team_started", "runs", ["team", "started_at"])
    op.create_index("ix_runs_started_id", "runs", ["started_at", "id"])

    op.create_table(
        "run_docs",
        sa.Column(
            "run_id",
            sa.String(64),
            sa.ForeignKey("runs.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("summary", sa.JSON, nullable=True),
        sa.Column("meta", sa.JSON, nullable=False),
    )

    op.create_table(
        "run_tags",
        sa.Column(
            "run_id",
            sa.String(64),
            sa.ForeignKey("runs.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("key", sa.String(200), primary_key=True),
        sa.Column("value", sa.String(1000), nullable=False),
    )
    op.create_index("ix_run_tags_key_value", "run_tags", ["key", "value"])

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

    op.create_table(
        "run_changes",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("team", sa.String(200), nullable=False),
        sa.Column("seq", sa.BigInteger, nullable=False),
        sa.Column("status", sa.String(32), nullable=False),
        sa.Column("final", sa.Boolean, nullable=False),
        sa.Column("at", sa.Float, nullable=False),
    )
    op.create_index("ix_run_changes_at", "run_changes", ["at"])

    op.create_table(
        "tokens",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("token_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("name", sa.String(200), nullable=True),
        sa.Column("team", sa.String(200), nullable=False),
        sa.Column("scope", sa.String(16), nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("last_used_at", sa.Float, nullable=True),
        sa.Column("revoked_at", sa.Float, nullable=True),
    )

    op.create_table(
        "web_sessions",
        sa.Column("id_hash", sa.String(64), primary_key=True),
        sa.Column(
            "token_id",
            sa.Integer,
            sa.ForeignKey("tokens.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("expires_at", sa.Float, nullable=False),
    )
    op.create_index("ix_web_sessions_expires_at", "web_sessions", ["expires_at"])

    op.create_table(
        "budgets",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("scope_kind", sa.String(16), nullable=False),
        sa.Column("scope_name", sa.String(200), nullable=False),
        sa.Column("metric", sa.String(16), nullable=False),
        sa.Column("amount", sa.Float, nullable=False),
        sa.Column("period", sa.String(8), nullable=False),
        sa.Column("thresholds", sa.JSON, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    op.create_index("ix_budgets_scope", "budgets", ["scope_kind", "scope_name"])


def downgrade() -> None:
    for table in (
        "budgets",
        "web_sessions",
        "tokens",
        "run_changes",
        "run_series",
        "run_tags",
        "run_docs",
        "runs",
    ):
        op.drop_table(table)
