"""The governance tables of the server database: the ledger (a transparency log: its entries,
the hashes of its Merkle tree's complete subtrees, its signed heads and the witnesses'
cosignatures), each run's declared model and compute by method, and the obligations that tier
crossings open, and the grants that let one team's runs fine-tune another team's model. Created
by migrations ``0002_governance``, ``0006_transparency_log`` and ``0008_model_identity``: change
them together."""

from __future__ import annotations

from typing import Any

from sqlalchemy import JSON, BigInteger, Float, Index, Integer, LargeBinary, String, Text, text
from sqlalchemy.orm import Mapped, mapped_column

from computewatch.serverdb.models import Base

__all__ = [
    "MODEL_NAME_LENGTH",
    "LedgerCosignature",
    "LedgerEntryRow",
    "LedgerHead",
    "LedgerMeta",
    "LedgerNode",
    "LedgerStart",
    "ModelGrant",
    "ModelRun",
    "Obligation",
]

MODEL_NAME_LENGTH = 401
"""A model is ``team/name``: a team name (200 at most) and a declared name (200 at most)."""


class LedgerEntryRow(Base):
    """One ledger entry; ``body`` is its body's RFC 8785 canonical JSON text, so that the
    entry's bytes are rebuilt without parsing it (computewatch.ledger.log.line_from_parts)."""

    __tablename__ = "ledger_entries"

    seq: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    time: Mapped[str] = mapped_column(String(32))
    kind: Mapped[str] = mapped_column(String(32), index=True)
    body: Mapped[str] = mapped_column(Text)


class LedgerNode(Base):
    """The hash of one complete subtree of the Merkle tree: ``id`` is ``level << 48 | index``
    (leaves ``index * 2**level`` to ``(index + 1) * 2**level - 1``; level 0: an entry's leaf
    hash). Kept when entries are pruned, so roots and proofs still cover the whole tree."""

    __tablename__ = "ledger_nodes"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    hash: Mapped[bytes] = mapped_column(LargeBinary(32))


class LedgerHead(Base):
    """A signed tree head: the C2SP checkpoint note the server signed at ``size``."""

    __tablename__ = "ledger_heads"

    size: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    root: Mapped[bytes] = mapped_column(LargeBinary(32))
    signed_at: Mapped[int] = mapped_column(BigInteger)
    """Unix seconds: the note's ``time`` line."""
    key_id: Mapped[str] = mapped_column(String(16))
    public_key: Mapped[str] = mapped_column(String(64))
    """Base64 of the signing key's 32 bytes."""
    note: Mapped[str] = mapped_column(Text)


class LedgerCosignature(Base):
    """A witness's ``cosignature/v1`` of the head at ``size`` (its signature line)."""

    __tablename__ = "ledger_cosignatures"

    size: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    witness: Mapped[str] = mapped_column(String(200), primary_key=True)
    key_hash: Mapped[str] = mapped_column(String(8), primary_key=True)
    public_key: Mapped[str] = mapped_column(String(64))
    signed_at: Mapped[int] = mapped_column(BigInteger)
    line: Mapped[str] = mapped_column(Text)
    received_at: Mapped[float] = mapped_column(Float)


class LedgerMeta(Base):
    """The log's settings: ``origin`` (its name in every checkpoint), fixed at its first head."""

    __tablename__ = "ledger_meta"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(Text)


class LedgerStart(Base):
    """Where the kept log starts once older entries were pruned under the retention policy
    (one row at most; none: it starts at seq 1). ``first_prev`` is the first format's (the hash
    chain's) and is kept empty since."""

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
    model: Mapped[str] = mapped_column(String(MODEL_NAME_LENGTH), index=True)
    """``team/name``: the run's team and the name it declared."""
    base_model: Mapped[str | None] = mapped_column(String(MODEL_NAME_LENGTH))
    """``team/name``: the run's team's, or another team's that granted it."""
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
    model: Mapped[str] = mapped_column(String(MODEL_NAME_LENGTH))
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

    __table_args__ = (
        Index("ix_obligations_model_tier", "model", "tier"),
        Index("ux_obligations_open", "model", "tier", unique=True,
              sqlite_where=text("state = 'open'"), postgresql_where=text("state = 'open'")),
    )  # fmt: skip


class ModelGrant(Base):
    """A team's leave to name another team's model as its runs' base model, given by an admin
    (``governance grant MODEL --to TEAM``); the log holds each grant and revocation too."""

    __tablename__ = "model_grants"

    model: Mapped[str] = mapped_column(String(MODEL_NAME_LENGTH), primary_key=True)
    """``team/name``: the model granted (its team is the one that granted it)."""
    team: Mapped[str] = mapped_column(String(200), primary_key=True)
    """The team whose runs may name it as their base model."""
    granted_at: Mapped[float] = mapped_column(Float)
    granted_by: Mapped[str] = mapped_column(String(200))
    """Who granted it: the admin token's team and id (``admin of lab, token 3``) or
    ``database`` (the command line on the server's database)."""
