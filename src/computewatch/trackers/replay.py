"""``computewatch push --trackers``: what the trackers did not receive during a run (kept by
:mod:`computewatch.trackers.backlog`), delivered now through the run's own
:class:`~computewatch.trackers.logger.TrackerLogger`, with the run's stored accounting."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from computewatch.analysis.summary_types import stored_summary
from computewatch.store import RunRow
from computewatch.trackers.backlog import BACKLOG_CAP, backend_for, backlog_path, read_backlog
from computewatch.trackers.base import TrackerError, TrackerRun
from computewatch.trackers.logger import TrackerLogger, finish_deadline

__all__ = ["PUSH_DEADLINE", "Delivery", "deliver_kept"]

PUSH_DEADLINE = 60.0
"""Seconds each tracker has to take a run's backlog at a push (or the trackers' deadline,
``$COMPUTEWATCH_TRACKERS_DEADLINE``, when longer)."""


@dataclass(frozen=True, slots=True)
class Delivery:
    """What one push did for one tracker of one run (``tracker`` empty: nothing was kept)."""

    run_id: str
    tracker: str
    delivered: bool
    """True when nothing is left for this tracker."""
    points: int = 0
    """Points the tracker took (MLflow skips those its run had already)."""
    accounting: bool = False
    """True when the run's accounting was delivered now."""
    left_points: int = 0
    left_accounting: bool = False
    why: str | None = None
    """Why it was not delivered (the tool's error, or the deadline)."""
    dropped: int = 0
    """Points dropped before they could be kept (beyond the backlog's cap)."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def line(self) -> str:
        """One line: what was delivered, or why not and what stays kept."""
        if not self.tracker:
            return f"{self.run_id}: nothing kept for the trackers"
        dropped = (
            f"; {self.dropped} point(s) had been dropped at the run (beyond the backlog's cap)"
            if self.dropped
            else ""
        )
        what = [f"{self.points} point(s)"]
        if self.accounting:
            what.append("the run's accounting")
        if self.delivered:
            return f"{self.run_id} {self.tracker}: delivered {' and '.join(what)}{dropped}"
        left = [f"{self.left_points} point(s)"] if self.left_points else []
        if self.left_accounting:
            left.append("the run's accounting")
        return (
            f"{self.run_id} {self.tracker}: not delivered ({self.why}); "
            f"{' and '.join(left) or 'nothing'} kept for the next `computewatch push --trackers`"
            f"{dropped}"
        )


def deliver_kept(
    db_path: Path, runs: Sequence[RunRow], *, deadline: float | None = None
) -> list[Delivery]:
    """Deliver each run's backlog, tracker by tracker; each entry is then rewritten with what
    is still not delivered, or removed. A run without a backlog gives one empty
    :class:`Delivery`."""
    wait = max(PUSH_DEADLINE, finish_deadline()) if deadline is None else deadline
    out: list[Delivery] = []
    for row in runs:
        path = backlog_path(db_path, row.id)
        entries = read_backlog(path)
        if not entries:
            out.append(Delivery(row.id, "", True))
            continue
        summary = stored_summary(row.summary) if row.summary is not None else None
        config = summary.get("config") if summary is not None else None
        run = TrackerRun(
            row.id,
            row.name,
            dict(row.tags),
            dict(config) if isinstance(config, dict) else {},
            started=row.started_at,
        )
        for name, entry in entries.items():
            try:
                backend = backend_for(name, entry.target)
            except TrackerError as e:
                out.append(Delivery(row.id, name, False, 0, False, len(entry.points),
                                    entry.final, str(e), entry.dropped))  # fmt: skip
                continue
            said: list[str] = []
            logger = TrackerLogger(
                [backend], run, deadline=wait, warn=said.append, keep_path=path,
                backlog_cap=BACKLOG_CAP,
            )  # fmt: skip
            logger.start()
            if entry.points:
                logger.points(list(entry.points))
            logger.finish(summary, row.status, final=entry.final)
            left = logger.kept.get(name)
            why = logger.disabled.get(name) or logger.gave_up.get(name)
            if why is None and logger.keep_failed is not None:
                why = f"the backlog could not be rewritten: {logger.keep_failed}"
            left_points = len(left.points) if left is not None else 0
            left_final = bool(left.final) if left is not None else False
            delivered = why is None and left_points == 0 and not left_final
            out.append(
                Delivery(
                    row.id,
                    name,
                    delivered,
                    logger.logged,
                    entry.final and not left_final,
                    left_points,
                    left_final,
                    why,
                    entry.dropped,
                )
            )
    return out
