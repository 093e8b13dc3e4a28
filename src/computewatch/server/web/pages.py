"""The dashboard's pages, installed into the server's app: server-rendered (Jinja2,
autoescaped), refreshed in place by htmx when the server's live events (``/api/v1/events``)
say a run changed, with the report's uPlot charts.

One module per page (:mod:`~computewatch.server.web.now`, ``runs``, ``run``, ``compare``,
``usage``, ``usage_csv``, ``budgets``, ``fleet``, ``login``), each with its own router; the
shared rendering is :mod:`~computewatch.server.web.rendering`. Every page takes the caller from
:func:`computewatch.server.auth.page_principal` (a session cookie from ``/login``, or
``Authorization: Bearer TOKEN``) and reads only what its token may see, through
:mod:`computewatch.serverdb.queries`. A request with ``?partial=1`` (htmx's refresh) gets the
part of the page that changes, not the whole page.
"""

from __future__ import annotations

from fastapi import APIRouter, FastAPI
from fastapi.staticfiles import StaticFiles

from computewatch.server.web import (
    budgets,
    compare,
    fleet,
    governance,
    login,
    now,
    run,
    runs,
    usage,
    usage_csv,
)
from computewatch.server.web.budgets import parse_thresholds
from computewatch.server.web.options import DashboardOptions, options_from_config, parse_targets
from computewatch.server.web.rendering import HTMX_VERSION, STATIC
from computewatch.server.web.run import SummaryParts, summary_sections
from computewatch.server.web.usage_csv import CSV_COLUMNS

__all__ = [
    "CSV_COLUMNS",
    "HTMX_VERSION",
    "DashboardOptions",
    "SummaryParts",
    "install_dashboard",
    "options_from_config",
    "parse_targets",
    "parse_thresholds",
    "router",
    "summary_sections",
]

router = APIRouter(include_in_schema=False)
"""Every page's routes (and the budget evaluation, the budgets router's lifespan)."""
for _module in (login, now, runs, run, compare, usage, usage_csv, budgets, governance, fleet):
    router.include_router(_module.router)


def install_dashboard(app: FastAPI, options: DashboardOptions | None = None) -> None:
    """Add the pages, their static files and the budget evaluation to the server's app;
    ``options`` default to the configuration's (:func:`options_from_config`). Raises
    :class:`ComputewatchError` for a bad configuration or alert target."""
    opts = options if options is not None else options_from_config()
    object.__setattr__(opts, "targets", parse_targets(opts.budget_notify))
    app.state.dashboard = opts
    app.include_router(router)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
