"""What the framework callbacks share: finding or starting the run they record into."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from computewatch.tracking import Run, current_run, track


class RunHolder:
    """The run a callback records into: the one it was given, else the current run (inside
    ``track()`` or ``computewatch run``), else one it starts itself and closes at the end."""

    def __init__(
        self,
        run: Run | None,
        name: str | None,
        tags: dict[str, str] | None,
        total_steps: int | None,
    ) -> None:
        self._given = run
        self._name = name
        self._tags = tags
        self._total_steps = total_steps
        self._owned: Run | None = None
        self.run: Run | None = run

    def acquire(
        self, default_name: str, total_steps: Callable[[], int | None] | None = None
    ) -> Run:
        """The run to record into, started (as ``track(name=...)``) when there is none;
        ``total_steps`` gives the planned steps for its forecast (asked only then)."""
        if self.run is not None and not getattr(self.run, "_closed", False):
            return self.run
        run = self._given if self._given is not None else current_run()
        if run is None:
            run = track(
                name=self._name or default_name,
                tags=self._tags,
                total_steps=self._total_steps or (total_steps() if total_steps else None),
            ).start()
            self._owned = run
        self.run = run
        return run

    def release(self, status: str = "completed") -> None:
        """Close the run if this callback started it; a run it was given stays open."""
        owned, self._owned = self._owned, None
        self.run = self._given
        if owned is not None:
            owned.close(status)


def positive_int(value: Any) -> int | None:
    """``value`` as a positive int, or None (unknown or infinite step counts)."""
    try:
        n = int(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return n if n > 0 else None


def record_config(run: Any, values: Callable[[], Mapping[str, Any]]) -> None:
    """The framework's hyperparameters into the run's configuration (``Run.config``):
    ``values`` is called here, and anything it or the recording raises is dropped, so a
    framework object of an unexpected shape never stops the training."""
    try:
        got = values()
        if got:
            run.config(got)
    except Exception:  # the record is best-effort: training goes on
        pass
