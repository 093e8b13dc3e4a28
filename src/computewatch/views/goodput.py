"""A training's goodput as text (``computewatch goodput``) and as an HTML section (the server's
governance and usage pages, a run's report). Reads the JSON form (``goodput.json``), so the
server's answer renders as a local one does."""

from __future__ import annotations

import html
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TextIO

from computewatch.goodput.json import BreakdownJson, GoodputJson
from computewatch.goodput.model import BADPUT
from computewatch.units import format_percent, format_seconds, format_usd

__all__ = ["goodput_html", "goodput_rows", "print_goodput"]


def _figures(b: BreakdownJson | Mapping[str, object]) -> str:
    seconds = b.get("seconds")
    parts = [format_seconds(float(seconds)) if isinstance(seconds, int | float) else "n/a"]
    frac = b.get("fraction")
    if isinstance(frac, int | float):
        parts.append(format_percent(frac, 1))
    gpu_h = b.get("gpu_hours")
    if isinstance(gpu_h, int | float) and gpu_h > 0:
        parts.append(f"{gpu_h:.3g} GPU-h")
    kwh = b.get("kwh")
    if isinstance(kwh, int | float) and kwh > 0:
        parts.append(f"{kwh:.3g} kWh")
    usd = b.get("usd")
    if isinstance(usd, int | float) and usd > 0:
        parts.append(format_usd(usd))
    return " · ".join(parts)


def _when(t: object) -> str:
    if not isinstance(t, int | float):
        return "n/a"
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S")


def goodput_rows(result: GoodputJson) -> list[tuple[str, str]]:
    """(label, text) rows: the training's goodput, each badput category, the checkpoint
    advice, then one row per run."""
    rows = [
        (
            "training",
            f"{result['key']}: {len(result['runs'])} run(s) over "
            f"{format_seconds(result['total_seconds'])}",
        ),
        ("goodput", _figures(result["goodput"])),
    ]
    for cat in BADPUT:
        b = result["badput"].get(cat)
        if b is not None:
            rows.append((cat, _figures(b)))
    ck = result["checkpoint"]
    if ck.get("interval_seconds") is not None:
        text = (
            f"every {format_seconds(ck['interval_seconds'] or 0.0)} (Young/Daly: checkpoint "
            f"{format_seconds(ck['checkpoint_seconds'] or 0.0)}, MTBF "
            f"{format_seconds(ck['mtbf_seconds'] or 0.0)} from {ck['failures']} failure(s))"
        )
        if ck.get("current_interval_seconds") is not None:
            text += f"; now every {format_seconds(ck['current_interval_seconds'] or 0.0)}"
        if ck.get("saving_seconds") is not None:
            text += f"; would save {format_seconds(ck['saving_seconds'] or 0.0)}"
        rows.append(("checkpoints", text))
    else:
        rows.append(("checkpoints", f"no interval advised: {ck.get('how')}"))
    for r in result["runs"]:
        steps = ""
        if r.get("last_step") is not None:
            start = r.get("start_step")
            steps = f" · steps {start if start is not None else 0}→{r['last_step']}"
            if r.get("redone_from_step") is not None:
                steps += f" (redone from {r['redone_from_step']})"
        rows.append(
            (
                f"run {r['run_id']}",
                f"{r['status']} · {_when(r['started_at'])} · goodput "
                f"{_figures(r['goodput'])}{steps} · "
                + ", ".join(
                    f"{c} {format_seconds(r['badput'][c]['seconds'])}"
                    for c in BADPUT
                    if c in r["badput"] and r["badput"][c]["seconds"] > 0
                ),
            )
        )
    for note in result.get("notes") or []:
        rows.append(("note", note))
    return rows


def print_goodput(result: GoodputJson, out: TextIO) -> None:
    """The rows, aligned."""
    rows = goodput_rows(result)
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        out.write(f"{k.ljust(width)}  {v}\n")


def goodput_html(result: GoodputJson | None, title: str = "Goodput") -> str:
    """An HTML section: the training's goodput and badput, and its runs; empty without runs."""
    if not result or not result.get("runs"):
        return ""
    e = html.escape
    head = goodput_rows(result)
    cut = 2 + len(BADPUT) + 1
    parts = [f'<section class="goodput"><h3>{e(title)}: {e(result["key"])}</h3><table>']
    parts += [f"<tr><th>{e(k)}</th><td>{e(v)}</td></tr>" for k, v in head[:cut]]
    parts.append("</table><details><summary>Runs</summary><table>")
    parts += [f"<tr><th>{e(k)}</th><td>{e(v)}</td></tr>" for k, v in head[cut:]]
    parts.append("</table></details></section>")
    return "".join(parts)
