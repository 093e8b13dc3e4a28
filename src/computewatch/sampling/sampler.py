"""The sampling engine: one tick reads every source once, batches, and writes to the store.

Runs in the supervisor (``computewatch run``) or in a sampler subprocess (``track()``), never in
the monitored interpreter. A failing source is reported once and skipped; after
``SOURCE_STRIKES`` failures in a row it is dropped for the rest of the run, with a note. A
failing store keeps the pending batch (bounded) and retries; the monitored command never waits.
Each batch the store accepted also feeds the run's aggregates (``analysis.aggregates``), so the
summary at the end of the run reads no samples back.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from computewatch.analysis.aggregates import RunAggregates
from computewatch.readings import Kind, Labels, Reading
from computewatch.records import PhaseRecord, StepRecord
from computewatch.sampling.channel import SpoolReader
from computewatch.sampling.live import GpuLine, LiveView, Snapshot
from computewatch.sampling.observers import RunObserver, SamplerTick
from computewatch.sources.base import Source
from computewatch.sources.process_tree import ProcessTreeSource
from computewatch.store import Store

SOURCE_STRIKES = 5
MAX_PENDING_ROWS = 2_000_000  # about 100 MB of tuples; beyond it the oldest rows are dropped
FLUSH_SECONDS = 1.0


class _Pending(msgspec.Struct):
    series: list[tuple[int, str, Labels, Kind]] = msgspec.field(default_factory=list)
    ticks: list[tuple[int, float, float]] = msgspec.field(default_factory=list)
    samples: list[tuple[int, int, int, float]] = msgspec.field(default_factory=list)
    steps: list[tuple[Any, ...]] = msgspec.field(default_factory=list)
    phases: list[tuple[int, str, float, float, float | None]] = msgspec.field(default_factory=list)
    requests: list[tuple[int, str, float, float, float | None, float | None, bool]] = msgspec.field(
        default_factory=list
    )
    processes: list[tuple[int, int, str, list[str], float]] = msgspec.field(default_factory=list)
    writers: list[tuple[int, float, dict[str, Any]]] = msgspec.field(default_factory=list)

    def size(self) -> int:
        return len(self.samples) + len(self.steps) + len(self.phases) + len(self.requests)


class Sampler:
    """Ticks at a fixed interval; everything it learns goes to the store in batches."""

    def __init__(
        self,
        store: Store,
        run_key: int,
        sources: Sequence[Source],
        *,
        interval: float,
        spool: SpoolReader | None = None,
        live: LiveView | None = None,
        allowed_cores: float = 1.0,
        note: Callable[[str], None] | None = None,
        flush_seconds: float = FLUSH_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.run_key = run_key
        self.sources = list(sources)
        self.interval = interval
        self.spool = spool
        self.live = live
        self.allowed_cores = allowed_cores
        self.flush_seconds = max(flush_seconds, 0.0)
        self.notes: list[str] = []
        self._note_cb = note
        self._ids: dict[tuple[str, Labels], int] = {}
        self._pending = _Pending()
        self._seq = 0
        self._strikes: dict[str, int] = {}
        self._reported: set[str] = set()
        self._store_failing = False
        self.last_store_error: str | None = None
        self._give_up: Callable[[], bool] | None = None  # while looping: the command has ended
        self._clock = clock  # the monotonic clock that stamps ticks (a fake one in tests)
        self._last_flush = clock()
        self._mono0 = clock()
        self._wall0 = time.time()
        self._prev: dict[str, float] = {}
        self._prev_mono: float | None = None
        self._steps_total = 0
        self._step_times: deque[float] = deque(maxlen=4096)
        self._step_pids: set[int] = set()
        self.last_tick_wall: float | None = None
        self.stopped_at: float | None = None
        self.tick_cpu_seconds = 0.0
        self.on_writer: Callable[[dict[str, Any]], None] | None = None
        self.total_steps: int | None = None
        """The run's planned steps (``--total-steps`` or ``track(total_steps=)``), for an ETA."""
        self.gpu_names: dict[str, tuple[int | str, str, bool]] = {}
        """GPU uuid → (index, name, simulated), for the live view."""
        self._notes_seen: dict[str, int] = {}
        self.observers: list[RunObserver] = []
        """Called after each tick with its readings and steps (``sampling.observers``)."""
        self.aggregates: RunAggregates | None = RunAggregates()
        """The summary's figures over what the store accepted; None after an internal error
        (the summary is then rebuilt from the stored samples)."""

    # -- notes ------------------------------------------------------------------------------
    def note(self, message: str, *, once_key: str | None = None, show: bool = True) -> None:
        """Record a warning for the summary and, with ``show``, show it once now."""
        key = once_key or message
        if key in self._reported:
            return
        self._reported.add(key)
        self.notes.append(message)
        if show and self._note_cb is not None:
            self._note_cb(message)

    # -- ticking ----------------------------------------------------------------------------
    def tick(self, *, flush: bool = True) -> None:
        """Read every source once and stamp the tick with monotonic and wall-clock time; with
        ``flush``, write the batch when :attr:`flush_seconds` have passed since the last."""
        c0 = time.thread_time()
        mono = self._clock()
        wall = self._wall0 + (mono - self._mono0)
        seq = self._seq
        self._seq += 1
        pend = self._pending
        pend.ticks.append((seq, mono, wall))
        rows = pend.samples
        rk = self.run_key
        ids = self._ids
        latest: dict[str, float] = {}
        gpu_latest: dict[str, dict[str, float]] = {}
        figures = self.live is not None and getattr(self.live, "shows_figures", True)
        observed: list[Reading] | None = [] if self.observers else None
        for src in list(self.sources):
            try:
                readings = src.read()
            except Exception as e:  # a source's failure is reported, never raised
                self._source_failed(src, e)
                continue
            self._strikes.pop(src.name, None)
            if observed is not None:
                observed.extend(readings)
            for r in readings:
                key = (r.name, r.labels)
                sid = ids.get(key)
                if sid is None:
                    sid = len(ids)
                    ids[key] = sid
                    pend.series.append((sid, r.name, r.labels, r.kind))
                rows.append((rk, seq, sid, r.value))
            if figures:  # only for a live view that shows them (not --quiet, not track())
                for r in readings:
                    if not r.labels:
                        latest[r.name] = r.value
                    elif r.name in _GPU_LIVE:
                        gpu = dict(r.labels).get("gpu", "")
                        gpu_latest.setdefault(gpu, {})[r.name] = r.value
                    else:
                        _aggregate(latest, r)
            notes = getattr(src, "notes", None)
            if notes:
                seen = self._notes_seen.get(src.name, 0)
                for message in notes[seen:]:
                    self.note(message)
                self._notes_seen[src.name] = len(notes)
            if isinstance(src, ProcessTreeSource) and src.new_processes:
                for p in src.new_processes:
                    pend.processes.append((p.pid, p.ppid, p.name, p.cmdline, wall))
                src.new_processes.clear()
        step_events: list[StepRecord] = []
        if self.spool is not None:
            for ev in self.spool.poll():
                if isinstance(ev, StepRecord):
                    pend.steps.append(
                        (
                            ev.pid,
                            ev.mono,
                            self._wall0 + (ev.mono - self._mono0),
                            ev.samples,
                            ev.tokens,
                            ev.flops,
                        )
                    )
                    self._steps_total += 1
                    self._step_times.append(ev.mono)
                    self._step_pids.add(ev.pid)
                    if observed is not None:
                        step_events.append(ev)
                elif isinstance(ev, PhaseRecord):
                    pend.phases.append((ev.pid, ev.name, ev.start, ev.end, ev.accel_seconds))
                else:
                    pend.requests.append(
                        (ev.pid, ev.name, ev.start, ev.end, ev.tokens_in, ev.tokens_out, ev.ok)
                    )
            for pid, meta in self.spool.new_metas():
                pend.writers.append((pid, float(meta.get("started_mono", mono)), meta))
                if meta.get("total_steps") and not self.total_steps:
                    self.total_steps = int(meta["total_steps"])
                if self.on_writer is not None:
                    self.on_writer(meta)
        self.last_tick_wall = wall
        if observed is not None:
            self._observe(SamplerTick(seq, mono, wall, observed, step_events))
        if figures:
            self._update_live(mono, latest, gpu_latest)
        if pend.size() > MAX_PENDING_ROWS:
            drop = pend.size() - MAX_PENDING_ROWS
            del pend.samples[:drop]
            self.note("the store is not accepting writes; the oldest pending samples were dropped")
        if flush and mono - self._last_flush >= self.flush_seconds:
            self.flush()
        self.tick_cpu_seconds += time.thread_time() - c0

    def _observe(self, tick: SamplerTick) -> None:
        for obs in list(self.observers):
            try:
                obs.on_tick(tick)
            except Exception as e:  # an observer's failure never stops sampling
                self.observers.remove(obs)
                self.note(f"{type(obs).__name__} stopped: {type(e).__name__}: {e}")

    def _source_failed(self, src: Source, e: Exception) -> None:
        n = self._strikes.get(src.name, 0) + 1
        self._strikes[src.name] = n
        self.note(f"source {src.name} failed: {type(e).__name__}: {e}", once_key=f"src:{src.name}")
        if n >= SOURCE_STRIKES:
            self.sources.remove(src)
            self.note(
                f"source {src.name} dropped after {n} failures in a row; its data stops at "
                f"{time.strftime('%H:%M:%S')}"
            )
            try:
                src.close()
            except Exception:
                pass

    def flush(self) -> bool:
        """Write the pending batch; on failure keep it for the next try. Returns success."""
        pend = self._pending
        self._last_flush = self._clock()
        if not (
            pend.samples
            or pend.ticks
            or pend.steps
            or pend.phases
            or pend.requests
            or pend.series
            or pend.processes
            or pend.writers
        ):
            return True
        try:
            self._write(self.store, self.run_key, pend.samples)
        except sqlite3.Error as e:
            self.last_store_error = str(e)
            if not self._store_failing:
                self.note(f"cannot write to the store ({e}); keeping samples in memory, retrying")
            self._store_failing = True
            return False
        if self._store_failing:
            self.note("the store accepts writes again")
            self._store_failing = False
        self._aggregate(pend)
        self._pending = _Pending()
        return True

    def write_pending_to(self, store: Store, run_key: int) -> None:
        """Write the batch the store has not accepted to another store (the spool), under that
        store's key of the run; raises what the store raises."""
        samples = [(run_key, seq, sid, v) for _, seq, sid, v in self._pending.samples]
        self._write(store, run_key, samples)

    def _write(
        self, store: Store, run_key: int, samples: list[tuple[int, int, int, float]]
    ) -> None:
        """The pending batch, with ``samples`` keyed for ``store``, in one write."""
        pend = self._pending
        store.write_batch(
            run_key,
            series=pend.series,
            ticks=pend.ticks,
            samples=samples,
            steps=pend.steps,
            phases=pend.phases,
            requests=pend.requests,
            processes=pend.processes,
            writers=pend.writers,
            heartbeat_at=time.time(),
            data_until=self.last_tick_wall,
            give_up=self._give_up,
        )
        self._pending = _Pending()

    def _aggregate(self, pend: _Pending) -> None:
        """Feed a stored batch to the aggregates; an error there costs only the fast summary."""
        if self.aggregates is None:
            return
        try:
            self.aggregates.add_batch(
                series=pend.series,
                ticks=pend.ticks,
                samples=pend.samples,
                steps=pend.steps,
                phases=len(pend.phases),
                requests=len(pend.requests),
                writers=pend.writers,
            )
        except Exception as e:
            self.aggregates = None
            self.note(
                f"the summary is computed from the stored samples ({type(e).__name__}: {e})",
                show=False,
            )

    def loop(self, stop: threading.Event) -> None:
        """Tick until ``stop`` is set. An unexpected error ends sampling (noted with the time
        at which data stops), never the caller."""
        next_at = time.monotonic()
        # A flush waiting for another process's lock stops waiting when the command ends: the
        # end of the run has a deadline of its own (sampling/lifecycle.py).
        self._give_up = stop.is_set
        try:
            while not stop.is_set():
                self.tick()
                next_at += self.interval
                delay = next_at - time.monotonic()
                if delay < 0:  # fell behind (suspended, overloaded): skip, do not burst
                    next_at = time.monotonic()
                    delay = 0.0
                stop.wait(delay)
        except Exception as e:
            self.stopped_at = time.time()
            self.note(
                f"the sampler stopped at {time.strftime('%H:%M:%S')} after an internal error "
                f"({type(e).__name__}: {e}); data stops there"
            )
        finally:
            self._give_up = None

    def final_tick(self) -> None:
        """One last reading after the command ended (exited children, last steps); written by
        the end of the run's own flush, within its deadline."""
        if self.stopped_at is not None:
            return
        try:
            self.tick(flush=False)
        except Exception as e:
            self.note(f"the last reading failed: {type(e).__name__}: {e}")

    def close(self) -> None:
        for src in self.sources:
            try:
                src.close()
            except Exception:
                pass
        if self.live is not None:
            self.live.close()

    # -- live view --------------------------------------------------------------------------
    def _update_live(
        self, mono: float, latest: dict[str, float], gpu_latest: dict[str, dict[str, float]]
    ) -> None:
        assert self.live is not None
        prev, prev_mono = self._prev, self._prev_mono
        self._prev, self._prev_mono = latest, mono

        def rate(name: str) -> float | None:
            if prev_mono is None or name not in latest or name not in prev:
                return None
            dt = mono - prev_mono
            return max(latest[name] - prev[name], 0.0) / dt if dt > 0 else None

        cpu_rate = rate("tree_cpu_seconds_total")
        recent = [t for t in self._step_times if t >= mono - 10.0]
        sps = None
        if len(recent) >= 2 and recent[-1] > recent[0]:
            sps = (len(recent) - 1) / (recent[-1] - recent[0])
        snap = Snapshot(
            elapsed_seconds=mono - self._mono0,
            cpu_ratio=None if cpu_rate is None else cpu_rate / self.allowed_cores,
            allowed_cores=self.allowed_cores,
            tree_rss_bytes=latest.get("tree_resident_memory_bytes"),
            host_memory_used_bytes=latest.get("host_memory_used_bytes"),
            host_memory_total_bytes=latest.get("host_memory_total_bytes"),
            disk_read_bytes_per_second=rate("host_disk_read_bytes_total"),
            disk_write_bytes_per_second=rate("host_disk_written_bytes_total"),
            net_recv_bytes_per_second=rate("host_network_receive_bytes_total"),
            net_sent_bytes_per_second=rate("host_network_transmit_bytes_total"),
            processes=_int_or_none(latest.get("tree_processes")),
            steps_total=self._steps_total or None,
            steps_per_second=sps,
            total_steps=self.total_steps,
            step_processes=max(len(self._step_pids), 1),
            gpus=tuple(
                GpuLine(
                    index=str(info[0]),
                    name=info[1],
                    utilization_ratio=g.get("gpu_utilization_ratio"),
                    memory_used_bytes=g.get("gpu_memory_used_bytes"),
                    memory_total_bytes=g.get("gpu_memory_total_bytes"),
                    power_watts=g.get("gpu_power_watts"),
                    simulated=info[2],
                )
                for uuid, g in gpu_latest.items()
                if (info := self.gpu_names.get(uuid, ("?", uuid[:12], False)))
            ),
        )
        try:
            self.live.update(snap)
        except Exception as e:
            self.note(f"live view disabled: {e}")
            self.live = None


_GPU_LIVE = frozenset(
    {
        "gpu_utilization_ratio",
        "gpu_memory_used_bytes",
        "gpu_memory_total_bytes",
        "gpu_power_watts",
    }
)
_SUMMED = frozenset(
    {
        "host_disk_read_bytes_total",
        "host_disk_written_bytes_total",
        "host_network_receive_bytes_total",
        "host_network_transmit_bytes_total",
    }
)


def _aggregate(latest: dict[str, float], r: Reading) -> None:
    """Sum the per-device series the live view shows as one figure (loopback excluded)."""
    if r.name in _SUMMED and ("interface", "lo") not in r.labels:
        latest[r.name] = latest.get(r.name, 0.0) + r.value


def _int_or_none(v: float | None) -> int | None:
    return None if v is None else int(v)
