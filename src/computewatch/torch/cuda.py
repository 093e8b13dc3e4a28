"""GPU time of a phase without stalling the GPU: CUDA events, resolved later.

``with gpu_phase(run, "forward"):`` records a pair of timing events on the current stream around
the block and returns at once; the host never waits for the GPU. Each pair is resolved once the
GPU has passed its end event (``Event.query()``, checked at the next phase boundary, by
:meth:`GpuTimer.resolve`, and at :meth:`GpuTimer.close`); the phase is then recorded with its
host interval and the GPU's own time for it (``start.elapsed_time(end)``, milliseconds in CUDA's
API). Pending pairs are bounded: a phase whose pair cannot be kept is recorded without GPU time
and counted in ``dropped``. Without CUDA, ``gpu_phase`` is the plain host-timed ``run.phase``.
"""

from __future__ import annotations

import atexit
import functools
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

from computewatch.tracking import Phase, Run, _mono

MAX_PENDING = 4096
"""Event pairs kept waiting for the GPU; beyond that a phase loses its GPU time (counted)."""
CLOSE_WAIT_SECONDS = 10.0
"""How long :meth:`GpuTimer.close` polls for the last pairs before giving up on them."""


class EventLike(Protocol):
    """What a timing event must do: ``torch.cuda.Event(enable_timing=True)`` does it."""

    def record(self) -> None: ...

    def query(self) -> bool: ...

    def elapsed_time(self, end_event: Any) -> float: ...


EventFactory = Callable[[], EventLike]


def _cuda_events() -> EventFactory | None:
    """``torch.cuda.Event`` with timing on, where CUDA is usable; else None."""
    try:  # PyTorch is the user's (optional) dependency, loaded on use
        import torch
    except ImportError:
        return None
    try:
        if not torch.cuda.is_available():
            return None
    except Exception:  # a broken driver is "no CUDA", never an error in the user's job
        return None
    cuda_event = torch.cuda.Event

    def make() -> EventLike:
        event: EventLike = cuda_event(enable_timing=True)  # type: ignore[no-untyped-call]
        return event

    return make


class GpuTimer:
    """Event-timed phases of one run. ``events``: the event factory (default: CUDA's, when
    available); tests and other accelerators pass their own."""

    def __init__(
        self,
        run: Run,
        *,
        events: EventFactory | None = None,
        max_pending: int = MAX_PENDING,
    ) -> None:
        if max_pending < 1:
            raise ValueError(f"max_pending must be at least 1, not {max_pending}")
        self.run = run
        self._events = events if events is not None else _cuda_events()
        self._max_pending = max_pending
        self._pending: deque[tuple[str, float, float, EventLike, EventLike]] = deque()
        self._free: list[EventLike] = []  # resolved events, recorded again (creation costs)
        self._phases: dict[str, GpuPhase | Phase] = {}
        self._lock = threading.Lock()
        self.dropped = 0
        """Phases recorded without GPU time because too many pairs were pending."""
        self.resolved = 0
        self._closed = False
        if self._events is not None:
            atexit.register(self.close)

    @property
    def enabled(self) -> bool:
        """Whether phases are event-timed (False: plain host-timed phases)."""
        return self._events is not None and not self._closed

    @property
    def pending(self) -> int:
        """Event pairs still waiting for the GPU."""
        return len(self._pending)

    def phase(self, name: str) -> GpuPhase | Phase:
        """The phase ``name`` as a reusable context manager (and decorator, as ``run.phase``)."""
        ph = self._phases.get(name)
        if ph is None:
            ph = GpuPhase(self, name) if self._events is not None else self.run.phase(name)
            self._phases[name] = ph
        return ph

    def begin(self) -> tuple[float, EventLike | None]:
        """Open an interval now: its host time and its start event (None without events)."""
        if self._events is None or self._closed:
            return (_mono(), None)
        ev = self._free.pop() if self._free else self._events()
        ev.record()
        return (_mono(), ev)

    def end(self, name: str, opened: tuple[float, EventLike | None]) -> None:
        """Close an interval opened by :meth:`begin` as the phase ``name``. The GPU time is
        recorded once the GPU gets there; nothing here waits for it."""
        start, ev0 = opened
        if ev0 is None:
            self.run.record_phase(name, start, _mono())
            return
        assert self._events is not None
        ev1 = self._free.pop() if self._free else self._events()
        ev1.record()
        end = _mono()
        if self._pending:
            self.resolve()
        if len(self._pending) >= self._max_pending:
            self.dropped += 1
            self._free.append(ev0)
            self._free.append(ev1)
            self.run.record_phase(name, start, end)
            return
        self._pending.append((name, start, end, ev0, ev1))

    def resolve(self) -> int:
        """Record every pending phase whose end event the GPU has passed, oldest first; stops
        at the first one still pending (later ones on the same stream cannot be done)."""
        n = 0
        with self._lock:
            pending = self._pending
            record = self.run.record_phase
            while pending:
                name, start, end, ev0, ev1 = pending[0]
                if not ev1.query():
                    break
                pending.popleft()
                record(name, start, end, ev0.elapsed_time(ev1) / 1000.0)
                self._free.append(ev0)
                self._free.append(ev1)
                n += 1
        self.resolved += n
        return n

    def close(self, wait: float = CLOSE_WAIT_SECONDS) -> None:
        """Resolve what is pending, polling up to ``wait`` seconds for the GPU to finish (no
        synchronize); phases still pending then are recorded without GPU time."""
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self.close)
        deadline = _mono() + wait
        while self._pending:
            self.resolve()
            if not self._pending or _mono() >= deadline:
                break
            time.sleep(0.001)
        with self._lock:
            while self._pending:
                name, start, end, _, _ = self._pending.popleft()
                self.dropped += 1
                self.run.record_phase(name, start, end)

    def __enter__(self) -> GpuTimer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class GpuPhase:
    """A named event-timed phase: reusable, nestable, also a decorator (as ``run.phase``)."""

    __slots__ = ("_begin", "_end", "_name", "_open")

    def __init__(self, timer: GpuTimer, name: str) -> None:
        self._name = name
        self._begin = timer.begin
        self._end = timer.end
        self._open: list[tuple[float, EventLike | None]] = []

    def __enter__(self) -> GpuPhase:
        self._open.append(self._begin())
        return self

    def __exit__(self, *exc: object) -> None:
        if self._open:
            self._end(self._name, self._open.pop())

    def __call__(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with self:
                return fn(*args, **kwargs)

        return wrapper


_timers: weakref.WeakKeyDictionary[Run, GpuTimer] = weakref.WeakKeyDictionary()


def gpu_timer(run: Run) -> GpuTimer:
    """The run's shared :class:`GpuTimer` (created on first use, with CUDA events if CUDA is
    available)."""
    timer = _timers.get(run)
    if timer is None or timer._closed:
        timer = _timers[run] = GpuTimer(run)
    return timer


def gpu_phase(run: Run, name: str) -> GpuPhase | Phase:
    """``with gpu_phase(run, "forward"):`` the phase's host time and, with CUDA, its GPU time
    from events on the current stream, resolved later without a synchronize. Without CUDA:
    ``run.phase(name)``."""
    return gpu_timer(run).phase(name)
