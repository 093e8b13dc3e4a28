"""Governance: the ledger (hash-chained entries and where the kept chain starts), runs' declared
models with their compute by method, and obligations.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "ledger_entries",
        sa.Column("seq", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("time", sa.String(32), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("body", sa.Text, nullable=False),
        sa.Column("prev", sa.String(64), nullable=False),
        sa.Column("hash", sa.String(64), nullable=False),
    )
    op.create_index("ix_ledger_entries_kind", "ledger_entries", ["kind"])
    op.create_table(
        "ledger_start",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("first_seq", sa.BigInteger, nullable=False),
        sa.Column("first_prev", sa.String(64), nullable=False),
        sa.Column("pruned_at", sa.Float, nullable=False),
    )
    op.create_table(
        "model_runs",
        sa.Column("run_id", sa.String(64), primary_key=True),
        sa.Column("team", sa.String(200), nullable=False),
        sa.Column("model", sa.String(200), nullable=False),
        sa.Column("base_model", sa.String(200), nullable=True),
        sa.Column("stage", sa.String(32), nullable=False),
        sa.Column("parameters", sa.Float, nullable=True),
        sa.Column("status", sa.String(32), nullable=False),
        sa.Column("started_at", sa.Float, nullable=False),
        sa.Column("duration_seconds", sa.Float, nullable=False),
        sa.Column("gpu_hours", sa.Float, nullable=False),
        sa.Column("energy_kwh", sa.Float, nullable=True),
        sa.Column("counted", sa.Float, nullable=True),
        sa.Column("counted_low", sa.Float, nullable=True),
        sa.Column("counted_high", sa.Float, nullable=True),
        sa.Column("hardware", sa.Float, nullable=True),
        sa.Column("hardware_low", sa.Float, nullable=True),
        sa.Column("hardware_high", sa.Float, nullable=True),
        sa.Column("architecture", sa.Float, nullable=True),
        sa.Column("forecast_high", sa.Float, nullable=True),
        sa.Column("devices", sa.JSON, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
    )
    op.create_index("ix_model_runs_model", "model_runs", ["model"])
    op.create_table(
        "obligations",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("model", sa.String(200), nullable=False),
        sa.Column("tier", sa.String(64), nullable=False),
        sa.Column("trigger", sa.String(16), nullable=False),
        sa.Column("rule", sa.Text, nullable=False),
        sa.Column("judged_flop", sa.Float, nullable=True),
        sa.Column("method", sa.String(32), nullable=True),
        sa.Column("threshold", sa.Float, nullable=False),
        sa.Column("opened_at", sa.Float, nullable=False),
        sa.Column("deadline_at", sa.Float, nullable=True),
        sa.Column("state", sa.String(8), nullable=False),
        sa.Column("done_at", sa.Float, nullable=True),
        sa.Column("reference", sa.Text, nullable=True),
        sa.Column("alerted", sa.String(200), nullable=True),
    )
    op.create_index("ix_obligations_model_tier", "obligations", ["model", "tier"])


def downgrade() -> None:
    for table in ("obligations", "model_runs", "ledger_start", "ledger_entries"):
        op.drop_table(table)
