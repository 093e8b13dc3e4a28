"""Know-your-customer tables of the server database: accounts (a customer or an internal team;
an account's name is the team its tokens carry) with their personal data encrypted at rest, and
the access log of API and dashboard use. Created by migration ``0003_accounts``."""

from __future__ import annotations

from typing import Any

from sqlalchemy import JSON, Float, Index, Integer, LargeBinary, String
from sqlalchemy.orm import Mapped, mapped_column

from computewatch.serverdb.models import Base

__all__ = ["AccessLogRow", "AccountRow"]


class AccountRow(Base):
    __tablename__ = "accounts"

    name: Mapped[str] = mapped_column(String(200), primary_key=True)
    country: Mapped[str | None] = mapped_column(String(2))
    """ISO 3166-1 alpha-2."""
    status: Mapped[str] = mapped_column(String(16))
    """``unverified``, ``verified`` or ``suspended`` (``expired`` is computed from
    ``reverify_due``)."""
    verified_at: Mapped[float | None] = mapped_column(Float)
    reverify_due: Mapped[float | None] = mapped_column(Float)
    caps: Mapped[dict[str, Any]] = mapped_column(JSON)
    """``gpu_hours_per_month``, ``flop_per_month``: absent means no cap."""
    pii: Mapped[bytes] = mapped_column(LargeBinary)
    """Fernet token (AES-128-CBC + HMAC-SHA256) of the JSON of the personal data."""
    pii_sha256: Mapped[str] = mapped_column(String(64))
    """Of the plaintext JSON: the ledger records this, never the data."""
    created_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)


class AccessLogRow(Base):
    __tablename__ = "access_log"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    at: Mapped[float] = mapped_column(Float)
    team: Mapped[str | None] = mapped_column(String(200))
    token_id: Mapped[int | None] = mapped_column(Integer)
    action: Mapped[str] = mapped_column(String(300))
    """``METHOD /path`` (no query string) and the status code."""
    ip: Mapped[bytes] = mapped_column(LargeBinary)
    """The client's address, encrypted as the accounts' personal data."""

    __table_args__ = (Index("ix_access_log_team_at", "team", "at"),)
