"""The login form (``GET /login``; the server's app handles its POST) and the report's assets
the pages load (uPlot and the report's style sheet)."""

from __future__ import annotations

from importlib import resources
from typing import Final

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import HTMLResponse, Response

from computewatch.server.auth import safe_next
from computewatch.server.web.rendering import ENV, prefix_of

__all__ = ["REPORT_ASSETS", "router"]

REPORT_ASSETS: Final = frozenset({"uPlot.iife.min.js", "uPlot.min.css", "report.css"})
"""The report's files the dashboard serves from ``views/html/assets`` (not copied)."""

router = APIRouter(include_in_schema=False)


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
    prefix = prefix_of(request)
    messages = {"1": "That token is not valid (unknown, mistyped or revoked)."}
    html = ENV.get_template("login.html").render(
        prefix=prefix, next=safe_next(next), error=messages.get(error, "")
    )
    return HTMLResponse(html, headers={"Cache-Control": "no-store"})
