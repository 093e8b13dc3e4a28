"""What every page shares: the Jinja2 templates (autoescaped), the layout's navigation, the
whole page or its htmx fragment, the error page, and the request dependencies (the caller,
the database session, ``?partial=1``)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Final
from urllib.parse import urlencode

import jinja2
from fastapi import Depends, Query, Request
from fastapi.responses import HTMLResponse
from markupsafe import Markup
from sqlalchemy.orm import Session

from computewatch._version import __version__
from computewatch.server.auth import Principal, csrf_token, db_session, page_principal
from computewatch.server.web.options import options_of
from computewatch.serverdb.queries import BadQuery
from computewatch.views.html.page import UPLOT_VERSION
from computewatch.views.html.run import card_value

__all__ = [
    "ENV",
    "HTMX_VERSION",
    "STATIC",
    "Db",
    "Me",
    "PageText",
    "Partial",
    "error_page",
    "page",
    "parse_date",
    "partial",
    "prefix_of",
    "query_string",
    "render",
]

HTMX_VERSION: Final = "2.0.11"
STATIC: Final = Path(str(resources.files("computewatch.server").joinpath("static")))
_TEMPLATES = Path(str(resources.files("computewatch.server").joinpath("templates")))
_NAV = (
    ("/", "Now", "now"),
    ("/runs", "Runs", "runs"),
    ("/usage", "Usage and cost", "usage"),
    ("/budgets", "Budgets", "budgets"),
    ("/governance", "Governance", "governance"),
)
_NAV_FLEET = ("/fleet", "Fleet", "fleet")

PageText = tuple[str, str, str, str]
"""A page's navigation key, title, heading and the line above the heading."""

_PAGES: dict[str, PageText] = {
    "now": ("now", "Now", "Now", "running runs and nodes, live"),
    "runs": ("runs", "Runs", "Runs", "filter, sort, page through, compare"),
    "usage": ("usage", "Usage and cost", "Usage and cost", "by team, user, project or GPU model"),
    "budgets": ("budgets", "Budgets", "Budgets", "per team or project, per month or week"),
    "governance": (
        "governance",
        "Governance",
        "Governance",
        "each model's compute, tiers and obligations",
    ),
}


def _env() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(_TEMPLATES)),
        autoescape=True,  # every run name, tag, command and team name is user input
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["card_value"] = _card_value
    return env


def _card_value(text: str) -> Markup:
    """A card's value with its unit set smaller (as the report's cards), escaped."""
    return Markup(card_value(str(text)))


ENV: Final = _env()

Me = Annotated[Principal, Depends(page_principal)]
Db = Annotated[Session, Depends(db_session)]
Partial = Annotated[bool, Query()]


def prefix_of(request: Request) -> str:
    """The path the server is mounted under (``root_path``), without a trailing slash."""
    return str(request.scope.get("root_path", "")).rstrip("/")


def render(
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
    """``template`` inside the layout (navigation, header, footer). Every template gets
    ``csrf``, the session's anti-forgery token, for the hidden field of a form that changes
    state."""
    opts = options_of(request)
    nav = list(_NAV)
    if opts.prometheus_url and principal is not None and principal.is_admin:
        nav.append(_NAV_FLEET)
    prefix = prefix_of(request)
    html = ENV.get_template(template).render(
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
        csrf=csrf_token(request),
        is_partial=False,
        **context,
    )
    return HTMLResponse(html, status_code=status_code, headers={"Cache-Control": "no-store"})


def error_page(request: Request, principal: Principal, status: int, message: str) -> HTMLResponse:
    return render(
        request,
        "error.html",
        principal=principal,
        page="",
        title=f"{status}",
        heading="Cannot show this page",
        message=message,
        status_code=status,
    )


def page(
    request: Request,
    is_partial: bool,
    principal: Principal | None,
    name: str,
    data: Any,
    text: PageText | None = None,
) -> HTMLResponse:
    """A dashboard page: the fragment ``_NAME.html`` alone when htmx asks for it (``partial``,
    the live refresh), else ``NAME.html`` inside the layout, its ``data`` named ``NAME`` in
    the template. ``text`` defaults to the page's navigation key, title, heading and
    eyebrow."""
    if is_partial:
        return partial(
            f"_{name}.html",
            prefix=prefix_of(request),
            csrf=csrf_token(request),
            is_partial=True,
            **{name: data},
        )
    key, title, heading, eyebrow = text or _PAGES[name]
    return render(
        request,
        f"{name}.html",
        principal=principal,
        page=key,
        title=title,
        heading=heading,
        eyebrow=eyebrow,
        **{name: data},
    )


def partial(template: str, **context: object) -> HTMLResponse:
    html = ENV.get_template(template).render(**context)
    return HTMLResponse(html, headers={"Cache-Control": "no-store"})


def parse_date(text: str, name: str, *, end: bool = False) -> float | None:
    """``YYYY-MM-DD`` (UTC) as Unix seconds: the day's start, or its end with ``end``."""
    if not text:
        return None
    try:
        d = dt.datetime.strptime(text, "%Y-%m-%d").replace(tzinfo=dt.UTC)
    except ValueError:
        raise BadQuery(f"{name}: a date YYYY-MM-DD, not {text!r}") from None
    return (d + dt.timedelta(days=1) if end else d).timestamp()


def query_string(params: Mapping[str, str]) -> str:
    kept = {k: v for k, v in params.items() if v}
    return "?" + urlencode(kept) if kept else ""
