"""A run's steps as the FLOP accounting and the forecast read them, kept by process and
updated a row at a time: the live uploader feeds it the steps stored since its last upload, so
a running run's counted FLOPs and forecast cost its new steps, not its history.

Per process it keeps the first step (time and FLOPs: its start includes warm-up and is left out
of the FLOP rate), the last step's time and the FLOP sums; across processes, the most recent
step durations (the forecast's window). Processes are expected to report their steps in time
order; a step earlier than its process's last marks the tally ``ordered = False`` (the caller
then reads the steps whole)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from computewatch.store import StepRow

RECENT = 200
"""Step durations kept for the forecast (its window: the mean of the last ``RECENT``)."""


# A dataclass, not a msgspec.Struct: five of its fields are written for every step, and
# CPython specialises attribute stores only for the plain __setattr__ a dataclass keeps.
@dataclass(slots=True)
class ProcessSteps:
    """One process's steps: the first one's time and FLOPs, the last one's time, how many,
    how many carried FLOPs, the FLOPs of all of them and of all but the first."""

    first_mono: float
    first_flops: float
    last_mono: float
    count: int = 1
    with_flops: int = 0
    flops: float = 0.0
    flops_after_first: float = 0.0


class StepTally:
    """The steps of one run, summed by process (:class:`ProcessSteps`), with the durations
    between consecutive steps of each process, the latest ``keep`` of them by time."""

    def __init__(self, keep: int = RECENT) -> None:
        self.by_pid: dict[int, ProcessSteps] = {}
        self.count = 0
        self.with_flops = 0
        self.ordered = True
        """False once a process reported a step earlier than its last one."""
        self._keep = keep
        self._durations: list[tuple[float, float]] = []  # (end, seconds), any order

    @classmethod
    def of(cls, steps: Iterable[StepRow], keep: int = RECENT) -> StepTally:
        """The tally of ``steps`` in any order (each process's sorted by time)."""
        t = cls(keep)
        for s in sorted(steps, key=lambda s: (s.pid, s.mono)):
            t.add(s.pid, s.mono, s.flops)
        return t

    def add(self, pid: int, mono: float, flops: float | None) -> None:
        """One more step of process ``pid``, at ``mono``, with its FLOPs if it reported them."""
        self.count += 1
        f = flops or 0.0
        if flops is not None:
            self.with_flops += 1
        p = self.by_pid.get(pid)
        if p is None:
            self.by_pid[pid] = ProcessSteps(mono, f, mono, 1, int(flops is not None), f)
            return
        if mono < p.last_mono:
            self.ordered = False
        self._durations.append((mono, mono - p.last_mono))
        if len(self._durations) > 2 * self._keep:
            self._durations.sort()
            del self._durations[: -self._keep]
        p.last_mono = mono
        p.count += 1
        p.with_flops += flops is not None
        p.flops += f
        p.flops_after_first += f

    def recent_durations(self, n: int) -> list[float]:
        """The durations of the latest ``n`` steps (each after its process's previous step),
        in time order."""
        self._durations.sort()
        return [d for _, d in self._durations[-n:]] if n > 0 else []
