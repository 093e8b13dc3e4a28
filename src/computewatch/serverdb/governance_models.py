"""The governance tables of the server database: the ledger (hash-chained entries), each run's
declared model and compute by method, and the obligations that tier crossings open. Created by
migration ``0002_governance``: change both together."""

from __future__ import annotations

from typing import Any

from sqlalchemy import JSON, BigInteger, Float, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from computewatch.serverdb.models import Base

__all__ = ["LedgerEntryRow", "LedgerStart", "ModelRun", "Obligation"]


class LedgerEntryRow(Base):
    """One ledger entry; ``body`` is its canonical JSON text (computewatch.ledger.chain)."""

    __tablename__ = "ledger_entries"

    seq: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    time: Mapped[str] = mapped_column(String(32))
    kind: Mapped[str] = mapped_column(String(32), index=True)
    body: Mapped[str] = mapped_column(Text)
    prev: Mapped[str] = mapped_column(String(64))
    hash: Mapped[str] = mapped_column(String(64))


class LedgerStart(Base):
    """Where the kept chain starts once older entries were pruned under the retention policy
    (one row at most; none: the chain starts at seq 1 after 64 zeros)."""

    __tablename__ = "ledger_start"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    first_seq: Mapped[int] = mapped_column(BigInteger)
    first_prev: Mapped[str] = mapped_column(String(64))
    pruned_at: Mapped[float] = mapped_column(Float)


class ModelRun(Base):
    """A run that declared the model it trains, with its compute by method (FLOP; null where
    the method has no figure) and the Annex XI fields."""

    __tablename__ = "model_runs"

    run_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    team: Mapped[str] = mapped_column(String(200))
    model: Mapped[str] = mapped_column(String(200), index=True)
    base_model: Mapped[str | None] = mapped_column(String(200))
    stage: Mapped[str] = mapped_column(String(32))
    parameters: Mapped[float | None] = mapped_column(Float)
    status: Mapped[str] = mapped_column(String(32))
    started_at: Mapped[float] = mapped_column(Float)
    duration_seconds: Mapped[float] = mapped_column(Float)
    gpu_hours: Mapped[float] = mapped_column(Float)
    energy_kwh: Mapped[float | None] = mapped_column(Float)
    counted: Mapped[float | None] = mapped_column(Float)
    counted_low: Mapped[float | None] = mapped_column(Float)
    counted_high: Mapped[float | None] = mapped_column(Float)
    hardware: Mapped[float | None] = mapped_column(Float)
    hardware_low: Mapped[float | None] = mapped_column(Float)
    hardware_high: Mapped[float | None] = mapped_column(Float)
    architecture: Mapped[float | None] = mapped_column(Float)
    forecast_high: Mapped[float | None] = mapped_column(Float)
    devices: Mapped[list[Any]] = mapped_column(JSON)
    """``"8x H100-SXM"`` strings."""
    updated_at: Mapped[float] = mapped_column(Float)


class Obligation(Base):
    """What a tier crossing (or a forecast crossing) asks of the provider, until marked done."""

    __tablename__ = "obligations"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    model: Mapped[str] = mapped_column(String(200))
    tier: Mapped[str] = mapped_column(String(64))
    trigger: Mapped[str] = mapped_column(String(16))
    """``crossed`` or ``forecast``."""
    rule: Mapped[str] = mapped_column(Text)
    judged_flop: Mapped[float | None] = mapped_column(Float)
    method: Mapped[str | None] = mapped_column(String(32))
    threshold: Mapped[float] = mapped_column(Float)
    opened_at: Mapped[float] = mapped_column(Float)
    deadline_at: Mapped[float | None] = mapped_column(Float)
    state: Mapped[str] = mapped_column(String(8))
    """``open`` or ``done``."""
    done_at: Mapped[float | None] = mapped_column(Float)
    reference: Mapped[str | None] = mapped_column(Text)
    alerted: Mapped[str | None] = mapped_column(String(200))
    """Comma-separated reminders already sent (``opened``, ``7d``, ``1d``, ``overdue``)."""

    __table_args__ = (Index("ix_obligations_model_tier", "model", "tier"),)
