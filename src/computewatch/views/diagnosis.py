"""The diagnosis as text (``computewatch diagnose``, the run summary) and as an HTML section of
the report. Works on the JSON form (``Diagnosis.as_dict()``), so a stored summary renders as a
fresh diagnosis does."""

from __future__ import annotations

import html
from collections.abc import Mapping
from typing import Any, TextIO

from rich.console import Console
from rich.table import Table
from rich.text import Text

from computewatch.units import format_seconds, format_usd

_STYLE = {"high": "bold red", "medium": "yellow", "low": "cyan"}


def _findings(diagnosis: Any) -> list[dict[str, Any]]:
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
    found = _findings(diag)
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


def print_diagnosis(result: dict[str, Any], out: TextIO) -> None:
    """The full diagnosis: each finding with its evidence, time ranges and suggestion."""
    con = Console(file=out, highlight=False, soft_wrap=False, width=_width(out))
    run = result.get("run") or {}
    head = f"diagnosis of run {run.get('id')}" + (f" · {run['name']}" if run.get("name") else "")
    con.print(Text(head, style="bold"))
    if result.get("error"):
        con.print(Text(str(result["error"]), style="yellow"))
    found = _findings(result)
    if not found and not result.get("error"):
        con.print(f"no bottleneck found by the {len(result.get('checked') or [])} rules applied")
    duration = run.get("duration_seconds")
    for i, f in enumerate(found, 1):
        sev = str(f.get("severity"))
        line = Text(f"\n{i}. ")
        line.append(f"[{sev}]", style=_STYLE.get(sev, ""))
        line.append(f" {f.get('title')}", style="bold")
        stake = at_stake_text(f, duration if isinstance(duration, int | float) else None)
        if stake:
            line.append(f" · {stake}")
        con.print(line)
        ev = f.get("evidence") or {}
        for text in ev.get("lines") or []:
            _hang(con, "   - ", text)
        ranges = ev.get("time_ranges") or []
        if ranges:
            spans = ", ".join(
                f"{r.get('start_seconds', 0):,.1f}-{r.get('end_seconds', 0):,.1f} s" for r in ranges
            )
            _hang(con, "   when: ", f"{spans} from the run's start")
        _hang(con, "   suggestion: ", str(f.get("suggestion")), style="green")
    skipped = result.get("not_applicable") or {}
    failed = result.get("failed") or {}
    if skipped or failed:
        con.print()
    for rule, why in skipped.items():
        _hang(con, "not checked: ", f"{rule}: {why}", style="dim")
    for rule, why in failed.items():
        _hang(con, "rule failed: ", f"{rule}: {why}", style="yellow")


def _hang(con: Console, prefix: str, text: str, style: str = "") -> None:
    """``prefix`` then ``text``, wrapped lines indented under the text (a hanging indent)."""
    grid = Table.grid(padding=0)
    grid.add_column(width=len(prefix), no_wrap=True)
    grid.add_column(ratio=1)
    grid.add_row(Text(prefix, style=style), Text(text, style=style))
    con.print(grid)


def _width(out: TextIO) -> int:
    try:
        return max(Console(file=out).width, 100) if out.isatty() else 100
    except Exception:
        return 100


def diagnosis_html(summary: Mapping[str, Any]) -> str:
    """The report's "Diagnosis" section; empty when the summary has none."""
    diag = summary.get("diagnosis")
    if not isinstance(diag, dict):
        return ""
    e = html.escape
    parts = ['<section id="section-diagnosis"><h2>Diagnosis</h2>']
    if diag.get("error"):
        parts.append(f'<p class="warn">{e(str(diag["error"]))}</p>')
    found = _findings(diag)
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
