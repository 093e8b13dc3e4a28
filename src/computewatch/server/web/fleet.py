"""The fleet page (``/fleet``, admins, when the server knows a Prometheus): the fleet report
(``computewatch fleet``'s HTML) over the last hours."""

from __future__ import annotations

import time
from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, Response

from computewatch.config import load_config
from computewatch.errors import ComputewatchError
from computewatch.server.web.options import options_of
from computewatch.server.web.rendering import Me, error_page

__all__ = ["router"]

router = APIRouter(include_in_schema=False)


@router.get("/fleet", response_class=HTMLResponse)
def fleet_page(
    request: Request,
    principal: Me,
    hours: Annotated[float, Query(gt=0, le=24 * 90)] = 24.0,
    by: str = "team",
) -> Response:
    opts = options_of(request)
    if not opts.prometheus_url:
        return error_page(
            request, principal, 404,
            "No Prometheus is configured for this server ([server] prometheus_url).",
        )  # fmt: skip
    if not principal.is_admin:  # the fleet report spans every team
        return error_page(request, principal, 403, "The fleet page is for admin tokens.")
    if by not in ("job", "user", "team", "gpu-model"):
        return error_page(request, principal, 400, f"by: job, user, team or gpu-model, not {by!r}")
    # the fleet report's modules (PromQL client, catalog) load only for this page
    from computewatch.fleet.promql import PrometheusClient
    from computewatch.fleet.report import FleetOptions, fleet_charts, fleet_report
    from computewatch.views.html.fleet import build_fleet_html

    end = time.time()
    try:
        fopts = FleetOptions(start=end - hours * 3600, end=end, by=by, config=load_config())
        client = PrometheusClient(opts.prometheus_url, timeout=20.0)
        report = fleet_report(client, fopts)
        charts = fleet_charts(client, fopts, report)
    except ComputewatchError as e:
        return error_page(request, principal, 502, f"Fleet report: {e}")
    return HTMLResponse(build_fleet_html(report, charts), headers={"Cache-Control": "no-store"})
