"""The diagnosis as rows of the run summary and as an HTML section of the report
(``computewatch diagnose`` prints it with rich: ``views.text.print_diagnosis``). Works on the
JSON form (``Diagnosis.as_dict()``), so a stored summary renders as a fresh diagnosis does."""

from __future__ import annotations

import html
from collections.abc import Mapping
from typing import Any

from computewatch.units import format_seconds, format_usd


def findings(diagnosis: Any) -> list[dict[str, Any]]:
    """The findings of a diagnosis in its JSON form; none for anything else."""
    if not isinstance(diagnosis, dict):
        return []
    return [f for f in diagnosis.get("findings") or [] if isinstance(f, dict)]


def at_stake_text(finding: dict[str, Any], duration: float | None = None) -> str:
    """``12.3 s (8% of the run), $0.42 at stake``; empty when nothing measurable is."""
    stake = finding.get("at_stake") or {}
    parts = []
    seconds = stake.get("seconds")
    if isinstance(seconds, int | float):
        share = f" ({100 * seconds / duration:.0f}% of the run)" if duration else ""
        parts.append(f"{format_seconds(seconds)}{share}")
    usd = stake.get("usd")
    if isinstance(usd, int | float):
        parts.append(format_usd(usd))
    return ", ".join(parts) + " at stake" if parts else ""


def diagnosis_rows(summary: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Rows for the summary table: one per finding, or one saying none was found."""
    diag = summary.get("diagnosis")
    if not isinstance(diag, dict):
        return []
    if diag.get("error"):
        return [("diagnosis", str(diag["error"]))]
    found = findings(diag)
    if not found:
        n = len(diag.get("checked") or [])
        return [("diagnosis", f"no bottleneck found ({n} rules applied)")]
    duration = summary.get("duration_seconds")
    rows = []
    for f in found:
        stake = at_stake_text(f, duration if isinstance(duration, int | float) else None)
        rows.append(
            (
                "diagnosis",
                f"{f.get('severity')}: {f.get('title')}" + (f" · {stake}" if stake else ""),
            )
        )
    rows.append(("", f"evidence and suggestions: computewatch diagnose {summary.get('id')}"))
    return rows


def diagnosis_html(summary: Mapping[str, Any]) -> str:
    """The report's "Diagnosis" section; empty when the summary has none."""
    diag = summary.get("diagnosis")
    if not isinstance(diag, dict):
        return ""
    e = html.escape
    parts = ['<section id="section-diagnosis"><h2>Diagnosis</h2>']
    if diag.get("error"):
        parts.append(f'<p class="warn">{e(str(diag["error"]))}</p>')
    found = findings(diag)
    if not found and not diag.get("error"):
        n = len(diag.get("checked") or [])
        parts.append(f"<p>No bottleneck found by the {n} rules applied.</p>")
    duration = summary.get("duration_seconds")
    for f in found:
        sev = str(f.get("severity"))
        stake = at_stake_text(f, duration if isinstance(duration, int | float) else None)
        parts.append(
            f'<article class="finding severity-{e(sev)}" id="finding-{e(str(f.get("id")))}">'
            f"<h3>{e(str(f.get('title')))} <small>({e(sev)}"
            + (f"; {e(stake)}" if stake else "")
            + ")</small></h3>"
        )
        ev = f.get("evidence") or {}
        items = [e(str(x)) for x in ev.get("lines") or []]
        ranges = ev.get("time_ranges") or []
        if ranges:
            items.append(
                "when: "
                + e(
                    ", ".join(
                        f"{r.get('start_seconds', 0):,.1f}-{r.get('end_seconds', 0):,.1f} s"
                        for r in ranges
                    )
                )
                + " from the run's start"
            )
        parts.append("<ul>" + "".join(f"<li>{x}</li>" for x in items) + "</ul>")
        parts.append(f"<p><strong>Suggestion:</strong> {e(str(f.get('suggestion')))}</p></article>")
    skipped = diag.get("not_applicable") or {}
    if skipped:
        parts.append(
            "<details><summary>Rules not applied to this run</summary><ul>"
            + "".join(f"<li><code>{e(k)}</code>: {e(str(v))}</li>" for k, v in skipped.items())
            + "</ul></details>"
        )
    parts.append("</section>")
    return "".join(parts)
