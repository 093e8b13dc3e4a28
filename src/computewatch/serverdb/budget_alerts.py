"""Which budget alerts were delivered: one row per (budget, period, alert kind), so that each
crossing is sent once per period however many server processes evaluate the budgets and however
often they restart (migration 0004). The dashboard's evaluation (computewatch.server.budgets)
claims a row before it sends; the row's primary key makes the claim atomic."""

from __future__ import annotations

import time

from sqlalchemy import Float, ForeignKey, Integer, String
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Mapped, Session, mapped_column

from computewatch.serverdb.models import Base

__all__ = ["BudgetAlertSent", "claim_alert"]


class BudgetAlertSent(Base):
    __tablename__ = "budget_alerts_sent"

    budget_id: Mapped[int] = mapped_column(
        Integer, ForeignKey("budgets.id", ondelete="CASCADE"), primary_key=True
    )
    period_start: Mapped[float] = mapped_column(Float, primary_key=True)
    """Unix seconds of the period's first instant (UTC)."""
    kind: Mapped[str] = mapped_column(String(16), primary_key=True)
    """The threshold as text (``0.8``, ``1``) or ``forecast``."""
    sent_at: Mapped[float] = mapped_column(Float)


def claim_alert(session: Session, budget_id: int, period_start: float, kind: str) -> bool:
    """Record that this alert is being sent (commits): True the first time only."""
    session.add(
        BudgetAlertSent(
            budget_id=budget_id, period_start=period_start, kind=kind, sent_at=time.time()
        )
    )
    try:
        session.commit()
    except IntegrityError:  # another evaluation, here or in another process, claimed it
        session.rollback()
        return False
    return True
