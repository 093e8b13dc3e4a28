"""The server database's tables (SQLAlchemy 2 typed declarative models).

One schema on SQLite and PostgreSQL. What filtering, sorting and usage need is denormalized into
indexed columns of ``runs`` (figures in the units their names say); the run's whole summary and
documents stay as JSON in ``run_docs``. The initial Alembic migration
(``migrations/versions/0001_initial.py``) creates exactly these tables: change both together.
"""

from __future__ import annotations

from typing import Any, ClassVar

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

__all__ = [
    "Base",
    "Budget",
    "NodeKey",
    "Run",
    "RunChange",
    "RunDoc",
    "RunSeriesPart",
    "RunSignature",
    "RunTag",
    "Token",
    "WebSession",
]


class Base(DeclarativeBase):
    type_annotation_map: ClassVar[dict[Any, Any]] = {dict[str, Any]: JSON, list[Any]: JSON}


class Run(Base):
    """One uploaded run: the highest ``seq`` received of it. Times are Unix seconds."""

    __tablename__ = "runs"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    team: Mapped[str] = mapped_column(String(200), index=True)
    user: Mapped[str] = mapped_column(String(200), index=True)
    project: Mapped[str | None] = mapped_column(String(200), index=True)
    host: Mapped[str] = mapped_column(String(255))
    name: Mapped[str | None] = mapped_column(String(500))
    status: Mapped[str] = mapped_column(String(32), index=True)
    exit_code: Mapped[int | None] = mapped_column(Integer)
    started_at: Mapped[float] = mapped_column(Float, index=True)
    started_day: Mapped[str] = mapped_column(String(10))
    """UTC date of ``started_at`` (YYYY-MM-DD): usage buckets group on it."""
    ended_at: Mapped[float | None] = mapped_column(Float)
    duration_seconds: Mapped[float | None] = mapped_column(Float)
    gpu_model: Mapped[str | None] = mapped_column(String(200))
    gpu_count: Mapped[int] = mapped_column(Integer)
    gpu_hours: Mapped[float] = mapped_column(Float)
    idle_gpu_hours: Mapped[float | None] = mapped_column(Float)
    gpu_utilization: Mapped[float | None] = mapped_column(Float)
    """Mean GPU utilization over the run's GPUs (0-1)."""
    mfu: Mapped[float | None] = mapped_column(Float)
    cpu_hours: Mapped[float | None] = mapped_column(Float)
    cpu_method: Mapped[str | None] = mapped_column(String(64))
    kwh: Mapped[float | None] = mapped_column(Float)
    kwh_low: Mapped[float | None] = mapped_column(Float)
    kwh_high: Mapped[float | None] = mapped_column(Float)
    kwh_method: Mapped[str | None] = mapped_column(String(64))
    cost_usd: Mapped[float | None] = mapped_column(Float)
    cost_low: Mapped[float | None] = mapped_column(Float)
    cost_high: Mapped[float | None] = mapped_column(Float)
    cost_method: Mapped[str | None] = mapped_column(String(64))
    co2e_kg: Mapped[float | None] = mapped_column(Float)
    co2e_low: Mapped[float | None] = mapped_column(Float)
    co2e_high: Mapped[float | None] = mapped_column(Float)
    co2e_method: Mapped[str | None] = mapped_column(String(64))
    seq: Mapped[int] = mapped_column(BigInteger)
    final: Mapped[bool] = mapped_column(Boolean)
    updated_at: Mapped[float] = mapped_column(Float, index=True)
    command: Mapped[list[Any]] = mapped_column(JSON)
    tags: Mapped[dict[str, Any]] = mapped_column(JSON)

    __table_args__ = (
        Index("ix_runs_team_started", "team", "started_at"),
        Index("ix_runs_started_id", "started_at", "id"),
    )


class RunDoc(Base):
    """A run's summary and documents, apart from its row: lists and usage scan ``runs`` and
    never read these (a summary is kilobytes)."""

    __tablename__ = "run_docs"

    run_id: Mapped[str] = mapped_column(
        String(64), ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True
    )
    summary: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    meta: Mapped[dict[str, Any]] = mapped_column(JSON)


class RunTag(Base):
    __tablename__ = "run_tags"

    run_id: Mapped[str] = mapped_column(
        String(64), ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True
    )
    key: Mapped[str] = mapped_column(String(200), primary_key=True)
    value: Mapped[str] = mapped_column(String(1000))

    __table_args__ = (Index("ix_run_tags_key_value", "key", "value"),)


class RunSeriesPart(Base):
    """Series of a run as one upload carried them (computewatch.serverdb.series): all of them
    for a full upload, each series' new points for a live one that continues an earlier
    upload. ``series`` is a list of ``{name, labels, bucket_seconds, points, kind}``, points
    ``[t, min, mean, max]``."""

    __tablename__ = "run_series_parts"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(
        String(64), ForeignKey("runs.id", ondelete="CASCADE"), index=True
    )
    seq: Mapped[int] = mapped_column(BigInteger)
    series: Mapped[list[Any]] = mapped_column(JSON)


class RunChange(Base):
    """One stored upload, in order: the live-events feed polls it (and on PostgreSQL a NOTIFY
    carries the same row). Old rows are pruned."""

    __tablename__ = "run_changes"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(String(64))
    team: Mapped[str] = mapped_column(String(200))
    seq: Mapped[int] = mapped_column(BigInteger)
    status: Mapped[str] = mapped_column(String(32))
    final: Mapped[bool] = mapped_column(Boolean)
    at: Mapped[float] = mapped_column(Float, index=True)


class Token(Base):
    """An API token: only its SHA-256 is kept."""

    __tablename__ = "tokens"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    name: Mapped[str | None] = mapped_column(String(200))
    team: Mapped[str] = mapped_column(String(200))
    scope: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[float] = mapped_column(Float)
    last_used_at: Mapped[float | None] = mapped_column(Float)
    revoked_at: Mapped[float | None] = mapped_column(Float)


class WebSession(Base):
    """A browser's login: the cookie's SHA-256, tied to the token it logged in with."""

    __tablename__ = "web_sessions"

    id_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    token_id: Mapped[int] = mapped_column(Integer, ForeignKey("tokens.id", ondelete="CASCADE"))
    created_at: Mapped[float] = mapped_column(Float)
    expires_at: Mapped[float] = mapped_column(Float, index=True)


class Budget(Base):
    __tablename__ = "budgets"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    scope_kind: Mapped[str] = mapped_column(String(16))
    """``team`` or ``project``."""
    scope_name: Mapped[str] = mapped_column(String(200))
    metric: Mapped[str] = mapped_column(String(16))
    """``gpu_hours``, ``kwh`` or ``cost``."""
    amount: Mapped[float] = mapped_column(Float)
    """Per period, in the metric's unit (hours, kWh, USD)."""
    period: Mapped[str] = mapped_column(String(8))
    """``month`` or ``week``."""
    thresholds: Mapped[list[Any]] = mapped_column(JSON)
    """Alert thresholds as fractions of ``amount`` (e.g. ``[0.8, 1.0]``)."""
    created_at: Mapped[float] = mapped_column(Float)

    __table_args__ = (Index("ix_budgets_scope", "scope_kind", "scope_name"),)


class NodeKey(Base):
    """A node's or client's public key, registered for one team: uploads whose usage report it
    signed are ``valid`` (computewatch.serverdb.node_keys). Created by migration 0005."""

    __tablename__ = "node_keys"

    key_id: Mapped[str] = mapped_column(String(16), primary_key=True)
    """First 16 hex digits of the SHA-256 of the key's 32 raw bytes."""
    public_key: Mapped[str] = mapped_column(String(64))
    """Base64 of the key's 32 raw bytes."""
    team: Mapped[str] = mapped_column(String(200), index=True)
    name: Mapped[str] = mapped_column(String(200))
    registered_at: Mapped[float] = mapped_column(Float)
    revoked_at: Mapped[float | None] = mapped_column(Float)


class RunSignature(Base):
    """What the check of a run's latest stored upload found: ``status`` (valid, unsigned,
    unknown_key) and the key that signed it. Created by migration 0005."""

    __tablename__ = "run_signatures"

    run_id: Mapped[str] = mapped_column(
        String(64), ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True
    )
    status: Mapped[str] = mapped_column(String(16))
    key_id: Mapped[str | None] = mapped_column(String(16))
    checked_at: Mapped[float] = mapped_column(Float)
