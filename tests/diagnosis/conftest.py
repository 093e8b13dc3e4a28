"""Crafted store contents for the diagnosis rules: a real SQLite store with one run whose
ticks, series, steps, phases and writers a test lays out, then diagnoses."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from computewatch.analysis.summary import build_summary
from computewatch.diagnosis import Diagnosis, RunData, Thresholds, run_rules
from computewatch.readings import Kind
from computewatch.store import Store

WALL0 = 1_700_000_000.0  # the run's start, seconds since the epoch
MONO0 = 5_000.0  # the same moment on the monotonic clock
GPU = "GPU-11111111-2222-3333-4444-555555555555"


class Crafted:
    """One run being laid out: ``ticks`` first, then series, steps and phases by monotonic
    time (``MONO0`` is the run's start)."""

    gpu_uuid = GPU

    def __init__(self, store: Store, *, cores: float = 4.0) -> None:
        self.store = store
        self.cores = cores
        self.key = store.create_run(
            run_id="abcdef123456",
            name="crafted",
            tags={},
            command=["python", "train.py"],
            cwd="/tmp",
            mode="run",
            started_at=WALL0,
            interval_seconds=1.0,
            host={"allowed_cores": cores, "logical_cpus": int(cores)},
        )
        self.times: list[float] = []
        self._series = 0
        self.extra: dict[str, Any] = {}  # merged into the summary (cost, flops ...)

    def ticks(self, n: int, every: float = 1.0) -> list[float]:
        self.times = [MONO0 + (i + 1) * every for i in range(n)]
        self.store.write_batch(
            self.key, ticks=[(i, t, WALL0 + (t - MONO0)) for i, t in enumerate(self.times)]
        )
        return self.times

    def series(
        self,
        name: str,
        values: Sequence[float] | Callable[[float], float],
        *,
        counter: bool = False,
        **labels: str,
    ) -> None:
        """A series over the ticks: a value per tick or a function of seconds from start."""
        vals = [values(t - MONO0) for t in self.times] if callable(values) else list(values)
        idx = self._series
        self._series += 1
        self.store.write_batch(
            self.key,
            series=[
                (idx, name, tuple(sorted(labels.items())), Kind.COUNTER if counter else Kind.GAUGE)
            ],
            samples=[(self.key, i, idx, float(v)) for i, v in enumerate(vals)],
        )

    def counter(self, name: str, rate: Callable[[float], float], **labels: str) -> None:
        """A cumulative counter whose rate per second over each tick interval is ``rate(t)``."""
        total, vals, prev = 0.0, [], MONO0
        for t in self.times:
            total += rate(t - MONO0) * (t - prev)
            vals.append(total)
            prev = t
        self.series(name, vals, counter=True, **labels)

    def writer(self, pid: int, start: float = 0.0, **meta: Any) -> None:
        self.store.write_batch(self.key, writers=[(pid, MONO0 + start, meta)])

    def steps(self, pid: int, durations: Sequence[float], start: float = 0.0) -> list[float]:
        """Consecutive steps of ``pid`` from ``start`` seconds; returns their end times
        (seconds from the run's start)."""
        t = MONO0 + start
        rows, ends = [], []
        for d in durations:
            t += d
            rows.append((pid, t, WALL0 + (t - MONO0), 1.0, None))
            ends.append(t - MONO0)
        self.store.write_batch(self.key, steps=rows)
        return ends

    def phase(self, pid: int, name: str, start: float, end: float) -> None:
        self.store.write_batch(self.key, phases=[(pid, name, MONO0 + start, MONO0 + end, None)])

    def gpu(self, **fields: Any) -> None:
        """Declare the run's GPU (uuid ``GPU``) in its host facts, as a monitored run does."""
        run = self.store.run_by_key(self.key)
        host = dict(run.host)
        host["gpus"] = [{"uuid": GPU, "index": 0, "name": "NVIDIA H100 80GB HBM3", **fields}]
        host["gpus_used"] = [GPU]
        self.store.update_run(self.key, host=host)

    def finish(self, duration: float | None = None) -> None:
        end = duration if duration is not None else (self.times[-1] - MONO0 if self.times else 1)
        self.store.update_run(self.key, status="completed", exit_code=0, ended_at=WALL0 + end)

    def data(self) -> RunData:
        if self.store.run_by_key(self.key).ended_at is None:
            self.finish()
        run = self.store.run_by_key(self.key)
        summary = build_summary(self.store, run)
        summary.update(self.extra)
        return RunData.load(self.store, run, summary)

    def diagnose(self, **overrides: Any) -> Diagnosis:
        return run_rules(self.data(), Thresholds().with_overrides(overrides))

    def ids(self, **overrides: Any) -> list[str]:
        return [f.id for f in self.diagnose(**overrides).findings]

    def finding(self, rule: str, **overrides: Any) -> Any:
        found = [f for f in self.diagnose(**overrides).findings if f.id == rule]
        assert found, f"{rule} did not fire"
        return found[0]


@pytest.fixture
def crafted(tmp_path: Path) -> Iterator[Callable[..., Crafted]]:
    stores: list[Store] = []

    def make(cores: float = 4.0) -> Crafted:
        store = Store.open(tmp_path / f"cw{len(stores)}.db")
        stores.append(store)
        return Crafted(store, cores=cores)

    yield make
    for s in stores:
        s.close()
