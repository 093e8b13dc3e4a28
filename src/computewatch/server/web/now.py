"""The Now page (``/``): the runs running now with their latest utilization and power, the
nodes they hold, and the key figures over them."""

from __future__ import annotations

import shlex
import time
from dataclasses import dataclass, field

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response
from sqlalchemy.orm import Session

from computewatch.server.auth import Principal
from computewatch.server.web.figures import (
    IDLE_UTILIZATION,
    gpus_text,
    idle_reason,
    iso_minute,
    iso_utc,
    run_label,
)
from computewatch.server.web.queries import commands_of, latest_values
from computewatch.server.web.rendering import Db, Me, Partial, page
from computewatch.server.web.viewmodels import Node, NowRun, NowView
from computewatch.serverdb.queries import running_now
from computewatch.units import (
    MISSING,
    format_duration,
    format_kwh,
    format_percent,
    format_usd,
    format_watts,
)

__all__ = ["now_view", "router"]

router = APIRouter(include_in_schema=False)


@dataclass
class _NodeSum:
    runs: int = 0
    gpus: int = 0
    models: set[str] = field(default_factory=set)
    power: float | None = None
    idle: int = 0


def now_view(session: Session, principal: Principal) -> NowView:
    now = time.time()
    rows = running_now(session, principal.teams)
    latest = latest_values(
        session, [r.id for r in rows], ("gpu_utilization_ratio", "gpu_power_watts")
    )
    commands = commands_of(session, [r.id for r in rows])
    runs: list[NowRun] = []
    nodes: dict[str, _NodeSum] = {}
    total_power = 0.0
    have_power = False
    idle_gpus = 0
    for r in rows:
        util_l = latest.get((r.id, "gpu_utilization_ratio"))
        util = sum(util_l.values) / len(util_l.values) if util_l else r.gpu_utilization
        power_l = latest.get((r.id, "gpu_power_watts"))
        power = sum(power_l.values) if power_l else None
        if power is not None:
            total_power += power
            have_power = True
        idle = idle_reason(r.gpu_count, util)
        if idle:
            idle_gpus += r.gpu_count
        runs.append(
            NowRun(
                id=r.id,
                label=run_label(r),
                command=shlex.join(commands.get(r.id, [])),
                team=r.team,
                user=r.user,
                project=r.project or "",
                host=r.host,
                gpus=f"{r.gpu_count} x" if r.gpu_count > 0 and r.gpu_model else gpus_text(r),
                gpu_model=(r.gpu_model or "") if r.gpu_count > 0 else "",
                utilization=format_percent(util),
                power=format_watts(power),
                energy=format_kwh(r.kwh),
                cost=format_usd(r.cost_usd),
                duration=format_duration(now - r.started_at),
                since=f"{r.started_at:.3f}",
                started=iso_utc(r.started_at),
                idle=idle,
            )
        )
        n = nodes.setdefault(r.host, _NodeSum())
        n.runs += 1
        n.gpus += r.gpu_count
        if r.gpu_model:
            n.models.add(r.gpu_model)
        if power is not None:
            n.power = (n.power or 0.0) + power
        if idle:
            n.idle += r.gpu_count
    node_rows = [
        Node(
            host=h,
            runs=n.runs,
            gpus=n.gpus,
            models=", ".join(sorted(n.models)) or "none",
            power=format_watts(n.power),
            idle_gpus=n.idle,
        )
        for h, n in sorted(nodes.items())
    ]
    kwh = [r.kwh for r in rows if r.kwh is not None]
    usd = [r.cost_usd for r in rows if r.cost_usd is not None]
    cards = [
        ("running runs", f"{len(rows)}", f"on {len(nodes)} node(s)"),
        ("GPUs held", f"{sum(r.gpu_count for r in rows)}", "by running runs"),
        ("GPU power now", format_watts(total_power) if have_power else MISSING, "latest bucket"),
        ("energy so far", format_kwh(sum(kwh)) if kwh else MISSING, "facility, running runs"),
        ("cost so far", format_usd(sum(usd)) if usd else MISSING, "running runs"),
        ("idle GPUs held", f"{idle_gpus}", f"utilization under {IDLE_UTILIZATION:.0%}"),
    ]
    return NowView(
        cards=cards,
        runs=runs,
        nodes=node_rows,
        idle_threshold=format_percent(IDLE_UTILIZATION, 0),
        at=iso_minute(now),
    )


@router.get("/", response_class=HTMLResponse)
def now_page(request: Request, principal: Me, session: Db, partial: Partial = False) -> Response:
    return page(request, partial, principal, "now", now_view(session, principal))
