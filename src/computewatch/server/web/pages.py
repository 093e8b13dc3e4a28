"""The dashboard's pages: server-rendered (Jinja2, autoescaped), refreshed in place by htmx when
the server's live events (``/api/v1/events``) say a run changed, with the report's uPlot charts.

Every page takes the caller from :func:`computewatch.server.auth.page_principal` (a session
cookie from ``/login``, or ``Authorization: Bearer TOKEN``) and reads only what its token may
see, through :mod:`computewatch.serverdb.queries`. A request with ``?partial=1`` (htmx's
refresh) gets the part of the page that changes, not the whole page.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import math
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Final, TypedDict, cast
from urllib.parse import urlencode

import jinja2
from fastapi import APIRouter, Depends, FastAPI, Form, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from markupsafe import Markup
from sqlalchemy import select
from sqlalchemy.orm import Session

from computewatch._version import __version__
from computewatch.alerts.notify import Target, parse_target
from computewatch.analysis.repro import with_repro
from computewatch.analysis.summary_types import RunSummary
from computewatch.config import Config, load_config
from computewatch.errors import ComputewatchError
from computewatch.server.auth import Principal, db_session, page_principal, safe_next
from computewatch.server.budgets import (
    METHOD,
    BudgetEvaluator,
    BudgetNotifier,
    budget_statuses,
    format_amount,
    spec_of,
)
from computewatch.server.web.charts import SeriesData, compare_charts, run_charts
from computewatch.server.web.figures import (
    IDLE_UTILIZATION,
    efficiency,
    gpu_hours_text,
    gpus_text,
    idle_reason,
    iso_minute,
    run_label,
)
from computewatch.server.web.queries import latest_values
from computewatch.serverdb.budgets import create_budget, delete_budget, list_budgets
from computewatch.serverdb.models import Run
from computewatch.serverdb.node_keys import SignatureCheck, run_signature
from computewatch.serverdb.queries import (
    SORT_KEYS,
    USAGE_BY,
    BadQuery,
    RunFilter,
    RunRow,
    SeriesRow,
    UsageRow,
    get_run,
    list_runs,
    running_now,
    usage,
    visible_teams,
)
from computewatch.units import (
    MISSING,
    format_bytes,
    format_duration,
    format_grams,
    format_kwh,
    format_number,
    format_percent,
    format_seconds,
    format_usd,
    format_watts,
)
from computewatch.views.diagnosis import diagnosis_html
from computewatch.views.html.page import UPLOT_VERSION, json_for_script
from computewatch.views.html.run import ACCOUNTING_SECTIONS, accounting_section
from computewatch.views.repro import repro_lines

__all__ = [
    "CSV_COLUMNS",
    "HTMX_VERSION",
    "DashboardOptions",
    "SummaryParts",
    "install_dashboard",
    "options_from_config",
    "parse_thresholds",
    "router",
    "summary_sections",
]

HTMX_VERSION: Final = "2.0.11"
PAGE_SIZE: Final = 50
STATUSES: Final = ("running", "completed", "failed", "interrupted")
REPORT_ASSETS: Final = frozenset({"uPlot.iife.min.js", "uPlot.min.css", "report.css"})
"""The report's files the dashboard serves from ``views/html/assets`` (not copied)."""
_STATIC = Path(str(resources.files("computewatch.server").joinpath("static")))
_TEMPLATES = Path(str(resources.files("computewatch.server").joinpath("templates")))
_NAV = (
    ("/", "Now", "now"),
    ("/runs", "Runs", "runs"),
    ("/usage", "Usage and cost", "usage"),
    ("/budgets", "Budgets", "budgets"),
)
_NAV_FLEET = ("/fleet", "Fleet", "fleet")
CSV_COLUMNS: Final = (
    "group", "bucket", "runs", "gpu_hours", "idle_gpu_hours", "cpu_hours", "kwh", "kwh_low",
    "kwh_high", "kwh_methods", "cost_usd", "cost_low_usd", "cost_high_usd", "cost_methods",
    "co2e_kg", "co2e_low_kg", "co2e_high_kg", "mean_utilization", "mean_mfu",
)  # fmt: skip
"""The columns of ``/usage.csv`` (docs/dashboard.md)."""


@dataclass(frozen=True)
class DashboardOptions:
    """What the dashboard needs from the server's command line."""

    prometheus_url: str | None = None
    """Where ``/fleet`` reads the fleet report (None: no fleet page)."""
    budget_notify: Sequence[str] = ()
    """Alert targets for budgets (``webhook:URL``, ``slack:URL``, ``alertmanager:URL``)."""
    budget_interval: float = 60.0
    """Seconds between two budget evaluations."""
    events_path: str = "/api/v1/events"
    targets: tuple[Target, ...] = field(default=(), init=False)


def _env() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(_TEMPLATES)),
        autoescape=True,  # every run name, tag, command and team name is user input
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    return env


_ENV = _env()


def _options(request: Request) -> DashboardOptions:
    opts = getattr(request.app.state, "dashboard", None)
    return opts if isinstance(opts, DashboardOptions) else DashboardOptions()


def _render(
    request: Request,
    template: str,
    *,
    principal: Principal | None,
    page: str,
    title: str,
    heading: str,
    eyebrow: str = "computewatch",
    status_code: int = 200,
    **context: object,
) -> HTMLResponse:
    opts = _options(request)
    nav = list(_NAV)
    if opts.prometheus_url and principal is not None and principal.is_admin:
        nav.append(_NAV_FLEET)
    prefix = _prefix(request)
    html = _ENV.get_template(template).render(
        prefix=prefix,
        version=__version__,
        uplot_version=UPLOT_VERSION,
        htmx_version=HTMX_VERSION,
        generated=dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M:%S"),
        nav=nav,
        page=page,
        title=title,
        heading=heading,
        eyebrow=eyebrow,
        principal=principal,
        events_url=prefix + opts.events_path if principal is not None else "",
        **context,
    )
    return HTMLResponse(html, status_code=status_code, headers={"Cache-Control": "no-store"})


def _error_page(request: Request, principal: Principal, status: int, message: str) -> HTMLResponse:
    return _render(
        request,
        "error.html",
        principal=principal,
        page="",
        title=f"{status}",
        heading="Cannot show this page",
        message=message,
        status_code=status,
    )


_PAGES: dict[str, tuple[str, str, str, str]] = {
    "now": ("now", "Now", "Now", "running runs and nodes, live"),
    "runs": ("runs", "Runs", "Runs", "filter, sort, page through, compare"),
    "usage": ("usage", "Usage and cost", "Usage and cost", "by team, user, project or GPU model"),
    "budgets": ("budgets", "Budgets", "Budgets", "per team or project, per month or week"),
}
"""Each page's navigation key, title, heading and the line above the heading."""


def _page(
    request: Request,
    partial: bool,
    principal: Principal | None,
    name: str,
    data: Any,
    text: tuple[str, str, str, str] | None = None,
) -> HTMLResponse:
    """A dashboard page: the fragment ``_NAME.html`` alone when htmx asks for it (``partial``,
    the live refresh), else ``NAME.html`` inside the layout, its ``data`` named ``NAME`` in
    the template. ``text`` (as in :data:`_PAGES`) defaults to the page's row there."""
    if partial:
        return _partial(f"_{name}.html", prefix=_prefix(request), **{name: data})
    page, title, heading, eyebrow = text or _PAGES[name]
    return _render(
        request,
        f"{name}.html",
        principal=principal,
        page=page,
        title=title,
        heading=heading,
        eyebrow=eyebrow,
        **{name: data},
    )


def _partial(template: str, **context: object) -> HTMLResponse:
    html = _ENV.get_template(template).render(**context)
    return HTMLResponse(html, headers={"Cache-Control": "no-store"})


Me = Annotated[Principal, Depends(page_principal)]
Db = Annotated[Session, Depends(db_session)]
Partial = Annotated[bool, Query()]


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


# -- assets, login ----------------------------------------------------------------------------


@router.get("/static/report/{name}")
def report_asset(name: str) -> Response:
    """uPlot and the report's style sheet, from the report's own assets (one copy of each)."""
    if name not in REPORT_ASSETS:
        raise HTTPException(404, "no such asset")
    text = resources.files("computewatch.views.html").joinpath("assets", name).read_text("utf-8")
    kind = "text/css" if name.endswith(".css") else "text/javascript"
    return Response(
        text,
        media_type=f"{kind}; charset=utf-8",
        headers={"Cache-Control": "public, max-age=3600"},
    )


@router.get("/login", response_class=HTMLResponse)
def login_form(request: Request, next: str = "/", error: str = "") -> HTMLResponse:
    prefix = _prefix(request)
    messages = {"1": "That token is not valid (unknown, mistyped or revoked)."}
    html = _ENV.get_template("login.html").render(
        prefix=prefix, next=safe_next(next), error=messages.get(error, "")
    )
    return HTMLResponse(html, headers={"Cache-Control": "no-store"})


# -- Now ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _NowRun:
    id: str
    label: str
    command: str
    team: str
    user: str
    project: str
    host: str
    gpus: str
    utilization: str
    power: str
    energy: str
    cost: str
    duration: str
    idle: str


@dataclass(frozen=True)
class _Node:
    host: str
    runs: int
    gpus: int
    models: str
    power: str
    idle_gpus: int


@dataclass(frozen=True)
class _Now:
    cards: list[tuple[str, str, str]]
    runs: list[_NowRun]
    nodes: list[_Node]
    idle_threshold: str
    at: str


def _now_data(session: Session, principal: Principal) -> _Now:
    now = time.time()
    rows = running_now(session, principal.teams)
    latest = latest_values(
        session, [r.id for r in rows], ("gpu_utilization_ratio", "gpu_power_watts")
    )
    commands = _commands(session, [r.id for r in rows])
    runs: list[_NowRun] = []
    nodes: dict[str, dict[str, Any]] = {}
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
            _NowRun(
                id=r.id,
                label=run_label(r),
                command=commands.get(r.id, ""),
                team=r.team,
                user=r.user,
                project=r.project or "",
                host=r.host,
                gpus=gpus_text(r),
                utilization=format_percent(util),
                power=format_watts(power),
                energy=format_kwh(r.kwh),
                cost=format_usd(r.cost_usd),
                duration=format_duration(now - r.started_at),
                idle=idle,
            )
        )
        n = nodes.setdefault(
            r.host, {"runs": 0, "gpus": 0, "models": set(), "power": None, "idle": 0}
        )
        n["runs"] += 1
        n["gpus"] += r.gpu_count
        if r.gpu_model:
            n["models"].add(r.gpu_model)
        if power is not None:
            n["power"] = (n["power"] or 0.0) + power
        if idle:
            n["idle"] += r.gpu_count
    node_rows = [
        _Node(
            host=h,
            runs=n["runs"],
            gpus=n["gpus"],
            models=", ".join(sorted(n["models"])) or "none",
            power=format_watts(n["power"]),
            idle_gpus=n["idle"],
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
    return _Now(
        cards=cards,
        runs=runs,
        nodes=node_rows,
        idle_threshold=format_percent(IDLE_UTILIZATION, 0),
        at=iso_minute(now),
    )


def _commands(session: Session, run_ids: Sequence[str]) -> dict[str, str]:
    """The command lines of a few runs (not in RunRow)."""
    if not run_ids:
        return {}
    q = select(Run.id, Run.command).where(Run.id.in_(list(run_ids)))
    return {i: " ".join(str(a) for a in (c or [])) for i, c in session.execute(q)}


@router.get("/", response_class=HTMLResponse)
def now_page(request: Request, principal: Me, session: Db, partial: Partial = False) -> Response:
    data = _now_data(session, principal)
    return _page(request, partial, principal, "now", data)


def _prefix(request: Request) -> str:
    return str(request.scope.get("root_path", "")).rstrip("/")


# -- Runs --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _RunLine:
    id: str
    label: str
    team: str
    user: str
    project: str
    status: str
    started: str
    duration: str
    gpus: str
    gpu_hours: str
    utilization: str
    energy: str
    cost: str
    tags: list[tuple[str, str]]


def _run_line(r: RunRow) -> _RunLine:
    return _RunLine(
        id=r.id,
        label=run_label(r),
        team=r.team,
        user=r.user,
        project=r.project or "",
        status=r.status,
        started=iso_minute(r.started_at),
        duration=format_duration(r.duration_seconds),
        gpus=gpus_text(r),
        gpu_hours=gpu_hours_text(r.gpu_hours),
        utilization=format_percent(r.gpu_utilization),
        energy=format_kwh(r.kwh),
        cost=format_usd(r.cost_usd),
        tags=sorted(r.tags.items()),
    )


def _date(text: str, name: str, *, end: bool = False) -> float | None:
    """``YYYY-MM-DD`` (UTC) as Unix seconds: the day's start, or its end with ``end``."""
    if not text:
        return None
    try:
        d = dt.datetime.strptime(text, "%Y-%m-%d").replace(tzinfo=dt.UTC)
    except ValueError:
        raise BadQuery(f"{name}: a date YYYY-MM-DD, not {text!r}") from None
    return (d + dt.timedelta(days=1) if end else d).timestamp()


def _query_string(params: Mapping[str, str]) -> str:
    kept = {k: v for k, v in params.items() if v}
    return "?" + urlencode(kept) if kept else ""


@router.get("/runs", response_class=HTMLResponse)
def runs_page(
    request: Request,
    principal: Me,
    session: Db,
    team: str = "",
    user: str = "",
    project: str = "",
    tag: str = "",
    q: str = "",
    status: str = "",
    since: str = "",
    until: str = "",
    sort: str = "started_at",
    order: str = "desc",
    cursor: str = "",
    limit: Annotated[int, Query(ge=1, le=500)] = PAGE_SIZE,
    partial: Partial = False,
) -> Response:
    params = {
        "team": team, "user": user, "project": project, "tag": tag, "q": q, "status": status,
        "since": since, "until": until, "sort": sort, "order": order,
    }  # fmt: skip
    if limit != PAGE_SIZE:
        params["limit"] = str(limit)
    try:
        tags: tuple[tuple[str, str], ...] = ()
        if tag:
            key, sep, value = tag.partition("=")
            if not sep or not key.strip():
                raise BadQuery(f"tag: KEY=VALUE, not {tag!r}")
            tags = ((key.strip(), value),)
        flt = RunFilter(
            teams=principal.teams,
            team=team or None,
            user=user or None,
            project=project or None,
            tags=tags,
            status=status or None,
            since=_date(since, "since"),
            until=_date(until, "until", end=True),
            text=q or None,
        )
        result = list_runs(session, flt, sort=sort, order=order, limit=limit, cursor=cursor or None)
    except BadQuery as e:
        return _error_page(request, principal, 400, str(e))
    prefix = _prefix(request)
    base = prefix + "/runs"
    data = {
        "rows": [_run_line(r) for r in result.runs],
        "teams": visible_teams(session, principal.teams),
        "statuses": STATUSES,
        "sorts": SORT_KEYS,
        "q": params,
        "live": not cursor,
        "self_url": base + _query_string({**params, "cursor": cursor}),
        "first_url": base + _query_string(params) if cursor else "",
        "next_url": (
            base + _query_string({**params, "cursor": result.next_cursor})
            if result.next_cursor
            else ""
        ),
    }
    return _page(request, partial, principal, "runs", data)


# -- Run ---------------------------------------------------------------------------------------


def _series_data(rows: Sequence[SeriesRow]) -> list[SeriesData]:
    return [SeriesData(s.name, s.labels, s.bucket_seconds, s.points) for s in rows]


def _safe_html(build: Any, *args: Any) -> Markup:
    """A section built by the report's code from an uploaded summary (escaped there); a summary
    it cannot read gives a note, not a failed page."""
    try:
        return Markup(build(*args))
    except Exception as e:  # an upload of an unexpected shape
        return Markup('<p class="warn">This section could not be shown: {}</p>').format(
            type(e).__name__
        )


def _num(v: object) -> float | None:
    """A finite number of an uploaded document, else None."""
    if not isinstance(v, int | float) or isinstance(v, bool):
        return None
    try:
        f = float(v)
    except OverflowError:  # an integer beyond a float
        return None
    return f if math.isfinite(f) else None


def _list(v: object) -> list[Any]:
    return v if isinstance(v, list) else []


class SummaryParts(TypedDict):
    """What a run's page shows of its uploaded summary."""

    gpus: list[list[str]]
    phases: list[list[str]]
    accounting: list[Markup]
    diagnosis: Markup
    notes: list[str]


def summary_sections(s: Mapping[str, Any]) -> SummaryParts:
    """The parts of a run's page read from its uploaded summary (any shape: what cannot be read
    is left out): GPU rows, phase rows, the accounting sections and the diagnosis as the
    report writes them, and the notes."""
    gpus: list[list[str]] = []
    for g in _list(s.get("gpus")):
        if not isinstance(g, dict):
            continue
        power = _num(g.get("power_mean_watts"))
        energy = _num(g.get("energy_joules"))
        gpus.append(
            [
                str(g.get("index", "")),
                str(g.get("name") or "?") + (" (simulated)" if g.get("simulated") else ""),
                format_percent(_num(g.get("utilization_mean"))),
                format_percent(_num(g.get("sm_active_mean"))),
                format_bytes(_num(g.get("memory_peak_bytes"))),
                format_watts(power),
                format_kwh(energy / 3.6e6 if energy is not None else None),
                str(g.get("energy_method") or ""),
            ]
        )
    phases: list[list[str]] = []
    ph = s.get("phases")
    by_name = ph.get("by_name") if isinstance(ph, dict) else None
    if isinstance(by_name, dict):
        for name, p in by_name.items():
            if not isinstance(p, dict):
                continue
            per = p.get("per_step_seconds")
            mean = _num(per.get("mean")) if isinstance(per, dict) else None
            phases.append(
                [
                    str(name),
                    format_seconds(_num(p.get("seconds")), clock=False),
                    format_percent(_num(p.get("share"))),
                    format_seconds(mean, clock=False),
                    str(p.get("steps", "")),
                ]
            )
    accounting = [
        _safe_html(accounting_section, name, s[name])
        for name in ACCOUNTING_SECTIONS
        if s.get(name) is not None
    ]
    notes = [n for n in _list(s.get("notes")) if isinstance(n, str)]
    return {
        "gpus": gpus,
        "phases": phases,
        "accounting": accounting,
        "diagnosis": _safe_html(diagnosis_html, s),
        "notes": notes,
    }


def _safe_repro(summary: Mapping[str, Any], meta: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The run's environment and configuration as the report shows them ([] when the upload
    carries none or a shape this version cannot read)."""
    try:
        return list(repro_lines(with_repro(cast(RunSummary, dict(summary)), meta)))
    except (TypeError, ValueError, AttributeError, KeyError):
        return []


_SIGNATURE_TEXT = {
    "valid": "signed by node key {key} (registered)",
    "unknown_key": "signed by key {key}, not registered for this team",
    "unsigned": "not signed",
}


def _signature_text(sig: SignatureCheck) -> str:
    """The run's usage-report signature as the ingest judged it (docs/upload.md)."""
    return _SIGNATURE_TEXT.get(sig.status, sig.status).format(key=sig.key_id or "?")


def _run_view(session: Session, principal: Principal, run_id: str) -> dict[str, Any] | None:
    detail = get_run(session, run_id, principal.teams)
    if detail is None:
        return None
    r = detail.run
    s: Mapping[str, Any] = detail.summary or {}
    end = r.ended_at if r.ended_at is not None else time.time()
    running = r.status == "running" and not r.final
    eff = efficiency(r, s)
    cards = [
        ("status", r.status, "exit " + (str(r.exit_code) if r.exit_code is not None else "n/a")),
        ("duration", format_duration(r.duration_seconds or (end - r.started_at)),
         "so far" if running else "wall time"),
        ("GPUs", gpus_text(r), gpu_hours_text(r.gpu_hours)),
        ("GPU utilization", format_percent(r.gpu_utilization), "mean over its GPUs"),
        ("MFU", format_percent(r.mfu), "model FLOPs / peak"),
        ("energy", format_kwh(r.kwh), "facility" + (" so far" if running else "")),
        ("cost", format_usd(r.cost_usd), "so far" if running else "total"),
        ("CO2e", format_grams(r.co2e_kg * 1000 if r.co2e_kg is not None else None), "operational"),
        ("steps", eff.cells()[0], f"{eff.cells()[2]} tokens"),
    ]  # fmt: skip
    charts = run_charts(_series_data(detail.series))
    table = [
        ("id", r.id),
        ("name", r.name or ""),
        ("team", r.team),
        ("user", r.user),
        ("project", r.project or ""),
        ("host", r.host),
        ("status", r.status),
        ("started", iso_minute(r.started_at) + " UTC"),
        ("ended", iso_minute(r.ended_at) + (" UTC" if r.ended_at else "")),
        ("GPU-hours", gpu_hours_text(r.gpu_hours)),
        ("idle GPU-hours", gpu_hours_text(r.idle_gpu_hours)),
        ("CPU-hours", format_number(r.cpu_hours, 3)),
        ("upload", f"seq {r.seq}" + (", final" if r.final else ", running")),
        ("usage report", _signature_text(run_signature(session, r.id))),
    ]
    parts = summary_sections(s)
    # the reproducibility record uploaded with the run: command, git, packages, hyperparameters
    repro = _safe_repro(s, detail.meta)
    return {
        "repro": repro,
        "id": r.id,
        "title": run_label(r),
        "command": " ".join(detail.command),
        "live": running,
        "cards": cards,
        "charts": charts,
        "charts_json": Markup(json_for_script(charts)),
        "table": table,
        "tags": sorted(r.tags.items()),
        **parts,
    }


@router.get("/runs/{run_id}", response_class=HTMLResponse)
def run_page(
    request: Request, run_id: str, principal: Me, session: Db, partial: Partial = False
) -> Response:
    view = _run_view(session, principal, run_id)
    if view is None:
        return _error_page(request, principal, 404, f"No run {run_id!r} that you may see.")
    eyebrow = f"run {run_id}" + (" · live" if view["live"] else "")
    heading = view["title"]
    text = ("runs", f"run {heading}", heading, eyebrow)
    return _page(request, partial, principal, "run", view, text)


# -- Compare -----------------------------------------------------------------------------------


@router.get("/compare", response_class=HTMLResponse)
def compare_page(
    request: Request,
    principal: Me,
    session: Db,
    ids: str = "",
    run: Annotated[list[str] | None, Query()] = None,
) -> Response:
    wanted = [i.strip() for i in ids.split(",") if i.strip()] + list(run or [])
    wanted = list(dict.fromkeys(wanted))[:20]
    if len(wanted) < 2:
        return _error_page(
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
        [(run_label(d.run), d.run.started_at, _series_data(d.series)) for d in found]
    )
    data = {
        "rows": rows,
        "missing": missing,
        "methods": ", ".join(sorted(methods)),
        "charts": charts,
        "charts_json": Markup(json_for_script(charts)),
    }
    return _render(
        request,
        "compare.html",
        principal=principal,
        page="runs",
        title="Compare runs",
        heading=f"Compare {len(found)} runs",
        eyebrow="overlaid charts and efficiency",
        cmp=data,
    )


# -- Usage -------------------------------------------------------------------------------------


def _usage_rows(
    session: Session, principal: Principal, by: str, bucket: str, since: str, until: str
) -> list[UsageRow]:
    return usage(
        session,
        by=by,
        teams=principal.teams,
        since=_date(since, "since"),
        until=_date(until, "until", end=True),
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
        rows = _usage_rows(session, principal, by, bucket, since, until)
    except BadQuery as e:
        return _error_page(request, principal, 400, str(e))
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
            format_number(r.cpu_hours.value, 2),
            format_kwh(r.kwh.value),
            format_usd(r.cost_usd.value),
            format_grams(r.co2e_kg.value * 1000 if r.co2e_kg.value is not None else None),
            format_percent(r.mean_utilization),
            format_percent(r.mean_mfu),
        ]
        cells.append(line)
        methods.update(f"energy {m}" for m in r.kwh.methods)
        methods.update(f"cost {m}" for m in r.cost_usd.methods)
    params = {"by": by, "bucket": bucket, "since": since, "until": until}
    prefix = _prefix(request)
    data = {
        "rows": cells,
        "q": params,
        "bys": USAGE_BY,
        "methods": ", ".join(sorted(methods)),
        "self_url": prefix + "/usage" + _query_string(params),
        "csv_url": prefix + "/usage.csv" + _query_string(params),
    }
    return _page(request, partial, principal, "usage", data)


def _csv_num(v: float | None) -> str:
    return "" if v is None else format(v, ".10g")


@router.get("/usage.csv")
def usage_csv(
    request: Request,
    principal: Me,
    session: Db,
    by: str = "team",
    bucket: str = "",
    since: str = "",
    until: str = "",
) -> Response:
    try:
        rows = _usage_rows(session, principal, by, bucket, since, until)
    except BadQuery as e:
        raise HTTPException(400, str(e)) from None
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\r\n")
    w.writerow(CSV_COLUMNS)
    for r in rows:
        w.writerow(
            [
                _csv_text(r.key or ""),
                r.bucket or "",
                r.runs,
                _csv_num(r.gpu_hours.value),
                _csv_num(r.idle_gpu_hours.value),
                _csv_num(r.cpu_hours.value),
                _csv_num(r.kwh.value),
                _csv_num(r.kwh.low),
                _csv_num(r.kwh.high),
                ";".join(r.kwh.methods),
                _csv_num(r.cost_usd.value),
                _csv_num(r.cost_usd.low),
                _csv_num(r.cost_usd.high),
                ";".join(r.cost_usd.methods),
                _csv_num(r.co2e_kg.value),
                _csv_num(r.co2e_kg.low),
                _csv_num(r.co2e_kg.high),
                _csv_num(r.mean_utilization),
                _csv_num(r.mean_mfu),
            ]
        )
    name = f"computewatch-usage-by-{by}" + (f"-{bucket}" if bucket else "") + ".csv"
    return Response(
        out.getvalue(),
        media_type="text/csv; charset=utf-8",
        headers={"Content-Disposition": f'attachment; filename="{name}"'},
    )


def _csv_text(v: str) -> str:
    """A cell a spreadsheet will not run as a formula (OWASP CSV injection)."""
    return "'" + v if v[:1] in ("=", "+", "-", "@", "\t", "\r") else v


# -- Budgets -----------------------------------------------------------------------------------


def _budgets_view(session: Session, principal: Principal, request: Request) -> dict[str, Any]:
    opts = _options(request)
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
    return _page(request, partial, principal, "budgets", data)


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
) -> Response:
    _same_origin(request)
    _admin(principal)
    prefix = _prefix(request)
    try:
        try:
            value = float(amount)
        except ValueError:
            raise ComputewatchError(f"budget amount: a number, not {amount!r}") from None
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
def delete_budget_form(request: Request, budget_id: int, principal: Me, session: Db) -> Response:
    _same_origin(request)
    _admin(principal)
    delete_budget(session, budget_id)
    return RedirectResponse(_prefix(request) + "/budgets", 303)


# -- Fleet -------------------------------------------------------------------------------------


@router.get("/fleet", response_class=HTMLResponse)
def fleet_page(
    request: Request,
    principal: Me,
    hours: Annotated[float, Query(gt=0, le=24 * 90)] = 24.0,
    by: str = "team",
) -> Response:
    opts = _options(request)
    if not opts.prometheus_url:
        return _error_page(
            request, principal, 404,
            "No Prometheus is configured for this server ([server] prometheus_url).",
        )  # fmt: skip
    if not principal.is_admin:  # the fleet report spans every team
        return _error_page(request, principal, 403, "The fleet page is for admin tokens.")
    if by not in ("job", "user", "team", "gpu-model"):
        return _error_page(request, principal, 400, f"by: job, user, team or gpu-model, not {by!r}")
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
        return _error_page(request, principal, 502, f"Fleet report: {e}")
    return HTMLResponse(build_fleet_html(report, charts), headers={"Cache-Control": "no-store"})


# -- installing it into the app ----------------------------------------------------------------


def parse_targets(specs: Sequence[str]) -> tuple[Target, ...]:
    """``[server] budget_notify`` values as targets; :class:`ComputewatchError` for a bad one."""
    out: list[Target] = []
    for spec in specs:
        try:
            t = parse_target(spec)
        except ValueError as e:
            raise ComputewatchError(f"[server] budget_notify: {e}") from None
        if t not in out:
            out.append(t)
    return tuple(out)


def options_from_config(cfg: Config | None = None) -> DashboardOptions:
    """The dashboard's options from the configuration's ``[server]`` section (``prometheus_url``,
    ``budget_notify``, ``budget_interval``)."""
    c = cfg if cfg is not None else load_config()
    return DashboardOptions(
        prometheus_url=c.server_prometheus_url,
        budget_notify=tuple(c.server_budget_notify),
        budget_interval=c.server_budget_interval or 60.0,
    )


def install_dashboard(app: FastAPI, options: DashboardOptions | None = None) -> None:
    """Add the pages, their static files and the budget evaluation to the server's app;
    ``options`` default to the configuration's (:func:`options_from_config`). Raises
    :class:`ComputewatchError` for a bad configuration or alert target."""
    opts = options if options is not None else options_from_config()
    object.__setattr__(opts, "targets", parse_targets(opts.budget_notify))
    app.state.dashboard = opts
    app.include_router(router)
    app.mount("/static", StaticFiles(directory=_STATIC), name="static")
