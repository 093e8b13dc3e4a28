"""What the pages read beyond :mod:`computewatch.serverdb.queries`: the latest uploaded bucket
of a few series of many runs at once (the Now page's utilization and power), the command lines
of a few runs, and the series of several runs (a comparison), each in one query."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from computewatch.serverdb.models import Run
from computewatch.serverdb.queries import SeriesRow
from computewatch.serverdb.series import last_points, read_series

__all__ = ["Latest", "commands_of", "latest_values", "series_of"]


@dataclass(frozen=True, slots=True)
class Latest:
    """The mean of the last bucket of each series of one name of a run (one per label set)."""

    t: float
    values: tuple[float, ...]


def latest_values(
    session: Session, run_ids: Sequence[str], names: Iterable[str]
) -> dict[tuple[str, str], Latest]:
    """(run id, series name) → its series' last buckets, for ``run_ids`` (callers pass only
    runs the principal may see)."""
    if not run_ids:
        return {}
    found: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for run_id, points in last_points(session, run_ids, names).items():
        for (name, _labels), p in points.items():
            if len(p) == 4 and math.isfinite(p[2]):
                found.setdefault((run_id, name), []).append((p[0], p[2]))
    return {k: Latest(max(t for t, _ in v), tuple(x for _, x in v)) for k, v in found.items()}


def series_of(session: Session, run_ids: Sequence[str]) -> dict[str, list[SeriesRow]]:
    """The uploaded series of ``run_ids`` (callers pass only runs the principal may see)."""
    out: dict[str, list[SeriesRow]] = {r: [] for r in run_ids}
    if not run_ids:
        return out
    for run_id, series in read_series(session, run_ids).items():
        out[run_id] = [
            SeriesRow(x["name"], dict(x["labels"]), x["bucket_seconds"], x["points"])
            for x in series
        ]
    return out


def commands_of(session: Session, run_ids: Sequence[str]) -> dict[str, list[str]]:
    """The command lines of a few runs (not in a run row), as argument lists (callers
    pass only runs the principal may see)."""
    if not run_ids:
        return {}
    q = select(Run.id, Run.command).where(Run.id.in_(list(run_ids)))
    return {i: [str(a) for a in (c or [])] for i, c in session.execute(q)}
