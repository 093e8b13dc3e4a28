"""The usage table as CSV (``/usage.csv``, columns in docs/dashboard.md): the page's rows with
every figure's low-high range and methods, in full precision."""

from __future__ import annotations

import csv
import io
from typing import Final

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import Response

from computewatch.server.web.rendering import Db, Me
from computewatch.server.web.usage import usage_rows
from computewatch.serverdb.queries import BadQuery

__all__ = ["CSV_COLUMNS", "router"]

CSV_COLUMNS: Final = (
    "group", "bucket", "runs", "gpu_hours", "idle_gpu_hours", "cpu_hours", "kwh", "kwh_low",
    "kwh_high", "kwh_methods", "cost_usd", "cost_low_usd", "cost_high_usd", "cost_methods",
    "co2e_kg", "co2e_low_kg", "co2e_high_kg", "mean_utilization", "mean_mfu",
)  # fmt: skip
"""The columns of ``/usage.csv`` (docs/dashboard.md)."""

router = APIRouter(include_in_schema=False)


def _csv_num(v: float | None) -> str:
    return "" if v is None else format(v, ".10g")


def _csv_text(v: str) -> str:
    """A cell a spreadsheet will not run as a formula (OWASP CSV injection)."""
    return "'" + v if v[:1] in ("=", "+", "-", "@", "\t", "\r") else v


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
        rows = usage_rows(session, principal, by, bucket, since, until)
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
