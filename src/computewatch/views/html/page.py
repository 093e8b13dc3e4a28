"""What every report page shares (the run's, the fleet's): escaping, the inline assets, the
page's head and end, key/value and grid tables, chart figures, the notes, and the write."""

from __future__ import annotations

import html
import os
import re
from collections.abc import Iterable, Sequence
from importlib import resources
from pathlib import Path
from typing import Any, NotRequired, TypedDict

from computewatch import jsonout
from computewatch._version import __version__

UPLOT_VERSION = "1.6.32"


class ChartSeries(TypedDict):
    """One line of a chart: its bucket means, and each bucket's minimum and maximum where
    the series was downsampled (``report.js`` shades the band between them)."""

    label: str
    mean: list[float | None]
    lo: NotRequired[list[float | None]]
    hi: NotRequired[list[float | None]]


class ChartSpec(TypedDict):
    """A chart as ``report.js`` draws it: its x values are the page data's ``grids[grid]``."""

    id: str
    title: str
    subtitle: str
    unit: str  # ratio, bytes, bytes_per_second, watts, per_second, seconds
    grid: str
    per_bucket: int
    series: list[ChartSeries]


class PageRun(TypedDict):
    id: str
    name: str | None
    started_at: float


class ChartData(TypedDict):
    """The run report's data for its script: shared x grids (wall-clock seconds) by name and
    the charts; the run it belongs to once the page is built."""

    grids: dict[str, list[float]]
    charts: list[ChartSpec]
    run: NotRequired[PageRun]


_CLOSERS = re.compile(r"</(script|style)", re.IGNORECASE)


def escape(v: object) -> str:
    """``v`` as text safe in HTML content and in quoted attribute values."""
    return html.escape(str(v), quote=True)


def asset(name: str) -> str:
    """The text of one of the package's report assets (vendored uPlot, chart script, CSS)."""
    return resources.files("computewatch.views.html").joinpath("assets", name).read_text("utf-8")


def script_safe(text: str) -> str:
    """Code that cannot end the ``<script>``/``<style>`` element it sits in, nor put the HTML
    parser in its "escaped" script state: ``</script`` and ``<!--`` only ever occur inside
    string literals there, where ``<\\/`` and ``<\\!`` read the same."""
    return _CLOSERS.sub(r"<\\/\1", text).replace("<!--", "<\\!--")


def json_for_script(data: Any) -> str:
    """JSON to put inside ``<script type="application/json">``: every ``<``, ``>`` and ``&``
    written as a ``\\u`` escape (still the same JSON), so no ``</script>`` or ``<!--`` in the
    data can end the element or change how the HTML parser reads it."""
    text = jsonout.dumps(data, separators=(",", ":"), ensure_ascii=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def page_head(title: str, style: str = "") -> str:
    """A report page up to ``<body>``: doctype, meta, title, the inline style sheets (uPlot's,
    ours, then the page's own ``style``)."""
    own = [f"<style>{script_safe(style)}</style>"] if style else []
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f'<meta name="generator" content="computewatch {escape(__version__)}">',
            f"<title>{escape(title)}</title>",
            f"<style>{script_safe(asset('uPlot.min.css'))}</style>",
            f"<style>{script_safe(asset('report.css'))}</style>",
            *own,
            "</head><body>",
        ]
    )


def page_end(data: Any) -> str:
    """A report page from its scripts on: the charts' data as JSON, uPlot and our chart script
    (which draws every chart of the data), inline."""
    return "\n".join(
        [
            f'<script type="application/json" id="cw-data">{json_for_script(data)}</script>',
            f"<script>{script_safe(asset('uPlot.iife.min.js'))}</script>",
            f"<script>{script_safe(asset('report.js'))}</script>",
            "</body></html>",
        ]
    )


def kv_table(rows: Iterable[tuple[str, str]], cls: str = "kv") -> str:
    """A two-column table; labels are escaped here, values must already be HTML."""
    body = "".join(f"<tr><th scope=row>{escape(k)}</th><td>{v}</td></tr>" for k, v in rows)
    return f'<table class="{cls}"><tbody>{body}</tbody></table>'


def grid_table(head: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """A scrolling table with a header row; headers are escaped here, cells must be HTML."""
    return (
        '<div class="scroll"><table class="grid"><thead><tr>'
        + "".join(f"<th scope=col>{escape(h)}</th>" for h in head)
        + "</tr></thead><tbody>"
        + "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
        + "</tbody></table></div>"
    )


def chart_figure(cid: str, title: str, sub: str) -> str:
    """The place a chart of the page's data is drawn (by ``report.js``), with its caption."""
    return (
        f'<figure class="chart" id="chart-{escape(cid)}" data-chart="{escape(cid)}">'
        f"<figcaption><strong>{escape(title)}</strong> "
        f'<span class="sub">{escape(sub)}</span></figcaption><div class="plot"></div></figure>'
    )


def notes_section(notes: Sequence[str]) -> str:
    """The "Notes" section ("" when there are none)."""
    if not notes:
        return ""
    return (
        '<section class="notes" id="section-notes"><h2>Notes</h2><ul>'
        + "".join(f"<li>{escape(n)}</li>" for n in notes)
        + "</ul></section>"
    )


def write_page(page: str, path: str | os.PathLike[str]) -> Path:
    """Write a built page to ``path`` (``~`` expanded); a failed write leaves no half page.
    Raises ``OSError`` when it cannot be written."""
    out = Path(path).expanduser()
    try:
        with open(out, "w", encoding="utf-8") as f:
            f.write(page)
    except OSError:
        if out.is_file():
            out.unlink(missing_ok=True)
        raise
    return out
