"""The background logger between a run and its trackers.

The producer (the sampler's thread for ``computewatch run``, the store feed for ``track()``)
hands each tick to :meth:`TrackerLogger.tick`: one append to a bounded deque, never a wait.
When the trackers fall behind, the oldest ticks are dropped and counted (a tracker that hangs
costs memory up to the bound, nothing else). One thread turns ticks into points
(:class:`~computewatch.trackers.naming.PointMaker`) and hands them to each backend; a backend
that raises is disabled with one warning line, and the others and the job go on.
"""

from __future__ import annotations

import sys
import threading
from collections import deque
from collections.abc import Callable, Sequence

from computewatch.analysis.summary_types import RunSummary
from computewatch.readings import Reading
from computewatch.records import StepRecord
from computewatch.trackers.base import FinalRecord, MetricPoint, TrackerBackend, TrackerRun
from computewatch.trackers.final import final_record
from computewatch.trackers.naming import PointMaker

__all__ = ["DEFAULT_QUEUE", "FINISH_TIMEOUT", "TrackerLogger"]

DEFAULT_QUEUE = 4096
"""Ticks held for slow trackers before the oldest are dropped (about an hour at 1 s)."""
FINISH_TIMEOUT = 15.0
"""How long the end of a run waits for the trackers to take the last points and the accounting;
past it the thread is left behind (a daemon: it never holds the process)."""

_Tick = tuple[int, float, float, Sequence[Reading], Sequence[StepRecord]]


def _stderr_line(message: str) -> None:
    try:
        print(f"computewatch: warning: {message}", file=sys.stderr, flush=True)
    except Exception:  # a closed or broken stderr: nowhere left to say it
        pass


class TrackerLogger:
    """Ticks in on any thread, tracker calls on one thread of its own."""

    def __init__(
        self,
        backends: Sequence[TrackerBackend],
        run: TrackerRun,
        *,
        maker: PointMaker | None = None,
        maxlen: int = DEFAULT_QUEUE,
        flush_seconds: float = 1.0,
        warn: Callable[[str], None] = _stderr_line,
    ) -> None:
        self.backends = list(backends)
        self.run = run
        self.maker = maker or PointMaker()
        self.maxlen = maxlen
        self.flush_seconds = flush_seconds
        self.dropped = 0
        """Ticks dropped because the trackers fell behind."""
        self.logged = 0
        """Points handed to the backends."""
        self.disabled: dict[str, str] = {}
        """Backend name → why it was disabled."""
        self.warn = warn
        self._q: deque[_Tick | list[MetricPoint]] = deque(maxlen=maxlen)
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._final: FinalRecord | None = None
        self._done = threading.Event()
        self._thread = threading.Thread(
            target=self._loop, name="computewatch-trackers", daemon=True
        )

    # -- producer side (any thread, never blocks) -------------------------------------------
    def start(self) -> TrackerLogger:
        self._thread.start()
        return self

    def tick(
        self, seq: int, mono: float, wall: float, readings: Sequence[Reading],
        steps: Sequence[StepRecord] = (),
    ) -> None:  # fmt: skip
        """Queue one tick: an append (the oldest is dropped, and counted, when full)."""
        q = self._q
        if len(q) >= self.maxlen:
            self.dropped += 1
        q.append((seq, mono, wall, readings, steps))

    def points(self, points: list[MetricPoint]) -> None:
        """Queue points made elsewhere (as one item)."""
        if len(self._q) >= self.maxlen:
            self.dropped += 1
        self._q.append(points)

    def finish(
        self, summary: RunSummary | None, status: str, *, timeout: float | None = None
    ) -> bool:
        """Hand over the run's end and wait (at most ``timeout``, default
        :data:`FINISH_TIMEOUT`) for the trackers to take it and close. True when they did."""
        try:
            self._final = final_record(summary, status)
        except Exception as e:  # a summary of an older shape: the series are still logged
            self.warn(f"trackers: the run's accounting could not be read ({e})")
            self._final = FinalRecord({}, {"computewatch.status": status}, [], status)
        self._stop.set()
        self._wake.set()
        if self._thread.ident is None:
            return True
        done = self._done.wait(FINISH_TIMEOUT if timeout is None else timeout)
        if not done:
            self.warn("trackers did not finish in time; the run's end goes on without them")
        return done

    # -- the logger thread -------------------------------------------------------------------
    def _call(self, backend: TrackerBackend, what: str, fn: Callable[[], None]) -> None:
        if backend.name in self.disabled:
            return
        try:
            fn()
        except Exception as e:
            why = f"{type(e).__name__}: {e}".splitlines()[0][:300]
            self.disabled[backend.name] = why
            self.warn(f"tracker {backend.name} disabled ({what} failed: {why}); the run goes on")

    def _loop(self) -> None:
        try:
            for b in self.backends:
                self._call(b, "open", lambda b=b: b.open(self.run))  # type: ignore[misc]
            while True:
                self._wake.wait(self.flush_seconds)
                self._wake.clear()
                stopping = self._stop.is_set()
                self._drain()
                if stopping:
                    break
            final = self._final
            if self.dropped:
                self.warn(f"trackers fell behind: {self.dropped} tick(s) dropped (oldest first)")
            for b in self.backends:
                if final is not None:
                    self._call(b, "finish", lambda b=b: b.finish(final))  # type: ignore[misc]
                self._call(b, "close", b.close)
        finally:
            self._done.set()

    def _drain(self) -> None:
        batch: list[MetricPoint] = []
        q = self._q
        maker = self.maker
        while q:
            try:
                item = q.popleft()
            except IndexError:
                break
            if isinstance(item, list):
                batch.extend(item)
            else:
                seq, mono, wall, readings, steps = item
                try:
                    batch.extend(maker.points(seq, mono, wall, readings, steps))
                except Exception as e:  # a reading of an unexpected shape: skip the tick
                    self.warn(f"trackers: a tick could not be converted ({e})")
        if not batch:
            return
        for b in self.backends:
            self._call(b, "log", lambda b=b: b.log(batch))  # type: ignore[misc]
        self.logged += len(batch)
