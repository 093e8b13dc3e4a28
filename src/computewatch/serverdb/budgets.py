"""Budgets: an amount of GPU-hours, kWh or USD per month or week for a team or a project.
The dashboard computes progress, forecasts and alerts from them and :func:`queries.usage`."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Final, Literal, cast, get_args

from sqlalchemy import select
from sqlalchemy.orm import Session

from computewatch.errors import UsageError
from computewatch.serverdb.models import Budget

__all__ = [
    "BudgetInfo",
    "BudgetMetric",
    "BudgetPeriod",
    "BudgetScope",
    "create_budget",
    "delete_budget",
    "list_budgets",
]

BudgetScope = Literal["team", "project"]
BudgetMetric = Literal["gpu_hours", "kwh", "cost"]
BudgetPeriod = Literal["month", "week"]
SCOPE_KINDS: Final[tuple[str, ...]] = get_args(BudgetScope)
METRICS: Final[tuple[str, ...]] = get_args(BudgetMetric)
PERIODS: Final[tuple[str, ...]] = get_args(BudgetPeriod)


@dataclass(frozen=True)
class BudgetInfo:
    id: int
    scope_kind: BudgetScope
    scope_name: str
    metric: BudgetMetric
    amount: float
    """Per period, in the metric's unit: hours, kWh or USD."""
    period: BudgetPeriod
    thresholds: list[float]
    """Alert thresholds as fractions of ``amount``, ascending."""
    created_at: float


def _info(b: Budget) -> BudgetInfo:
    return BudgetInfo(
        b.id,
        cast(BudgetScope, b.scope_kind),
        b.scope_name,
        cast(BudgetMetric, b.metric),
        b.amount,
        cast(BudgetPeriod, b.period),
        [float(x) for x in b.thresholds],
        b.created_at,
    )


def create_budget(
    session: Session,
    *,
    scope_kind: str,
    scope_name: str,
    metric: str,
    amount: float,
    period: str,
    thresholds: list[float] | None = None,
) -> BudgetInfo:
    """A new budget (commits). Thresholds default to 80 % and 100 %."""
    if scope_kind not in SCOPE_KINDS:
        raise UsageError(f"budget scope: one of {', '.join(SCOPE_KINDS)}, not {scope_kind!r}")
    if not scope_name or len(scope_name) > 200:
        raise UsageError("budget scope name: 1 to 200 characters")
    if metric not in METRICS:
        raise UsageError(f"budget metric: one of {', '.join(METRICS)}, not {metric!r}")
    if period not in PERIODS:
        raise UsageError(f"budget period: one of {', '.join(PERIODS)}, not {period!r}")
    if not math.isfinite(amount) or amount <= 0:
        raise UsageError(f"budget amount: a positive number, not {amount}")
    marks = sorted(thresholds if thresholds is not None else [0.8, 1.0])
    if not marks or any(not math.isfinite(t) or not 0 < t <= 10 for t in marks):
        raise UsageError("budget thresholds: fractions of the amount above 0 (1.0 = all of it)")
    row = Budget(
        scope_kind=scope_kind,
        scope_name=scope_name,
        metric=metric,
        amount=float(amount),
        period=period,
        thresholds=marks,
        created_at=time.time(),
    )
    session.add(row)
    session.commit()
    return _info(row)


def list_budgets(
    session: Session, *, scope_kind: str | None = None, scope_name: str | None = None
) -> list[BudgetInfo]:
    q = select(Budget).order_by(Budget.id)
    if scope_kind is not None:
        q = q.where(Budget.scope_kind == scope_kind)
    if scope_name is not None:
        q = q.where(Budget.scope_name == scope_name)
    return [_info(b) for b in session.scalars(q)]


def delete_budget(session: Session, budget_id: int) -> bool:
    """Delete budget ``budget_id`` (commits); False when there is none."""
    row = session.get(Budget, budget_id)
    if row is None:
        return False
    session.delete(row)
    session.commit()
    return True
