"""Feeding the experiment trackers (computewatch.trackers) from a run.

``computewatch run --log-to X``: :class:`TrackerObserver` is one more observer of the sampler;
its ``on_tick`` is one append to the logger's bounded queue. ``track(log_to=...)``: the
sampler is another process, so :class:`StoreFeed` reads the run's new ticks and steps from the
store on a thread of the user's process (the tool's current run lives there: MLflow's active
run, ``wandb.run``) and hands them to the same logger.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from computewatch.analysis.summary_types import RunSummary
from computewatch.readings import Kind, Reading
from computewatch.records import StepRecord
from computewatch.sampling.observers import RunInfo, SamplerTick
from computewatch.sampling.repro import ENV_RUN_DB
from computewatch.store import Store, StoreError
from computewatch.trackers import TrackerBackend, TrackerLogger, TrackerRun
from computewatch.trackers.backlog import backlog_path
from computewatch.trackers.naming import PointMaker, catalog_peak, gpu_index_of

__all__ = ["ENV_RUN_DB", "StoreFeed", "TrackerObserver", "point_maker"]


def point_maker(facts: Mapping[str, Any], peak_flops: float | None = None) -> PointMaker:
    """A :class:`PointMaker` for a run on the host ``facts`` describe."""
    cores = facts.get("allowed_cores")
    try:
        peak = peak_flops or catalog_peak(facts)
    except (OSError, ValueError):  # a catalog that cannot be read: no live MFU
        peak = None
    return PointMaker(
        allowed_cores=float(cores) if isinstance(cores, int | float) and cores > 0 else 1.0,
        gpu_index=gpu_index_of(facts),
        peak_flops=peak,
    )


class TrackerObserver:
    """The trackers as an observer of ``computewatch run``'s sampler."""

    def __init__(self, backends: Sequence[TrackerBackend], *, db_path: Path | None = None) -> None:
        self.backends = list(backends)
        self.db_path = db_path
        """The run's store: what a tracker does not receive is kept beside it."""
        self.logger: TrackerLogger | None = None

    def start(self, run: RunInfo) -> None:
        keep = None if self.db_path is None else backlog_path(self.db_path, run.run_id)
        self.logger = TrackerLogger(
            self.backends,
            TrackerRun(run.run_id, run.name, dict(run.tags), started=run.started_at),
            maker=point_maker(run.facts),
            keep_path=keep,
        ).start()

    def on_tick(self, tick: SamplerTick) -> None:
        if self.logger is not None:
            self.logger.tick(tick.seq, tick.mono, tick.wall, tick.readings, tick.steps)

    def finish(self, status: str, summary: RunSummary | None) -> None:
        if self.logger is not None:
            self.logger.finish(summary, status)


class StoreFeed:
    """Reads a running run's new ticks and steps from the store every ``interval`` seconds
    (a read-only connection of its own, on its own thread) into a :class:`TrackerLogger`."""

    def __init__(
        self,
        db_path: Path,
        run_id: str,
        logger: TrackerLogger,
        *,
        interval: float = 1.0,
        peak_flops: float | None = None,
    ) -> None:
        self.db_path = db_path
        self.run_id = run_id
        self.logger = logger
        self.interval = interval
        self.peak_flops = peak_flops
        self._stop = threading.Event()
        self._seq = -1
        self._step_rowid = 0
        self._pending: list[tuple[float, StepRecord]] = []
        self._series: dict[int, tuple[str, tuple[tuple[str, str], ...], Kind]] = {}
        self._thread = threading.Thread(target=self._loop, name="computewatch-feed", daemon=True)

    def start(self) -> StoreFeed:
        self._thread.start()
        return self

    def stop(self, timeout: float | None = None) -> None:
        """Read what is left once more (the sampler has stored the run by now) and stop,
        within the trackers' deadline (it starts now) unless ``timeout`` is given."""
        self.logger.begin_end()
        self._stop.set()
        self._thread.join(self.logger.remaining() if timeout is None else timeout)

    def _loop(self) -> None:
        store: Store | None = None
        key: int | None = None
        try:
            while True:
                stopping = self._stop.wait(self.interval)
                try:
                    if store is None:
                        store = Store.open_readonly(self.db_path)
                    if key is None:
                        row = store.find_run(self.run_id)
                        key = row.key
                        self.logger.maker = point_maker(row.host, self.peak_flops)
                    self._read(store, key, stopping)
                except (StoreError, OSError) as e:  # not created yet, or locked: next time
                    if stopping:
                        self.logger.warn(f"trackers: the run's last data not read ({e})")
                except Exception as e:  # sqlite3.Error and the like: the job goes on
                    self.logger.warn(f"trackers: reading the run failed ({type(e).__name__}: {e})")
                if stopping:
                    return
        finally:
            if store is not None:
                store.close()

    def _read(self, store: Store, key: int, final: bool) -> None:
        conn = store.conn  # incremental reads by tick and row: no Store method reads "since"
        for rowid, pid, mono, wall, samples, tokens, flops in conn.execute(
            "SELECT rowid, pid, mono, wall, samples, tokens, flops FROM steps "
            "WHERE run_key=? AND rowid>? ORDER BY rowid",
            (key, self._step_rowid),
        ):
            self._step_rowid = max(self._step_rowid, rowid)
            self._pending.append((wall, StepRecord(pid, mono, samples, tokens, flops)))
        ticks = conn.execute(
            "SELECT seq, mono, wall FROM ticks WHERE run_key=? AND seq>? ORDER BY seq",
            (key, self._seq),
        ).fetchall()
        if not ticks:
            return
        last = ticks[-1][0]
        for s in store.series(key):
            if s.idx not in self._series:
                self._series[s.idx] = (s.name, tuple(sorted(s.labels.items())), s.kind)
        by_seq: dict[int, list[Reading]] = {}
        for seq, idx, value in conn.execute(
            "SELECT seq, series, value FROM samples WHERE run_key=? AND seq>? AND seq<=? "
            "ORDER BY seq",
            (key, self._seq, last),
        ):
            name, labels, kind = self._series.get(idx, ("", (), Kind.GAUGE))
            by_seq.setdefault(seq, []).append(Reading(name, labels, value, kind))
        self._pending.sort(key=lambda s: s[0])
        pending = self._pending
        i = 0
        for n, (seq, mono, wall) in enumerate(ticks):
            mine: list[StepRecord] = []
            # a step belongs to the first tick at or after it (steps stored after the last
            # tick wait for the next one; the run's last tick takes what is left)
            while i < len(pending) and (pending[i][0] <= wall or (final and n == len(ticks) - 1)):
                mine.append(pending[i][1])
                i += 1
            self.logger.tick(seq, mono, wall, by_seq.get(seq, []), mine)
        del pending[:i]
        self._seq = last
