"""The one interface every tracker backend implements, and the records that cross it.

A backend is opened once for a run (:meth:`TrackerBackend.open`), takes batches of metric
points from the logger's background thread (:meth:`TrackerBackend.log`), takes the run's
end-of-run record once (:meth:`TrackerBackend.finish`) and is closed. Backends import their
tool inside these methods: the tools are optional extras, and heavy (``import mlflow`` takes
seconds).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Protocol

from computewatch.config import TRACKERS
from computewatch.errors import UsageError

TRACKER_NAMES = TRACKERS
"""The tools ``--log-to``, ``track(log_to=...)`` and ``[log_to] trackers`` accept."""


class TrackerError(UsageError):
    """A tracker that cannot be used as asked: an unknown name, a tool not installed."""


@dataclass(frozen=True, slots=True)
class MetricPoint:
    """One value of one metric, in the canonical (MLflow-style) name: ``system/...`` for the
    system series, ``computewatch/...`` for the run's own figures. ``step`` is the sampler's
    tick number, ``wall`` the Unix time of the tick."""

    name: str
    value: float
    step: int
    wall: float


@dataclass(frozen=True, slots=True)
class TrackerRun:
    """What a backend knows of the run it logs: ours, by id and name, and when it started
    (Unix time; a tracker run made later is dated from it)."""

    run_id: str
    name: str | None
    tags: dict[str, str] = field(default_factory=dict)
    config: dict[str, object] = field(default_factory=dict)
    started: float = field(default_factory=time.time)

    @property
    def display_name(self) -> str:
        """The name a new tracker run gets: ``computewatch-<name or id>``."""
        return f"computewatch-{self.name or self.run_id}"


@dataclass(frozen=True, slots=True)
class FinalRecord:
    """The run's end, as a tracker takes it: figures (``computewatch/energy_kwh`` ...), the
    strings that say how each was obtained (``computewatch.energy_method`` ...) and the
    diagnosis' top findings as lines."""

    metrics: dict[str, float]
    tags: dict[str, str]
    findings: list[str]
    status: str
    config: dict[str, object] = field(default_factory=dict)
    """The run's hyperparameters (``track(config=...)``, ``run.config()``), redacted."""
    git_commit: str | None = None
    source_name: str | None = None
    """The program run: the first ``.py`` of the command line, else its first word."""
    diff: str | None = None
    """``git diff HEAD`` as the reproducibility record keeps it (redacted, capped)."""
    started: float | None = None
    ended: float | None = None
    """The run's start and end, Unix time."""


class TrackerBackend(Protocol):
    """One tool. Every method runs on the logger's background thread, never on the training
    thread; one that raises disables the backend (one warning line) and the run goes on."""

    name: str

    def open(self, run: TrackerRun) -> None:
        """Attach to the tool's current run (the user's own, when one is active) or start one
        named after ours."""

    def log(self, points: list[MetricPoint]) -> None:
        """Log a batch of points (several ticks' worth when the tool was slow)."""

    def finish(self, record: FinalRecord) -> None:
        """Log the end-of-run accounting and diagnosis."""

    def close(self) -> None:
        """Flush, and end the tool's run if this backend started it (never the user's)."""


def check_names(names: list[str] | tuple[str, ...], where: str = "--log-to") -> list[str]:
    """``names`` checked against :data:`TRACKER_NAMES`: a :class:`TrackerError` naming the
    choices for an unknown one. Duplicates are dropped, order kept."""
    out: list[str] = []
    for n in names:
        key = n.strip().lower()
        if key not in TRACKER_NAMES:
            raise TrackerError(
                f"{where}: unknown tracker {n!r}; choose from {', '.join(TRACKER_NAMES)}"
            )
        if key not in out:
            out.append(key)
    return out
