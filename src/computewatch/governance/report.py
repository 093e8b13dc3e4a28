"""The notification pack of one model as a self-contained HTML page (no network, no script):
compute by method with its range, training time, energy, hardware, the runs included and a
timeline chart (inline SVG), from :func:`computewatch.governance.status.report_doc`."""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any

from computewatch.units import format_duration, format_flop, format_kwh

_CSS = """body{font:14px system-ui,sans-serif;margin:2em;max-width:70em;color:#222}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:.3em .6em;
text-align:left}th{background:#f3f3f3}.crossed{color:#b00;font-weight:bold}
.forecast{color:#c60;font-weight:bold}.note{color:#666;font-size:90%}"""


def _e(v: object) -> str:
    return html.escape(str(v), quote=True)


def _flop(fig: Mapping[str, float] | None) -> str:
    if not fig:
        return "n/a"
    return f"{format_flop(fig['value'])} ({format_flop(fig['low'])} – {format_flop(fig['high'])})"


def _timeline_svg(points: Sequence[Mapping[str, Any]], thresholds: Sequence[float]) -> str:
    if not points:
        return "<p class=note>No training run has ended yet.</p>"
    series = sorted({k for p in points for k in p["own_flop_high"]})
    top = max([max(p["own_flop_high"].values(), default=0.0) for p in points] + [1.0])
    w, h, pad = 640, 240, 40
    n = len(points)

    def xy(i: int, v: float) -> str:
        x = pad + (w - 2 * pad) * (i / max(1, n - 1))
        y = h - pad - (h - 2 * pad) * (v / top)
        return f"{x:.1f},{y:.1f}"

    colours = ["#1f77b4", "#d62728", "#2ca02c"]
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" role="img" '
             f'aria-label="cumulative training compute">']  # fmt: skip
    parts.append(f'<line x1="{pad}" y1="{h - pad}" x2="{w - pad}" y2="{h - pad}" stroke="#999"/>')
    for t in thresholds:
        if t <= top:
            y = h - pad - (h - 2 * pad) * (t / top)
            parts.append(f'<line x1="{pad}" y1="{y:.1f}" x2="{w - pad}" y2="{y:.1f}" '
                         f'stroke="#b00" stroke-dasharray="4"/><text x="{pad + 2}" '
                         f'y="{y - 3:.1f}" font-size="11">{_e(format_flop(t))}</text>')  # fmt: skip
    for c, k in enumerate(series):
        pts = " ".join(xy(i, p["own_flop_high"].get(k, 0.0)) for i, p in enumerate(points))
        parts.append(f'<polyline fill="none" stroke="{colours[c % 3]}" points="{pts}"/>')
        parts.append(f'<text x="{w - pad + 4}" y="{pad + 14 * c}" font-size="11" '
                     f'fill="{colours[c % 3]}">{_e(k)}</text>')  # fmt: skip
    parts.append(f'<text x="{pad}" y="{pad - 10}" font-size="11">up to {_e(format_flop(top))} '
                 "(upper bounds, by method)</text></svg>")  # fmt: skip
    return "".join(parts)


def render_report(doc: Mapping[str, Any]) -> str:
    tiers = doc["tiers"]
    rows_t = "".join(
        f"<tr><td>{_e(t['tier'])}</td><td class={_e(t['state'])}>{_e(t['state'])}</td>"
        f"<td>{_e(format_flop(t['threshold']))}</td><td>{_e(t['rule'])}</td>"
        f"<td>{_e(t['note'])}</td></tr>"
        for t in tiers
    )
    rows_m = "".join(
        f"<tr><td>{_e(k)}</td><td>{_e(_flop(doc['own_flop'].get(k)))}</td>"
        f"<td>{_e(_flop(doc['cumulative_flop'].get(k)))}</td></tr>"
        for k in sorted(set(doc["own_flop"]) | set(doc["cumulative_flop"]))
    )
    rows_r = "".join(
        f"<tr><td>{_e(r['run_id'])}</td><td>{_e(r['stage'])}</td><td>{_e(r['status'])}</td>"
        f"<td>{_e(r['started_at'])}</td><td>{_e(format_duration(r['duration_seconds']))}</td>"
        f"<td>{r['gpu_hours']:.2f}</td><td>{_e(format_kwh(r['energy_kwh']))}</td>"
        f"<td>{_e(', '.join(r['hardware']))}</td>"
        f"<td>{_e('; '.join(f'{k}: {_flop(v)}' for k, v in r['flop'].items()))}</td></tr>"
        for r in doc["runs_included"]
    )
    rows_o = "".join(
        f"<tr><td>{o['id']}</td><td>{_e(o['tier'])}</td><td>{_e(o['trigger'])}</td>"
        f"<td>{_e(o['opened_at'])}</td><td>{_e(o['deadline'] or 'n/a')}</td>"
        f"<td>{_e(o['state'])}</td><td>{_e(o['reference'] or '')}</td></tr>"
        for o in doc["obligations"]
    )
    base = doc["base_model"]
    base_line = "" if not base else (
        f"<p>Base model: {_e(base)}" + ("" if doc["base_known"] else
                                         " (its compute is unknown here)") + "</p>"
    )  # fmt: skip
    thresholds = [t["threshold"] for t in tiers]
    return f"""<!doctype html><html lang=en><head><meta charset=utf-8>
<title>Compute report: {_e(doc["model"])}</title><style>{_CSS}</style></head><body>
<h1>Training compute of {_e(doc["model"])}</h1>
<p class=note>Generated {_e(doc["generated_at"])} by computewatch. {_e(doc["privacy"])}.
A threshold is judged on the upper end of each figure's range.</p>
{base_line}
<p>{doc["runs"]} runs; {doc["gpu_hours"]:.2f} GPU-hours; training time
{_e(format_duration(doc["training_seconds"]))}; energy {_e(format_kwh(doc["energy_kwh"]))}
(facility, as each run's accounting measured or modeled it).</p>
<h2>Compute by method</h2>
<table><tr><th>method</th><th>own (this model's training runs)</th>
<th>cumulative (with its base)</th></tr>{rows_m}</table>
<p class=note>counted: the FLOPs the program reported per step; hardware: GPU time × peak ×
utilization (Epoch AI's method); architecture: 6 × parameters × training tokens.</p>
<h2>Thresholds</h2><table><tr><th>tier</th><th>state</th><th>threshold</th><th>rule</th>
<th>note</th></tr>{rows_t}</table>
<h2>Obligations</h2><table><tr><th>id</th><th>tier</th><th>trigger</th><th>opened</th>
<th>deadline</th><th>state</th><th>reference</th></tr>{rows_o}</table>
<h2>Timeline</h2>{_timeline_svg(doc["timeline"], thresholds)}
<h2>Runs included</h2><table><tr><th>run</th><th>stage</th><th>status</th><th>started</th>
<th>duration</th><th>GPU-hours</th><th>energy</th><th>hardware</th><th>FLOP by method</th></tr>
{rows_r}</table></body></html>
"""
