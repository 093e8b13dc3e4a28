"""The diagnosis as rows of the run summary and as an HTML section of the report
(``computewatch diagnose`` prints it: ``views.text.print_diagnosis``). Works on the JSON form
(``Diagnosis.as_dict()``, typed in ``analysis.summary_types``), so a stored summary renders as
a fresh diagnosis does; a stored one is read defensively (an entry that is not a mapping is
skipped, a missing list is empty)."""

from __future__ import annotations

import html
from collections.abc import Sequence

from computewatch.analysis.summary_types import (
    DiagnosisSection,
    EvidenceJson,
    FindingJson,
    RunSummary,
    TimeRangeJson,
)
from computewatch.diagnosis.findings import at_stake_text, saving_text, span_text
from computewatch.units import MISSING

__all__ = [
    "diagnosis_html",
    "diagnosis_rows",
    "evidence_of",
    "finding_head",
    "findings",
    "joint_text",
    "rule_notes",
    "saving_detail",
    "time_ranges_text",
]


def findings(diagnosis: DiagnosisSection | None) -> list[FindingJson]:
    """The findings of a diagnosis in its JSON form; none without one."""
    if not isinstance(diagnosis, dict):
        return []
    return [f for f in diagnosis.get("findings") or [] if isinstance(f, dict)]


def joint_text(diagnosis: DiagnosisSection | None, duration: float | None) -> str:
    """``all fixes together: saves 9.1 s (20% of the run; ...)``: the findings' savings
    combined (never past the run); empty without findings or a stored joint saving."""
    if not isinstance(diagnosis, dict):
        return ""
    joint = diagnosis.get("saving")
    if not isinstance(joint, dict) or not findings(diagnosis):
        return ""
    text = saving_text(joint, duration)
    return f"all fixes together: {text}" if text else ""


def saving_detail(finding: FindingJson) -> tuple[str, str]:
    """A finding's fix and what its saving assumes (empty where a stored one has none)."""
    saving = finding.get("saving")
    if not isinstance(saving, dict):
        return "", ""
    fix, assumes = saving.get("fix"), saving.get("assumes")
    return (
        fix if isinstance(fix, str) and fix != "none" else "",
        assumes if isinstance(assumes, str) else "",
    )


def finding_head(finding: FindingJson) -> tuple[str, str]:
    """A finding's severity and title as text (``n/a`` where a stored one lacks them)."""
    return str(finding.get("severity") or MISSING), str(finding.get("title") or MISSING)


def evidence_of(finding: FindingJson) -> EvidenceJson:
    """A finding's evidence; an empty one where a stored finding has none, or not a mapping."""
    ev = finding.get("evidence")
    return ev if isinstance(ev, dict) else {"lines": [], "numbers": {}, "time_ranges": []}


def time_ranges_text(ranges: Sequence[TimeRangeJson]) -> str:
    """``12.0-30.5 s, 80.0-95.2 s``: the stretches of the run, in seconds from its start, as
    the rules write them."""
    return ", ".join(
        span_text(r.get("start_seconds", 0), r.get("end_seconds", 0))
        for r in ranges
        if isinstance(r, dict)
    )


def rule_notes(notes: dict[str, str] | None) -> dict[str, str]:
    """``not_applicable`` or ``failed``: why, by rule; empty where a stored one is not a
    mapping."""
    return notes if isinstance(notes, dict) else {}


def _duration(summary: RunSummary) -> float | None:
    duration = summary.get("duration_seconds")
    return duration if isinstance(duration, int | float) else None


def diagnosis_rows(summary: RunSummary) -> list[tuple[str, str]]:
    """Rows for the summary table: one per finding, or one saying none was found."""
    diag = summary.get("diagnosis")
    if not isinstance(diag, dict):
        return []
    if diag.get("error"):
        return [("diagnosis", str(diag.get("error")))]
    found = findings(diag)
    if not found:
        n = len(diag.get("checked") or [])
        return [("diagnosis", f"no bottleneck found ({n} rules applied)")]
    rows = []
    for f in found:
        stake = at_stake_text(f, _duration(summary))
        sev, title = finding_head(f)
        rows.append(("diagnosis", f"{sev}: {title}" + (f" · {stake}" if stake else "")))
    joint = joint_text(diag, _duration(summary))
    if joint and len(found) > 1:
        rows.append(("", joint))
    rows.append(("", f"evidence and suggestions: computewatch diagnose {summary.get('id')}"))
    return rows


def diagnosis_html(summary: RunSummary) -> str:
    """The report's "Diagnosis" section; empty when the summary has none."""
    diag = summary.get("diagnosis")
    if not isinstance(diag, dict):
        return ""
    e = html.escape
    parts = ['<section id="section-diagnosis"><h2>Diagnosis</h2>']
    error = diag.get("error")
    if error:
        parts.append(f'<p class="warn">{e(str(error))}</p>')
    found = findings(diag)
    if not found and not error:
        n = len(diag.get("checked") or [])
        parts.append(f"<p>No bottleneck found by the {n} rules applied.</p>")
    joint = joint_text(diag, _duration(summary))
    if joint:
        parts.append(f'<p class="joint-saving"><strong>{e(joint)}</strong></p>')
    for f in found:
        sev, title = finding_head(f)
        stake = at_stake_text(f, _duration(summary))
        parts.append(
            f'<article class="finding severity-{e(sev)}" id="finding-{e(str(f.get("id")))}">'
            f"<h3>{e(title)} <small>({e(sev)}"
            + (f"; {e(stake)}" if stake else "")
            + ")</small></h3>"
        )
        ev = evidence_of(f)
        items = [e(str(x)) for x in ev.get("lines") or []]
        spans = time_ranges_text(ev.get("time_ranges") or [])
        if spans:
            items.append(f"when: {e(spans)} from the run's start")
        parts.append("<ul>" + "".join(f"<li>{x}</li>" for x in items) + "</ul>")
        parts.append(f"<p><strong>Suggestion:</strong> {e(str(f.get('suggestion')))}</p>")
        fix, assumes = saving_detail(f)
        if fix or assumes:
            parts.append(
                '<p class="saving"><strong>Saving:</strong> '
                + (f"{e(fix)}" if fix else "")
                + (f"; the model assumes {e(assumes)}" if assumes else "")
                + "</p>"
            )
        parts.append("</article>")
    skipped = rule_notes(diag.get("not_applicable"))
    if skipped:
        parts.append(
            "<details><summary>Rules not applied to this run</summary><ul>"
            + "".join(f"<li><code>{e(k)}</code>: {e(str(v))}</li>" for k, v in skipped.items())
            + "</ul></details>"
        )
    parts.append("</section>")
    return "".join(parts)
