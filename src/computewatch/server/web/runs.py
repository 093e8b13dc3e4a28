"""The runs list (``/runs``): filters, sorting, cursor paging and the comparison's checkboxes."""

from __future__ import annotations

from typing import Annotated, Final

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, Response

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
from computewatch.server.web.viewmodels import run_line
from computewatch.serverdb.queries import (
    SORT_KEYS,
    BadQuery,
    RunFilter,
    list_runs,
    visible_teams,
)

__all__ = ["PAGE_SIZE", "STATUSES", "router"]

PAGE_SIZE: Final = 50
STATUSES: Final = ("running", "completed", "failed", "interrupted")

router = APIRouter(include_in_schema=False)


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
            since=parse_date(since, "since"),
            until=parse_date(until, "until", end=True),
            text=q or None,
        )
        result = list_runs(session, flt, sort=sort, order=order, limit=limit, cursor=cursor or None)
    except BadQuery as e:
        return error_page(request, principal, 400, str(e))
    base = prefix_of(request) + "/runs"
    data = {
        "rows": [run_line(r) for r in result.runs],
        "teams": visible_teams(session, principal.teams),
        "statuses": STATUSES,
        "sorts": SORT_KEYS,
        "q": params,
        "live": not cursor,
        "self_url": base + query_string({**params, "cursor": cursor}),
        "first_url": base + query_string(params) if cursor else "",
        "next_url": (
            base + query_string({**params, "cursor": result.next_cursor})
            if result.next_cursor
            else ""
        ),
    }
    return page(request, partial, principal, "runs", data)
