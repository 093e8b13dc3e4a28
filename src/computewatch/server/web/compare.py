"""The comparison of runs (``/compare?ids=A,B`` or ``?run=A&run=B``): their efficiency table
and their charts overlaid on the time since each started."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, Response
from markupsafe import Markup

from computewatch.server.web.charts import compare_charts
from computewatch.server.web.figures import efficiency, run_label
from computewatch.server.web.rendering import Db, Me, error_page, render
from computewatch.server.web.viewmodels import series_data
from computewatch.serverdb.queries import get_run
from computewatch.views.html.page import json_for_script

__all__ = ["MAX_COMPARED", "router"]

MAX_COMPARED = 20

router = APIRouter(include_in_schema=False)


@router.get("/compare", response_class=HTMLResponse)
def compare_page(
    request: Request,
    principal: Me,
    session: Db,
    ids: str = "",
    run: Annotated[list[str] | None, Query()] = None,
) -> Response:
    wanted = [i.strip() for i in ids.split(",") if i.strip()] + list(run or [])
    wanted = list(dict.fromkeys(wanted))[:MAX_COMPARED]
    if len(wanted) < 2:
        return error_page(
            request, principal, 400, "Compare needs two runs or more: /compare?ids=ID,ID,..."
        )
    found = []
    missing = []
    for i in wanted:
        d = get_run(session, i, principal.teams)
        if d is None:
            missing.append(i)
        else:
            found.append(d)
    rows = []
    methods: set[str] = set()
    for d in found:
        eff = efficiency(d.run, d.summary)
        rows.append(
            {"id": d.run.id, "label": run_label(d.run), "cells": [d.run.status, *eff.cells()]}
        )
        s = d.summary or {}
        for key in ("energy", "cost"):
            sec = s.get(key)
            head = sec.get("facility") or sec.get("total") if isinstance(sec, dict) else None
            if isinstance(head, dict) and head.get("method"):
                methods.add(f"{key} {head['method']}")
    charts = compare_charts(
        [(run_label(d.run), d.run.started_at, series_data(d.series)) for d in found]
    )
    data = {
        "rows": rows,
        "missing": missing,
        "methods": ", ".join(sorted(methods)),
        "charts": charts,
        "charts_json": Markup(json_for_script(charts)),
    }
    return render(
        request,
        "compare.html",
        principal=principal,
        page="runs",
        title="Compare runs",
        heading=f"Compare {len(found)} runs",
        eyebrow="overlaid charts and efficiency",
        cmp=data,
    )
