"""The run summary and its profiles as text (``computewatch run`` at the end of a run,
``computewatch show``): the summary's rows (``views.summary_rows``) on a plain grid
(``views.grid``), so that printing them loads no table library."""

from __future__ import annotations

from typing import TextIO

from computewatch.analysis.common import iso
from computewatch.analysis.summary_types import RunSummary
from computewatch.profiling.artifacts import Artifact
from computewatch.views.grid import GridRow, print_grid
from computewatch.views.summary_rows import summary_rows


def print_summary(summary: RunSummary, out: TextIO) -> None:
    """The summary as a compact table: its rows that have a value, notes highlighted."""
    title = f"run {summary['id']}" + (f" · {summary['name']}" if summary.get("name") else "")
    rows = [
        GridRow(r.label, r.text, "note" if r.kind == "note" else "")
        for r in summary_rows(summary)
        if not r.missing
    ]
    print_grid(title, rows, out)


def print_artifacts(artifacts: list[Artifact], out: TextIO) -> None:
    """The run's profiles and traces (``computewatch profile``, ``run --profile-steps`` ...),
    one line per file, paths whole (folded when wider than the terminal); nothing when there
    are none."""
    if not artifacts:
        return
    rows = []
    for a in artifacts:
        when = (iso(a["created_at"]) or "")[:19].replace("T", " ")
        head = f"{a['tool']} ({a['trigger']}, {when})"
        for kind, path in sorted(a["files"].items()):
            rows.append(GridRow(head, f"{kind}: {path}"))
            head = ""
    print_grid("profiles", rows, out)
