"""Governance (``/governance``): each declared model's compute (the FLOPs the tiers judge, and
how they were counted), every tier's state with its deadline, the obligations open or done,
and the model's goodput across its runs. A replay of the ledger, as ``GET
/api/v1/governance/status`` (docs/governance.md): reading the page appends nothing. A team's
token sees its own runs' share of a model, an admin whole models."""

from __future__ import annotations

import time
from dataclasses import dataclass
from urllib.parse import quote

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response
from markupsafe import Markup

from computewatch.governance import service
from computewatch.governance.status import (
    ModelStatus,
    ObligationView,
    deadline_rule,
    tier_dates,
    view_note,
)
from computewatch.server.goodput import server_goodput
from computewatch.server.web.figures import iso_minute
from computewatch.server.web.rendering import Db, Me, Partial, page, prefix_of
from computewatch.units import format_flop, format_kwh
from computewatch.views.goodput import goodput_html

__all__ = ["GovernancePage", "ModelRow", "ObligationRow", "TierCell", "router"]

router = APIRouter(include_in_schema=False)

MAX_GOODPUT_MODELS = 20
"""Models whose goodput the page shows (``computewatch goodput`` for any other)."""


@dataclass(frozen=True, slots=True)
class TierCell:
    """One tier of one model, as the page shows it."""

    tier: str
    state: str
    threshold: str
    deadline: str
    """The deadline and the days left to it, in words ("" when none runs)."""
    overdue: bool
    rule: str
    """How the deadline is counted, and the tier's note (the cell's tooltip)."""


@dataclass(frozen=True, slots=True)
class ObligationRow:
    id: int
    tier: str
    trigger: str
    state: str
    opened: str
    deadline: str
    overdue: bool
    reference: str


@dataclass(frozen=True, slots=True)
class ModelRow:
    model: str
    base_model: str
    runs: str
    gpu_hours: str
    energy: str
    judged: str
    """The FLOPs the tiers judge and the method that counted them."""
    simulated: str
    """Runs on simulated devices, and whether they count ("" when none)."""
    implausible: str
    """Runs whose counted FLOPs exceed their hardware's bound ("" when none)."""
    view: str
    """Whose runs the figures count (a team's partial view), "" for a whole view."""
    tiers: tuple[TierCell, ...]
    obligations: tuple[ObligationRow, ...]
    report_url: str
    """The model's notification pack (JSON)."""


@dataclass(frozen=True, slots=True)
class GovernancePage:
    models: tuple[ModelRow, ...]
    overdue: int
    open: int
    goodput: Markup
    generated: str


def _when(t: float | None) -> str:
    return "" if t is None else f"{iso_minute(t)} UTC"


def _left(days: float | None) -> str:
    if days is None:
        return ""
    if days < 0:
        return f"{-days:.1f} days overdue"
    return f"{days:.1f} days left"


def _deadline(at: float | None, days: float | None) -> str:
    if at is None:
        return ""
    left = _left(days)
    return f"{_when(at)} ({left})" if left else _when(at)


def _obligation(o: ObligationView, now: float) -> ObligationRow:
    return ObligationRow(
        id=o.id,
        tier=o.tier,
        trigger=o.trigger,
        state=o.state,
        opened=_when(o.opened_at),
        deadline=_deadline(o.deadline_at, o.days_left(now)),
        overdue=o.overdue(now),
        reference=o.reference or "",
    )


def model_row(s: ModelStatus, now: float, prefix: str = "") -> ModelRow:
    """One model's line of the page."""
    m = s.compute
    judged = m.judged()
    tiers = []
    for t in s.tiers:
        dates = tier_dates(s, t, now)
        note = f"{deadline_rule(t)}. {t.note}" if t.note else deadline_rule(t)
        tiers.append(
            TierCell(
                tier=t.tier.name,
                state=t.state,
                threshold=format_flop(t.threshold),
                deadline=_deadline(dates.deadline_at, dates.days_left),
                overdue=dates.overdue,
                rule=note,
            )
        )
    simulated = ""
    if m.simulated_runs:
        counted = "counted" if m.simulated_counted else "not counted"
        simulated = f"{m.simulated_runs} on simulated devices ({counted})"
    implausible = ""
    if m.implausible:
        ids = ", ".join(x.run_id for x in m.implausible[:5])
        implausible = (
            f"{len(m.implausible)} runs counted above their hardware's bound, judged at the "
            f"bound: {ids}"
        )
    by_overdue = sorted(s.obligations, key=lambda o: (not o.overdue(now), o.state != "open", o.id))
    return ModelRow(
        model=m.model,
        base_model=m.base_model or "",
        runs=f"{len(m.runs) + s.pruned_runs:,}",
        gpu_hours=f"{m.gpu_hours:,.2f} GPU-h",
        energy=format_kwh(m.energy_kwh),
        judged="no FLOP figure" if judged is None else f"{format_flop(judged[0])} ({judged[1]})",
        simulated=simulated,
        implausible=implausible,
        view=view_note(s) if s.hidden_runs else "",
        tiers=tuple(tiers),
        obligations=tuple(_obligation(o, now) for o in by_overdue),
        report_url=f"{prefix}/api/v1/governance/models/{quote(m.model, safe='/')}/report",
    )


@router.get("/governance", response_class=HTMLResponse)
def governance_page(
    request: Request, principal: Me, session: Db, partial: Partial = False
) -> Response:
    now = time.time()
    prefix = prefix_of(request)
    statuses = sorted(service.status(session, teams=principal.teams), key=lambda s: s.compute.model)
    rows = tuple(model_row(s, now, prefix) for s in statuses)
    goodput = Markup("").join(
        Markup(goodput_html(server_goodput(session, principal.teams, model=s.compute.model),
                            "Goodput"))
        for s in statuses[:MAX_GOODPUT_MODELS]
    )  # fmt: skip
    data = GovernancePage(
        models=rows,
        overdue=sum(o.overdue for r in rows for o in r.obligations),
        open=sum(o.state == "open" for r in rows for o in r.obligations),
        goodput=goodput,
        generated=_when(now),
    )
    return page(request, partial, principal, "governance", data)
