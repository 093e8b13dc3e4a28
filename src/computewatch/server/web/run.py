"""A run's page (``/runs/ID``): key figures, charts of its uploaded series, its table, GPUs,
phases, the accounting and diagnosis sections as the report writes them, and its
reproducibility record; refreshed live while the run runs."""

from __future__ import annotations

import math
import shlex
import time
from collections.abc import Callable, Mapping
from typing import Any, TypedDict, cast

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response
from markupsafe import Markup
from sqlalchemy.orm import Session

from computewatch.analysis.repro import with_repro
from computewatch.analysis.summary_types import RunSummary
from computewatch.lineage.compute import qualify
from computewatch.server.auth import Principal
from computewatch.server.goodput import server_goodput
from computewatch.server.web.charts import run_charts
from computewatch.server.web.figures import (
    cpu_hours_text,
    efficiency,
    gpu_hours_text,
    gpus_text,
    iso_minute,
    run_label,
)
from computewatch.server.web.rendering import Db, Me, Partial, error_page, page
from computewatch.server.web.viewmodels import series_data
from computewatch.serverdb.node_keys import SignatureCheck, run_signature
from computewatch.serverdb.queries import get_run
from computewatch.units import (
    format_bytes,
    format_duration,
    format_grams,
    format_kwh,
    format_mfu,
    format_percent,
    format_seconds,
    format_usd,
    format_watts,
)
from computewatch.views.diagnosis import diagnosis_html
from computewatch.views.goodput import goodput_html
from computewatch.views.html.page import json_for_script
from computewatch.views.html.run import ACCOUNTING_SECTIONS, accounting_section
from computewatch.views.repro import repro_lines

__all__ = ["SummaryParts", "router", "summary_sections"]

router = APIRouter(include_in_schema=False)


def _safe_html(build: Callable[..., str], *args: Any) -> Markup:
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
        ("MFU", format_mfu(r.mfu), "model FLOPs / peak"),
        ("energy", format_kwh(r.kwh), "facility" + (" so far" if running else "")),
        ("cost", format_usd(r.cost_usd), "so far" if running else "total"),
        ("CO2e", format_grams(r.co2e_kg * 1000 if r.co2e_kg is not None else None), "operational"),
        ("steps", eff.cells()[0], f"{eff.cells()[2]} tokens"),
    ]  # fmt: skip
    charts = run_charts(series_data(detail.series))
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
        ("CPU-hours", cpu_hours_text(r.cpu_hours)),
        ("upload", f"seq {r.seq}" + (", final" if r.final else ", running")),
        ("usage report", _signature_text(run_signature(session, r.id))),
    ]
    parts = summary_sections(s)
    declared = detail.meta.get("governance")
    model = declared.get("model") if isinstance(declared, dict) else None
    goodput = Markup("")
    if isinstance(model, str) and model:  # the training this run is part of, run by run
        goodput = _safe_html(
            lambda: goodput_html(
                server_goodput(session, principal.teams, model=qualify(r.team, model)),
                "Goodput across its runs",
            )
        )
    # the reproducibility record uploaded with the run: command, git, packages, hyperparameters
    repro = _safe_repro(s, detail.meta)
    return {
        "repro": repro,
        "id": r.id,
        "title": run_label(r),
        "command": shlex.join(str(a) for a in detail.command),
        "live": running,
        "eyebrow": f"run {r.id}" + (" · live" if running else ""),
        "cards": cards,
        "charts": charts,
        "charts_json": Markup(json_for_script(charts)),
        "table": table,
        "tags": sorted(r.tags.items()),
        "goodput": goodput,
        **parts,
    }


@router.get("/runs/{run_id}", response_class=HTMLResponse)
def run_page(
    request: Request, run_id: str, principal: Me, session: Db, partial: Partial = False
) -> Response:
    view = _run_view(session, principal, run_id)
    if view is None:
        return error_page(request, principal, 404, f"No run {run_id!r} that you may see.")
    heading = view["title"]
    text = ("runs", f"run {heading}", heading, view["eyebrow"])
    return page(request, partial, principal, "run", view, text)
