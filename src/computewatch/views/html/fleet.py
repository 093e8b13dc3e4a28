"""The fleet report as one self-contained HTML page, readable with no network.

It is built like the run report (``computewatch.views.html.run``) and shares its assets: the
vendored uPlot, the chart script (which draws every chart of the embedded JSON on a shared
time axis) and the style sheet. The GPU-hours bars are inline SVG drawn here, so they read and
print without JavaScript, as do the tables. Group names (jobs, users, teams) come from job
labels, user input: every one is escaped.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from computewatch._version import __version__
from computewatch.analysis.summary import iso
from computewatch.records import Figure, figure
from computewatch.units import format_grams, format_kwh, format_number, format_percent, format_usd
from computewatch.views.html.page import (
    UPLOT_VERSION,
    chart_figure,
    escape,
    kv_table,
    notes_section,
    page_end,
    page_head,
    write_page,
)
from computewatch.views.html.run import accounting_section, cards_section

__all__ = ["build_fleet_html", "gpu_hours_svg", "write_fleet_html"]

_BAR_HEIGHT = 22
_BAR_GAP = 8
_LABEL_WIDTH = 220
_BAR_WIDTH = 560
_VALUE_WIDTH = 200
_STYLE = (
    "svg.bars{max-width:980px;display:block}tr.total th,tr.total td{border-top:2px solid #d1d9e0}"
)


def gpu_hours_svg(groups: Sequence[dict[str, Any]], *, title: str) -> str:
    """Horizontal bars of GPU-hours held per group, the idle part of each in its own colour,
    with the idle share written beside it."""
    if not groups:
        return ""
    top = max(float(g["gpu_hours"]["value"] or 0.0) for g in groups) or 1.0
    height = len(groups) * (_BAR_HEIGHT + _BAR_GAP) + 30
    width = _LABEL_WIDTH + _BAR_WIDTH + _VALUE_WIDTH
    out = [
        f'<svg class="bars" role="img" viewBox="0 0 {width} {height}" width="100%" '
        f'xmlns="http://www.w3.org/2000/svg" aria-labelledby="bars-title">'
        f'<title id="bars-title">{escape(title)}</title>'
        '<g font-family="system-ui, sans-serif" font-size="13">'
    ]
    for i, g in enumerate(groups):
        y = i * (_BAR_HEIGHT + _BAR_GAP)
        held = float(g["gpu_hours"]["value"] or 0.0)
        idle = float(g["idle_gpu_hours"]["value"] or 0.0)
        w_held = _BAR_WIDTH * held / top
        w_idle = _BAR_WIDTH * min(idle, held) / top
        label = g["label"] + (
            " (simulated)" if g.get("simulated") and "(simulated)" not in g["label"] else ""
        )
        short = label if len(label) <= 30 else label[:29] + "…"
        out.append(
            f'<g class="bar" data-group="{escape(g["group"])}" data-gpu-hours="{held:.6g}" '
            f'data-idle-gpu-hours="{idle:.6g}">'
            f"<title>{escape(label)}: {format_number(held)} GPU-hours held, "
            f"{format_number(idle)} idle "
            f"({format_percent(g.get('idle_share'))})</title>"
            f'<text x="{_LABEL_WIDTH - 8}" y="{y + 16}" text-anchor="end" fill="#1f2328">'
            f"{escape(short)}</text>"
            f'<rect class="held" x="{_LABEL_WIDTH}" y="{y}" width="{w_held:.1f}" '
            f'height="{_BAR_HEIGHT}" fill="#0969da"/>'
            f'<rect class="idle" x="{_LABEL_WIDTH + w_held - w_idle:.1f}" y="{y}" '
            f'width="{w_idle:.1f}" height="{_BAR_HEIGHT}" fill="#cf222e"/>'
            f'<text x="{_LABEL_WIDTH + w_held + 6:.1f}" y="{y + 16}" fill="#59636e">'
            f"{format_number(held)} GPU-h · idle {format_percent(g.get('idle_share'))}</text></g>"
        )
    y = len(groups) * (_BAR_HEIGHT + _BAR_GAP) + 12
    out.append(
        f'<g class="legend"><rect x="{_LABEL_WIDTH}" y="{y}" width="12" height="12" '
        f'fill="#0969da"/><text x="{_LABEL_WIDTH + 18}" y="{y + 11}" fill="#59636e">held, in '
        f'use</text><rect x="{_LABEL_WIDTH + 130}" y="{y}" width="12" height="12" '
        f'fill="#cf222e"/><text x="{_LABEL_WIDTH + 148}" y="{y + 11}" fill="#59636e">held, '
        "idle (utilization below 5%)</text></g>"
    )
    out.append("</g></svg>")
    return "".join(out)


def _cards(total: dict[str, Any]) -> str:
    cards = [
        ("GPU-hours", format_number(total["gpu_hours"]["value"]), "held by jobs"),
        (
            "idle GPU-hours",
            format_number(total["idle_gpu_hours"]["value"]),
            f"{format_percent(total['idle_share'])} of held",
        ),
        ("mean GPU util", format_percent(total["utilization_mean"]["value"]), "while held"),
        ("energy", format_kwh(total["energy_facility_kwh"]["value"]), "at the facility"),
        ("cost", format_usd(total["cost_usd"]["value"]), "GPU time"),
        ("carbon", format_grams(total["carbon_gco2e"]["value"]), "operational"),
    ]
    return cards_section(cards)


def _groups_table(report: dict[str, Any]) -> str:
    head = (
        f"<th scope=col>{escape(report['by'])}</th><th scope=col>GPU-hours</th>"
        "<th scope=col>idle GPU-hours</th><th scope=col>idle share</th>"
        "<th scope=col>mean utilization</th><th scope=col>energy (facility)</th>"
        "<th scope=col>cost</th><th scope=col>carbon</th><th scope=col>jobs</th>"
        "<th scope=col>nodes</th>"
    )
    rows = []
    for g in [*report["groups"], report["total"]]:
        total = g is report["total"]
        label = g["label"] + (
            " (simulated)" if g["simulated"] and "(simulated)" not in g["label"] else ""
        )
        name = f"<strong>{escape(label)}</strong>" if total else escape(label)
        rows.append(
            f'<tr{" class=total" if total else ""} data-group="{escape(g["group"])}">'
            f"<th scope=row>{name}</th>"
            f'<td class="num">{format_number(g["gpu_hours"]["value"])}</td>'
            f'<td class="num">{format_number(g["idle_gpu_hours"]["value"])}</td>'
            f'<td class="num">{format_percent(g["idle_share"])}</td>'
            f'<td class="num">{format_percent(g["utilization_mean"]["value"])}</td>'
            f'<td class="num">{escape(format_kwh(g["energy_facility_kwh"]["value"]))}</td>'
            f'<td class="num">{escape(format_usd(g["cost_usd"]["value"]))}</td>'
            f'<td class="num">{escape(format_grams(g["carbon_gco2e"]["value"]))}</td>'
            f'<td class="num">{g["jobs"]}</td>'
            f"<td>{escape(', '.join(g['nodes']))}</td></tr>"
        )
    return (
        '<div class="scroll"><table class="grid" id="groups"><thead><tr>'
        + head
        + "</tr></thead><tbody>"
        + "".join(rows)
        + "</tbody></table></div>"
    )


def _kv(rows: Sequence[tuple[str, str]]) -> str:
    """A key/value table of plain text."""
    return kv_table((k, escape(v)) for k, v in rows)


def _price_figures(prices: dict[str, Any]) -> dict[str, Figure]:
    """Each GPU model's price of a GPU-hour as a figure for the run report's table layout."""
    out: dict[str, Figure] = {}
    for model, r in prices.items():
        if r is None:
            out[model] = figure(None, "USD/GPU-hour", "none", assumptions=["no price known"])
            continue
        out[model] = {
            "value": r["usd"],
            "unit": "USD/GPU-hour",
            "method": "catalog" if r["method"].startswith("catalog") else "given",
            "low": r["low"],
            "high": r["high"],
            "assumptions": [r["method"]],
            "source": r["source"],
        }
    return out


def build_fleet_html(report: dict[str, Any], charts: dict[str, Any]) -> str:
    """The whole page: key figures, GPU-hours bars, the groups' table, charts over time, how
    every figure was obtained, prices, the PromQL used and notes."""
    w = report["window"]
    by = report["by"]
    title = f"computewatch · fleet by {by}"
    when = f"{w['start'][:19].replace('T', ' ')} to {w['end'][:19].replace('T', ' ')} UTC"
    data = {"grids": charts["grids"], "charts": charts["charts"], "report": report}
    parts = [
        page_head(title, _STYLE),
        "<header>",
        f'<p class="eyebrow">computewatch fleet report · {escape(report["prometheus"])}</p>',
        f"<h1>Fleet by {escape(by)}</h1>",
        f'<p class="command">{escape(when)}</p>',
        "</header><main>",
        _cards(report["total"]),
    ]
    parts.append(notes_section(report["notes"]))
    parts += [
        f'<section id="section-bars"><h2>GPU-hours and idle share by {escape(by)}</h2>',
        gpu_hours_svg(report["groups"], title=f"GPU-hours held per {by}, idle part in red"),
        "</section>",
        f'<section id="section-groups"><h2>By {escape(by)}</h2>',
        _groups_table(report),
        "</section>",
    ]
    if charts["charts"]:
        parts.append('<section id="section-charts"><h2>Over time</h2>')
        parts.append(
            '<p class="hint">Drag across a chart to zoom (all charts follow); double-click to '
            "zoom out. Times are in your local time zone.</p>"
            '<noscript><p class="warn">The charts need JavaScript; the tables do not.</p>'
            '</noscript><div class="charts">'
        )
        for c in charts["charts"]:
            parts.append(chart_figure(c["id"], c["title"], c["subtitle"]))
        parts.append("</div></section>")
    carbon = report["carbon"]
    inten, pue = carbon["intensity"], carbon["pue"]
    parts.append('<section id="section-methods"><h2>How the figures were obtained</h2>')
    parts.append(_kv(list(report["methods"].items())))
    parts.append("</section>")
    parts.append(accounting_section("prices", _price_figures(report["prices"])))
    parts.append(
        '<section id="section-carbon"><h2>Carbon context</h2>'
        + _kv(
            [
                (
                    "grid intensity",
                    f"{inten['g_per_kwh']:g} gCO2e/kWh, {inten['name']} ({inten['region']}, "
                    f"found by {inten['how']}), ±{inten['relative_uncertainty']:.0%}",
                ),
                ("intensity source", inten["source"]),
                ("PUE", f"{pue['value']:g} (range {pue['low']:g}–{pue['high']:g})"),
                ("PUE source", pue["source"]),
            ]
        )
        + "</section>"
    )
    gpus = report["fleet"]["gpus"]
    if gpus:
        parts.append(
            '<section id="section-gpus"><h2>GPUs reporting</h2>'
            + _kv([(f"{g['node']}", f"{g['count']} × {g['gpu_model']}") for g in gpus])
            + "</section>"
        )
    parts.append(
        '<section id="section-queries"><h2>PromQL</h2><ul>'
        + "".join(f"<li><code>{escape(q)}</code></li>" for q in report["queries"])
        + "</ul></section>"
    )
    parts += [
        "</main><footer>",
        f"<p>Made by computewatch {escape(__version__)} at {escape(iso(time.time()))} from "
        f"{escape(report['prometheus'])}. Charts drawn with uPlot {UPLOT_VERSION} (MIT licence, "
        "© Leon Sorokin), included in this file.</p></footer>",
        page_end(data),
    ]
    return "\n".join(parts) + "\n"


def write_fleet_html(
    report: dict[str, Any], charts: dict[str, Any], path: str | os.PathLike[str]
) -> Path:
    """Build the page, then write it to ``path`` (a failed write leaves no half page).
    Raises ``OSError`` when it cannot be written."""
    return write_page(build_fleet_html(report, charts), path)
