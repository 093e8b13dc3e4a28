"""The background delivery between a run and its trackers.

The producer (the sampler's thread for ``computewatch run``, the store feed for ``track()``)
hands each tick to :meth:`TrackerLogger.tick`: one append to a bounded deque, never a wait.
Each tracker has a thread of its own (a tool that is slow to start or to answer delays no
other: Neptune's start, an MLflow server that does not answer); the first of them to look
turns the queued ticks into points (:class:`~computewatch.trackers.naming.PointMaker`) and
appends them to every tracker's own bounded queue. When the trackers fall behind, the oldest
ticks (or a tracker's oldest points) are dropped and counted; a tracker that raises is
disabled with one warning line, and the others and the job go on.

The run's end waits for the trackers to take the last points and the accounting until one
deadline (:data:`FINISH_DEADLINE` seconds, ``$COMPUTEWATCH_TRACKERS_DEADLINE``); a tracker not
done by then is given up with one line naming it, what it was doing and what was not
delivered. With ``keep_path`` (a run's, :func:`~computewatch.trackers.backlog.backlog_path`),
what a tracker did not receive (points of a disabled or given-up tracker, a slow one's oldest,
the accounting) is kept there for ``computewatch push --trackers``; without it, or when it
cannot be written, it is dropped and counted (the run itself is in the local store).
"""

from __future__ import annotations

import math
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path

from computewatch.analysis.summary_types import RunSummary
from computewatch.readings import Reading
from computewatch.records import StepRecord
from computewatch.trackers.backlog import BACKLOG_CAP, Kept, target_of, write_kept
from computewatch.trackers.base import (
    TRACKER_NAMES,
    FinalRecord,
    MetricPoint,
    TrackerBackend,
    TrackerRun,
)
from computewatch.trackers.final import final_record
from computewatch.trackers.naming import PointMaker

__all__ = [
    "DEFAULT_QUEUE",
    "ENV_DEADLINE",
    "FINISH_DEADLINE",
    "TrackerLogger",
    "finish_deadline",
]

DEFAULT_QUEUE = 4096
"""Batches (one per tick) held for a slow tracker before its oldest are dropped (about an hour
at 1 s)."""
FINISH_DEADLINE = 2.0
"""Seconds the run's end waits for the trackers (all of them together, each on its own thread)
to take the last points and the accounting; past it, a tracker not done is given up."""
ENV_DEADLINE = "COMPUTEWATCH_TRACKERS_DEADLINE"
"""Seconds instead of :data:`FINISH_DEADLINE` (``0`` gives the trackers no time at the end)."""


def finish_deadline() -> float:
    """:data:`ENV_DEADLINE` when set to a number of seconds (≥ 0), else
    :data:`FINISH_DEADLINE`."""
    raw = os.environ.get(ENV_DEADLINE, "").strip()
    try:
        value = float(raw) if raw else FINISH_DEADLINE
    except ValueError:
        return FINISH_DEADLINE
    return value if math.isfinite(value) and value >= 0 else FINISH_DEADLINE


_Tick = tuple[int, float, float, Sequence[Reading], Sequence[StepRecord]]


def _stderr_line(message: str) -> None:
    try:
        print(f"computewatch: warning: {message}", file=sys.stderr, flush=True)
    except Exception:  # a closed or broken stderr: nowhere left to say it
        pass


def _why(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}".splitlines()[0][:300]


class _Delivery:
    """One tracker's queue and thread: open, then batches as they come, then the end."""

    def __init__(self, backend: TrackerBackend, owner: TrackerLogger) -> None:
        self.backend = backend
        self.name = backend.name
        self.owner = owner
        self.q: deque[list[MetricPoint]] = deque(maxlen=owner.maxlen)
        self.dropped = 0
        """Points dropped because this tracker fell behind."""
        self.delivered = 0
        """Points this tracker took."""
        self.in_flight: list[MetricPoint] = []
        """The points of the call under way."""
        self.kept: deque[MetricPoint] = deque(maxlen=owner.backlog_cap)
        """Points not delivered, for ``push --trackers`` (when the logger keeps)."""
        self.kept_dropped = 0
        """Points dropped beyond the backlog's cap."""
        self.finished = False
        """True once the tracker took the run's accounting."""
        self.keeps = owner.keep_path is not None and self.name in TRACKER_NAMES
        """True when what it does not receive is kept (a tool ``push --trackers`` can make
        again: not a backend object of the user's own)."""
        self.stage = "start"
        """What the thread is doing: start, open, log, finish, close, done."""
        self.stage_since = time.monotonic()
        self.disabled: str | None = None
        self.abandoned = False
        self.wake = threading.Event()
        self.done = threading.Event()
        self.thread = threading.Thread(
            target=self._loop, name=f"computewatch-tracker-{self.name}", daemon=True
        )

    def put(self, points: list[MetricPoint]) -> None:
        if self.abandoned:
            return
        if self.disabled is not None:
            self.keep(points)
            return
        q = self.q
        if len(q) >= self.owner.maxlen:
            self.dropped += len(q[0])
            self.keep(q[0])
        q.append(points)  # taken every flush_seconds, in one call

    def keep(self, points: Sequence[MetricPoint]) -> None:
        """Points this tracker will not get now: kept for ``push --trackers`` (the oldest
        beyond the cap dropped and counted) when the logger keeps."""
        if not self.keeps or not points:
            return
        kept = self.kept
        over = len(kept) + len(points) - self.owner.backlog_cap
        if over > 0:
            self.kept_dropped += over
        kept.extend(points)

    def pending(self) -> int:
        """Points not delivered: queued and the call under way."""
        return sum(len(b) for b in list(self.q)) + len(self.in_flight)

    def keep_pending(self) -> int:
        """Keep what is queued and the call under way (its fate unknown: the tool may have
        some of it; the push skips those where the tool can say so). Returns the count."""
        batches = list(self.q)
        self.q.clear()
        lost = sum(len(b) for b in batches) + len(self.in_flight)
        self.keep(self.in_flight)
        for b in batches:
            self.keep(b)
        return lost

    def _call(self, stage: str, fn: Callable[[], None]) -> bool:
        if self.disabled is not None or self.abandoned:
            return False
        self.stage, self.stage_since = stage, time.monotonic()
        try:
            fn()
        except Exception as e:
            why = _why(e)
            if self.abandoned:  # already said at the deadline
                return False
            self.disabled = why
            self.owner.disabled[self.name] = why
            lost = self.keep_pending()
            if self.keeps:
                more = (
                    "; what it does not receive is kept for `computewatch push --trackers "
                    f"{self.owner.run.run_id}`"
                )
            else:
                more = f"; {lost} point(s) not delivered (dropped)" if lost else ""
            self.owner.warn(
                f"tracker {self.name} disabled ({stage} failed: {why}); the run goes on{more}"
            )
            return False
        return True

    def _loop(self) -> None:
        owner = self.owner
        try:
            self._call("open", lambda: self.backend.open(owner.run))
            while not self.abandoned:
                self.wake.wait(owner.flush_seconds)
                self.wake.clear()
                stopping = owner._stop.is_set()
                self._drain()
                if stopping and not self.q:
                    break
            final = owner._final
            if final is not None:
                self.finished = self._call("finish", lambda: self.backend.finish(final))
            self._call("close", self.backend.close)
            if self.dropped and not self.abandoned:
                fate = (
                    "kept for `computewatch push --trackers`"
                    if self.keeps
                    else "dropped (oldest first)"
                )
                owner.warn(f"tracker {self.name} fell behind: {self.dropped} point(s) {fate}")
        finally:
            self.stage = "done"
            self.done.set()

    def _drain(self) -> None:
        self.owner._convert()
        batch: list[MetricPoint] = []
        while self.q:
            try:
                batch.extend(self.q.popleft())
            except IndexError:
                break
        if self.disabled is not None:
            self.keep(batch)
            return
        if not batch:
            return
        self.in_flight = batch  # (converted by owner._convert before the drain)
        if self._call("log", lambda: self.backend.log(batch)):
            self.delivered += len(batch)
            self.owner.logged += len(batch)
        self.in_flight = []


class TrackerLogger:
    """Ticks in on any thread, each tracker's calls on a thread of its own."""

    def __init__(
        self,
        backends: Sequence[TrackerBackend],
        run: TrackerRun,
        *,
        maker: PointMaker | None = None,
        maxlen: int = DEFAULT_QUEUE,
        flush_seconds: float = 1.0,
        deadline: float | None = None,
        warn: Callable[[str], None] = _stderr_line,
        keep_path: Path | None = None,
        backlog_cap: int = BACKLOG_CAP,
    ) -> None:
        self.backends = list(backends)
        self.keep_path = keep_path
        """Where what a tracker did not receive is kept (None: dropped and counted)."""
        self.backlog_cap = backlog_cap
        self.kept: dict[str, Kept] = {}
        """Tracker name → what was kept for it at the end (:meth:`finish`)."""
        self.keep_failed: str | None = None
        """Why the backlog could not be written, when it could not."""
        self.run = run
        self.maker = maker or PointMaker()
        self.maxlen = maxlen
        self.flush_seconds = flush_seconds
        self.deadline = finish_deadline() if deadline is None else deadline
        """Seconds the run's end waits for the trackers (:data:`FINISH_DEADLINE`)."""
        self.logged = 0
        """Points the backends took (all together)."""
        self.disabled: dict[str, str] = {}
        """Backend name → why it was disabled."""
        self.gave_up: dict[str, str] = {}
        """Backend name → why it was given up at the run's end."""
        self.warn = warn
        self._lock = threading.Lock()
        self._q: deque[_Tick | list[MetricPoint]] = deque(maxlen=maxlen)
        self._ticks_dropped = 0
        self._stop = threading.Event()
        self._final: FinalRecord | None = None
        self._end_by: float | None = None
        self._started = False
        self._deliveries = [_Delivery(b, self) for b in self.backends]

    @property
    def dropped(self) -> int:
        """Ticks (or batches of points) dropped before any tracker took them, and points a
        slow tracker dropped from its own queue."""
        return self._ticks_dropped + sum(d.dropped for d in self._deliveries)

    # -- producer side (any thread, never blocks on a tracker) -------------------------------
    def start(self) -> TrackerLogger:
        self._started = True
        for d in self._deliveries:
            d.thread.start()
        return self

    def tick(
        self, seq: int, mono: float, wall: float, readings: Sequence[Reading],
        steps: Sequence[StepRecord] = (),
    ) -> None:  # fmt: skip
        """Queue one tick: an append (the oldest is dropped, and counted, when full)."""
        q = self._q
        if len(q) >= self.maxlen:
            self._ticks_dropped += 1
        q.append((seq, mono, wall, readings, steps))

    def points(self, points: list[MetricPoint]) -> None:
        """Queue points made elsewhere (as one batch) for every tracker."""
        if len(self._q) >= self.maxlen:
            self._ticks_dropped += 1
        self._q.append(points)

    def _convert(self) -> None:
        """The queued ticks as points, into every tracker's queue (on a tracker's thread, or
        at the end on the caller's; one at a time: the maker keeps the previous counters)."""
        with self._lock:
            q = self._q
            while q:
                try:
                    item = q.popleft()
                except IndexError:
                    break
                if isinstance(item, list):
                    batch = item
                else:
                    try:
                        batch = self.maker.points(*item)
                    except Exception as e:  # a reading of an unexpected shape: skip the tick
                        self.warn(f"trackers: a tick could not be converted ({e})")
                        continue
                if batch:
                    for d in self._deliveries:
                        d.put(batch)

    def begin_end(self) -> None:
        """The run has ended: the deadline starts now (once; :meth:`finish` starts it if
        nothing did before)."""
        if self._end_by is None:
            self._end_by = time.monotonic() + self.deadline

    def remaining(self) -> float:
        """Seconds left before the deadline (the deadline starts if it had not)."""
        self.begin_end()
        assert self._end_by is not None
        return max(0.0, self._end_by - time.monotonic())

    def finish(
        self,
        summary: RunSummary | None,
        status: str,
        *,
        timeout: float | None = None,
        final: bool = True,
    ) -> bool:
        """Hand over the run's end (``final``: its accounting too) and wait for the trackers to
        take it and close, until the deadline (``timeout`` seconds from now when given). True
        when every tracker did; each one given up is said in one line, with what was kept for
        ``computewatch push --trackers`` or dropped."""
        if final:
            try:
                self._final = final_record(summary, status)
            except Exception as e:  # a summary of an older shape: the series are still logged
                self.warn(f"trackers: the run's accounting could not be read ({e})")
                self._final = FinalRecord({}, {"computewatch.status": status}, [], status)
        if timeout is not None:
            self._end_by = time.monotonic() + timeout
        self.begin_end()
        self._convert()  # the last ticks, whatever the trackers' threads are doing
        self._stop.set()
        for d in self._deliveries:
            d.wake.set()
        if not self._started:
            return True
        ok = True
        given_up: list[tuple[_Delivery, str, int]] = []
        for d in self._deliveries:
            if not d.done.wait(self.remaining()):
                ok = False
                given_up.append(self._give_up(d))
        self._keep(final)
        for d, why, lost in given_up:
            what = [f"{lost} point(s)"] if lost else []
            if final and not d.finished:
                what.append("the run's accounting")
            said = " and ".join(what) or "nothing"
            self.warn(
                f"tracker {d.name} given up at the run's end after {self.deadline:g} s: {why}; "
                f"{said} not delivered ({self._fate(d)})"
            )
        for d in self._deliveries:
            if d.disabled is not None and d.keeps:
                if self.keep_failed is not None:
                    self.warn(
                        f"tracker {d.name}: {self._backlog_text(d, final)} could not be kept "
                        f"({self.keep_failed}): dropped (the run is in the local store)"
                    )
                elif d.kept_dropped:
                    self.warn(
                        f"tracker {d.name}: {d.kept_dropped} older point(s) beyond the "
                        f"backlog's cap of {self.backlog_cap:,} dropped"
                    )
        if self._ticks_dropped:
            self.warn(f"trackers fell behind: {self._ticks_dropped} tick(s) dropped (oldest first)")
        return ok

    def _backlog_text(self, d: _Delivery, final: bool) -> str:
        what = [f"{len(d.kept)} point(s)"] if d.kept else []
        if final and not d.finished:
            what.append("the run's accounting")
        return " and ".join(what) or "nothing"

    def _fate(self, d: _Delivery) -> str:
        if not d.keeps:
            return "dropped; the run is in the local store"
        if self.keep_failed is not None:
            return f"dropped: could not be kept ({self.keep_failed}); the run is in the local store"
        cap = (
            f"; {d.kept_dropped} older point(s) beyond the backlog's cap of "
            f"{self.backlog_cap:,} dropped"
            if d.kept_dropped
            else ""
        )
        return f"kept: `computewatch push --trackers {self.run.run_id}` delivers them{cap}"

    def _keep(self, final: bool) -> None:
        """Write what each tracker did not receive to :attr:`keep_path` (an entry with nothing
        left is removed)."""
        if self.keep_path is None:
            return
        entries = []
        for d in self._deliveries:
            if not d.keeps:
                continue
            entry = Kept(
                d.name,
                target_of(d.backend),
                list(d.kept),
                final and not d.finished,
                d.disabled or self.gave_up.get(d.name, ""),
                d.kept_dropped,
            )
            self.kept[d.name] = entry
            entries.append(entry)
        if not entries:
            return
        try:
            write_kept(self.keep_path, self.run.run_id, entries)
        except OSError as e:
            self.keep_failed = _why(e)

    def _give_up(self, d: _Delivery) -> tuple[_Delivery, str, int]:
        d.abandoned = True
        took = time.monotonic() - d.stage_since
        try:
            where = getattr(d.backend, "where", None)
        except Exception:  # a backend's own description failing: the line goes without it
            where = None
        at = f" ({where})" if isinstance(where, str) and where else ""
        why = f"{d.stage} still running after {took:.1f} s{at}"
        self.gave_up[d.name] = why
        lost = d.keep_pending()
        return d, why, lost
