"""Usage and cost (``/usage``): GPU-hours, idle GPU-hours, CPU-hours, energy, cost and CO2e
by team, user, project or GPU model, over a range or per day, week or month."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response
from markupsafe import Markup
from sqlalchemy.orm import Session

from computewatch.server.auth import Principal
from computewatch.server.goodput import server_goodput
from computewatch.server.web.figures import cpu_hours_text, gpu_hours_text
from computewatch.server.web.rendering import (
    Db,
    Me,
    Partial,
    error_page,
    page,
    parse_date,
    prefix_of,
    query_string,
)
from computewatch.serverdb.queries import USAGE_BY, BadQuery, UsageRow, declared_models, usage
from computewatch.units import format_grams, format_kwh, format_mfu, format_percent, format_usd
from computewatch.views.goodput import goodput_html

__all__ = ["router", "usage_rows"]

router = APIRouter(include_in_schema=False)

MAX_GOODPUT_MODELS = 20
"""Models whose goodput the page shows (by name; ``computewatch goodput`` for any other)."""


def usage_rows(
    session: Session, principal: Principal, by: str, bucket: str, since: str, until: str
) -> list[UsageRow]:
    """The usage the caller may see, from the page's query parameters; :class:`BadQuery` for a
    bad one."""
    return usage(
        session,
        by=by,
        teams=principal.teams,
        since=parse_date(since, "since"),
        until=parse_date(until, "until", end=True),
        bucket=bucket or None,
    )


def _key_text(k: str | None, by: str) -> str:
    if k is not None:
        return k
    return {"project": "(no project)", "gpu-model": "(no GPU)"}.get(by, "(none)")


@router.get("/usage", response_class=HTMLResponse)
def usage_page(
    request: Request,
    principal: Me,
    session: Db,
    by: str = "team",
    bucket: str = "",
    since: str = "",
    until: str = "",
    partial: Partial = False,
) -> Response:
    try:
        rows = usage_rows(session, principal, by, bucket, since, until)
    except BadQuery as e:
        return error_page(request, principal, 400, str(e))
    cells = []
    methods: set[str] = set()
    for r in rows:
        line = [_key_text(r.key, by)]
        if bucket:
            line.append(r.bucket or "")
        line += [
            f"{r.runs:,}",
            gpu_hours_text(r.gpu_hours.value),
            gpu_hours_text(r.idle_gpu_hours.value),
            cpu_hours_text(r.cpu_hours.value),
            format_kwh(r.kwh.value),
            format_usd(r.cost_usd.value),
            format_grams(r.co2e_kg.value * 1000 if r.co2e_kg.value is not None else None),
            format_percent(r.mean_utilization),
            format_mfu(r.mean_mfu),
        ]
        cells.append(line)
        methods.update(f"energy {m}" for m in r.kwh.methods)
        methods.update(f"cost {m}" for m in r.cost_usd.methods)
    goodput = Markup("").join(
        Markup(goodput_html(server_goodput(session, principal.teams, model=m), "Goodput"))
        for m in declared_models(session, principal.teams)[:MAX_GOODPUT_MODELS]
    )
    params = {"by": by, "bucket": bucket, "since": since, "until": until}
    prefix = prefix_of(request)
    data = {
        "rows": cells,
        "q": params,
        "bys": USAGE_BY,
        "methods": ", ".join(sorted(methods)),
        "self_url": prefix + "/usage" + query_string(params),
        "csv_url": prefix + "/usage.csv" + query_string(params),
        "goodput": goodput,
    }
    return page(request, partial, principal, "usage", data)
