"""Budgets (``/budgets``): each budget's use, progress and forecast for its period, the admin's
form to create or delete one, and the budget evaluation that runs with the server (the
router's lifespan) and sends the alerts."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, FastAPI, Form, HTTPException, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from sqlalchemy.orm import Session

from computewatch.errors import ComputewatchError
from computewatch.server.auth import Principal, check_form_token
from computewatch.server.budgets import (
    METHOD,
    BudgetEvaluator,
    BudgetNotifier,
    budget_statuses,
    format_amount,
    spec_of,
)
from computewatch.server.web.options import DashboardOptions, options_of
from computewatch.server.web.rendering import Db, Me, Partial, page, prefix_of
from computewatch.serverdb.budgets import create_budget, delete_budget, list_budgets
from computewatch.units import format_percent

__all__ = ["parse_thresholds", "router"]


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Starts the budget evaluation with the server and stops it with it."""
    opts = getattr(app.state, "dashboard", None)
    db = getattr(app.state, "db", None)
    evaluator: BudgetEvaluator | None = None
    if isinstance(opts, DashboardOptions) and db is not None:
        notifier = BudgetNotifier(opts.targets)
        evaluator = BudgetEvaluator(db, notifier, interval=opts.budget_interval)
        app.state.budget_evaluator = evaluator
        evaluator.start()
    try:
        yield
    finally:
        if evaluator is not None:
            evaluator.stop()


router = APIRouter(include_in_schema=False, lifespan=_lifespan)


def _budgets_view(session: Session, principal: Principal, request: Request) -> dict[str, Any]:
    opts = options_of(request)
    infos = list_budgets(session)
    if not principal.is_admin:  # a team sees its own budgets; project budgets span teams
        infos = [b for b in infos if b.scope_kind == "team" and b.scope_name == principal.team]
    evaluator = getattr(request.app.state, "budget_evaluator", None)
    now = time.time()
    statuses = budget_statuses(session, [spec_of(b) for b in infos], now)
    rows = []
    for st in statuses:
        b = st.budget
        start = dt.datetime.fromtimestamp(st.period_start, dt.UTC)
        ff = st.forecast_fraction
        crossed = [f"{float(k):.0%}" if k != "forecast" else "forecast over" for k in st.crossed]
        rows.append(
            {
                "id": b.id,
                "scope": f"{b.scope_kind} {b.scope_name}",
                "amount": format_amount(b.metric, b.amount),
                "period": b.period,
                "period_text": f"{start:%Y-%m}"
                if b.period == "month"
                else f"week of {start:%Y-%m-%d}",
                "elapsed": format_percent(st.elapsed_fraction, 0),
                "used": format_amount(b.metric, st.used),
                "percent": format_percent(st.fraction, 0),
                "bar": f"{min(st.fraction, 1.0) * 100:.1f}",
                "bar_class": "over" if st.fraction >= 1 else ("warn" if st.crossed else ""),
                "now_bar": f"{st.elapsed_fraction * 100:.1f}",
                "forecast_bar": None if ff is None else f"{min(ff, 1.0) * 100:.1f}",
                "forecast": (
                    "n/a (first hour of the period)"
                    if st.forecast is None
                    else f"{format_amount(b.metric, st.forecast)} ({format_percent(ff, 0)})"
                ),
                "crossed": ", ".join(crossed) or "none",
                "thresholds": ", ".join(f"{t:.0%}" for t in b.thresholds),
            }
        )
    return {
        "rows": rows,
        "admin": principal.is_admin,
        "method": METHOD[0].upper() + METHOD[1:],
        "targets": ", ".join(t.kind for t in opts.targets),  # a webhook URL may be a secret
        "interval": f"{opts.budget_interval:g} s",
        "evaluations": evaluator.evaluations if isinstance(evaluator, BudgetEvaluator) else 0,
        "error": "",
    }


@router.get("/budgets", response_class=HTMLResponse)
def budgets_page(
    request: Request, principal: Me, session: Db, partial: Partial = False, error: str = ""
) -> Response:
    data = _budgets_view(session, principal, request)
    data["error"] = error[:300]
    return page(request, partial, principal, "budgets", data)


def _same_origin(request: Request) -> None:
    """A form post must come from this server's own pages (no cross-site form posts)."""
    origin = request.headers.get("origin")
    if origin and origin != "null":
        host = request.headers.get("host", "")
        if origin.split("://", 1)[-1] != host:
            raise HTTPException(403, "cross-origin form post refused")


def _admin(principal: Principal) -> None:
    if not principal.is_admin:
        raise HTTPException(403, f"this token's scope ({principal.scope}) is not admin")


def parse_thresholds(text: str) -> list[float]:
    """The budget form's alert thresholds, percentages separated by commas (``80, 100``), as
    fractions; :class:`ComputewatchError` for anything else."""
    out = []
    for raw in text.replace(";", ",").split(","):
        part = raw.strip().rstrip("%").strip()
        if not part:
            continue
        try:
            out.append(float(part) / 100)
        except ValueError:
            raise ComputewatchError(
                f"alert thresholds: percentages such as 80, 100, not {part!r}"
            ) from None
    return out


@router.post("/budgets")
def create_budget_form(
    request: Request,
    principal: Me,
    session: Db,
    scope_kind: Annotated[str, Form()] = "",
    scope_name: Annotated[str, Form()] = "",
    metric: Annotated[str, Form()] = "",
    amount: Annotated[str, Form()] = "",
    period: Annotated[str, Form()] = "",
    thresholds: Annotated[str, Form()] = "80, 100",
    csrf: Annotated[str, Form()] = "",
) -> Response:
    check_form_token(request, csrf)
    _same_origin(request)
    _admin(principal)
    prefix = prefix_of(request)
    try:
        try:
            value = float(amount)
        except ValueError:
            raise ComputewatchError(f"budget amount: a number, not {amount!r}") from None
        with request.app.state.db.writing():  # the writer's turn (computewatch.serverdb.engine)
            create_budget(
                session,
                scope_kind=scope_kind,
                scope_name=scope_name.strip(),
                metric=metric,
                amount=value,
                period=period,
                thresholds=parse_thresholds(thresholds) or None,
            )
    except ComputewatchError as e:
        return RedirectResponse(prefix + "/budgets?" + urlencode({"error": str(e)}), 303)
    evaluator = getattr(request.app.state, "budget_evaluator", None)
    if isinstance(evaluator, BudgetEvaluator):
        evaluator.wake()
    return RedirectResponse(prefix + "/budgets", 303)


@router.post("/budgets/{budget_id}/delete")
def delete_budget_form(
    request: Request,
    budget_id: int,
    principal: Me,
    session: Db,
    csrf: Annotated[str, Form()] = "",
) -> Response:
    check_form_token(request, csrf)
    _same_origin(request)
    _admin(principal)
    with request.app.state.db.writing():
        delete_budget(session, budget_id)
    return RedirectResponse(prefix_of(request) + "/budgets", 303)
