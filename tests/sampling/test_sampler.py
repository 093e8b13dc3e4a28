"""The sampler with small fake sources and a real store in ``tmp_path``."""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

import computewatch.sampling.sampler as sampler_mod
from computewatch.readings import Kind, Reading, counter, gauge, labels
from computewatch.sampling.channel import SpoolReader, StepWriter
from computewatch.sampling.sampler import SOURCE_STRIKES, Sampler
from computewatch.sources.base import Source
from computewatch.sources.process_tree import ProcessTreeSource
from computewatch.store import Store
from computewatch.views.live import Snapshot

NEVER = 1e9  # flush_seconds: flush only when the test says so


class FakeSource:
    """A source whose readings (or failures) are given by a function of the call number."""

    def __init__(self, name: str, fn: Callable[[int], Sequence[Reading]]) -> None:
        self.name = name
        self.fn = fn
        self.calls = 0
        self.closed = False

    def read(self) -> Sequence[Reading]:
        self.calls += 1
        return self.fn(self.calls)

    def close(self) -> None:
        self.closed = True


def failing(name: str, fail_on: Callable[[int], bool], value: float = 1.0) -> FakeSource:
    def fn(n: int) -> Sequence[Reading]:
        if fail_on(n):
            raise OSError(f"device {name} went away")
        return [gauge(f"{name}_value", value * n)]

    return FakeSource(name, fn)


def cpu_source(n: int) -> Sequence[Reading]:
    out = [
        counter("tree_cpu_seconds_total", 0.5 * n),
        gauge("tree_resident_memory_bytes", 1000.0 * n),
        gauge("process_threads", 4.0, labels(pid=42, name="python")),
    ]
    if n >= 3:  # a series that appears later gets the next id
        out.append(gauge("process_threads", 1.0, labels(pid=43, name="worker")))
    return out


@pytest.fixture
def run_key(store: Store) -> int:
    return store.create_run(
        run_id="abcdef012345",
        name=None,
        tags={},
        command=["x"],
        cwd=None,
        mode="run",
        started_at=1_700_000_000.0,
        interval_seconds=1.0,
        host={},
    )


def make(
    store: Store, run_key: int, sources: Sequence[Source], **kw: Any
) -> tuple[Sampler, list[str]]:
    shown: list[str] = []
    kw.setdefault("flush_seconds", NEVER)
    s = Sampler(store, run_key, sources, interval=0.01, note=shown.append, **kw)
    return s, shown


def stored(store: Store, run_key: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], list]:
    """{(name, labels): [(seq, value), ...]} of everything stored for the run."""
    series = {s.idx: (s.name, tuple(sorted(s.labels.items()))) for s in store.series(run_key)}
    out: dict[tuple[str, tuple[tuple[str, str], ...]], list] = {k: [] for k in series.values()}
    for seq, sid, value in store.iter_samples(run_key):
        out[series[sid]].append((seq, value))
    return out


def test_tick_stamps_and_stores_every_reading_after_flush(store: Store, run_key: int) -> None:
    src = FakeSource("cpu", cpu_source)
    s, shown = make(store, run_key, [src])
    for _ in range(4):
        s.tick()
    assert store.ticks(run_key) == []  # batched: nothing written before the flush
    assert s.flush() is True
    ticks = store.ticks(run_key)
    assert [t[0] for t in ticks] == [0, 1, 2, 3]
    monos = [t[1] for t in ticks]
    assert monos == sorted(monos)
    # wall = wall0 + (mono - mono0): the offset between the clocks is the same on every tick.
    offsets = [wall - mono for _, mono, wall in ticks]
    assert max(offsets) - min(offsets) == pytest.approx(0.0, abs=1e-6)
    assert s.last_tick_wall == ticks[-1][2]

    series = store.series(run_key)
    assert [(x.idx, x.name, x.labels, x.kind) for x in series] == [
        (0, "tree_cpu_seconds_total", {}, Kind.COUNTER),
        (1, "tree_resident_memory_bytes", {}, Kind.GAUGE),
        (2, "process_threads", {"name": "python", "pid": "42"}, Kind.GAUGE),
        (3, "process_threads", {"name": "worker", "pid": "43"}, Kind.GAUGE),
    ]
    assert store.points(run_key, 0) == [(0, 0.5), (1, 1.0), (2, 1.5), (3, 2.0)]
    assert store.points(run_key, 1) == [(0, 1000.0), (1, 2000.0), (2, 3000.0), (3, 4000.0)]
    assert store.points(run_key, 2) == [(0, 4.0), (1, 4.0), (2, 4.0), (3, 4.0)]
    assert store.points(run_key, 3) == [(2, 1.0), (3, 1.0)]
    run = store.run_by_key(run_key)
    assert run.data_until == ticks[-1][2]
    assert run.heartbeat_at is not None
    assert s.notes == [] and shown == []

    # Later ticks reuse the same series ids; an empty flush is a success that writes nothing.
    s.tick()
    assert s.flush() is True
    assert len(store.series(run_key)) == 4
    assert store.points(run_key, 0)[-1] == (4, 2.5)
    assert s.flush() is True
    assert len(store.ticks(run_key)) == 5


def test_flush_happens_during_tick_after_flush_seconds(store: Store, run_key: int) -> None:
    s, _ = make(store, run_key, [FakeSource("cpu", cpu_source)], flush_seconds=0.0)
    s.tick()
    assert [t[0] for t in store.ticks(run_key)] == [0]
    s.tick()
    assert [t[0] for t in store.ticks(run_key)] == [0, 1]


def test_a_failing_source_is_noted_once_and_others_still_stored(store: Store, run_key: int) -> None:
    bad = failing("gpu", lambda n: True)
    good = FakeSource("cpu", cpu_source)
    s, shown = make(store, run_key, [bad, good])
    for _ in range(3):
        s.tick()
    s.flush()
    assert len(s.notes) == 1
    assert s.notes == shown
    assert "source gpu failed" in s.notes[0] and "OSError: device gpu went away" in s.notes[0]
    assert bad in s.sources and not bad.closed
    assert len(store.points(run_key, 0)) == 3  # the good source's cpu counter, every tick


def test_a_source_failing_strikes_times_in_a_row_is_dropped(store: Store, run_key: int) -> None:
    bad = failing("gpu", lambda n: True)
    good = FakeSource("cpu", cpu_source)
    s, _ = make(store, run_key, [bad, good])
    for _ in range(SOURCE_STRIKES - 1):
        s.tick()
    assert bad in s.sources
    s.tick()
    assert bad not in s.sources
    assert bad.closed
    assert len(s.notes) == 2
    assert f"source gpu dropped after {SOURCE_STRIKES} failures in a row" in s.notes[1]
    for _ in range(3):
        s.tick()
    assert bad.calls == SOURCE_STRIKES  # not read again
    assert good.calls == SOURCE_STRIKES + 3
    assert len(s.notes) == 2


def test_a_source_that_recovers_is_not_dropped(store: Store, run_key: int) -> None:
    # Fails SOURCE_STRIKES - 1 times, works once, fails SOURCE_STRIKES - 1 times again.
    k = SOURCE_STRIKES - 1
    flaky = failing("gpu", lambda n: n != k + 1)
    s, _ = make(store, run_key, [flaky])
    for _ in range(2 * k + 1):
        s.tick()
    assert flaky in s.sources and not flaky.closed
    assert len(s.notes) == 1
    s.flush()
    assert [(x.name, store.points(run_key, x.idx)) for x in store.series(run_key)] == [
        ("gpu_value", [(k, float(k + 1))])
    ]


def test_a_failing_store_keeps_data_and_writes_it_later(
    store: Store, run_key: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = store.write_batch
    failures = {"left": 3}

    def flaky_write(*a: Any, **kw: Any) -> None:
        if failures["left"] > 0:
            failures["left"] -= 1
            raise sqlite3.OperationalError("database or disk is full")
        real(*a, **kw)

    monkeypatch.setattr(store, "write_batch", flaky_write)
    s, shown = make(store, run_key, [FakeSource("cpu", cpu_source)])
    for _ in range(3):
        s.tick()
        assert s.flush() is False
    assert store.ticks(run_key) == []
    assert len(s.notes) == 1
    assert "cannot write to the store (database or disk is full)" in s.notes[0]
    s.tick()
    assert s.flush() is True
    assert [t[0] for t in store.ticks(run_key)] == [0, 1, 2, 3]
    assert store.points(run_key, 0) == [(0, 0.5), (1, 1.0), (2, 1.5), (3, 2.0)]
    assert len(store.series(run_key)) == 4
    assert s.notes[1:] == ["the store accepts writes again"]
    assert shown == s.notes
    s.tick()
    assert s.flush() is True
    assert len(store.ticks(run_key)) == 5  # nothing written twice, nothing lost


def test_pending_rows_are_bounded_while_the_store_fails(
    store: Store, run_key: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = store.write_batch
    failing_store = {"on": True}

    def write(*a: Any, **kw: Any) -> None:
        if failing_store["on"]:
            raise sqlite3.OperationalError("disk I/O error")
        real(*a, **kw)

    monkeypatch.setattr(store, "write_batch", write)
    monkeypatch.setattr(sampler_mod, "MAX_PENDING_ROWS", 10)
    s, _ = make(store, run_key, [FakeSource("c", lambda n: [counter("c_total", n)] * 3)])
    for _ in range(8):  # 24 sample rows
        s.tick()
        s.flush()
    assert sum("oldest pending samples were dropped" in n for n in s.notes) == 1
    failing_store["on"] = False
    assert s.flush() is True
    # The newest samples are kept (the same series three times a tick: one row per tick).
    assert [seq for seq, _ in store.points(run_key, 0)] == [4, 5, 6, 7]
    assert len(store.ticks(run_key)) == 8


def test_loop_ticks_until_the_event_is_set(store: Store, run_key: int) -> None:
    stop = threading.Event()

    def fn(n: int) -> Sequence[Reading]:
        if n == 3:
            stop.set()
        return [gauge("g", n)]

    src = FakeSource("g", fn)
    s, _ = make(store, run_key, [src])
    s.loop(stop)
    assert src.calls == 3
    assert s.stopped_at is None
    assert s.notes == []
    s.loop(stop)  # already set: returns without ticking
    assert src.calls == 3
    s.final_tick()
    assert src.calls == 4
    s.flush()
    assert [t[0] for t in store.ticks(run_key)] == [0, 1, 2, 3]


def test_an_internal_error_ends_the_loop_with_a_note(
    store: Store, run_key: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    s, shown = make(store, run_key, [FakeSource("cpu", cpu_source)])

    def broken_tick() -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(s, "tick", broken_tick)
    s.loop(threading.Event())  # returns instead of raising or looping forever
    assert s.stopped_at is not None
    assert len(s.notes) == 1 and shown == s.notes
    assert "after an internal error (RuntimeError: boom); data stops there" in s.notes[0]
    s.final_tick()  # sampling already stopped: no further reading
    assert len(s.notes) == 1


def test_final_tick_failure_is_noted(
    store: Store, run_key: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    s, _ = make(store, run_key, [])

    def broken_tick(*, flush: bool = True) -> None:
        raise ValueError("late")

    monkeypatch.setattr(s, "tick", broken_tick)
    s.final_tick()
    assert s.notes == ["the last reading failed: ValueError: late"]


def test_final_tick_leaves_the_write_to_the_end_of_the_run(store: Store, run_key: int) -> None:
    """The last reading is written by the end of the run's own flush, within its deadline:
    the final tick itself never waits on the store, however long since the last flush."""
    src = FakeSource("cpu", cpu_source)
    s, _ = make(store, run_key, [src], flush_seconds=0.0)  # every tick would flush
    s.final_tick()
    assert store.sample_count(run_key) == 0
    assert s.flush()
    assert store.sample_count(run_key) > 0


class RaisingLive:
    def __init__(self) -> None:
        self.snaps: list[Snapshot] = []
        self.closed = False

    def update(self, snap: Snapshot) -> None:
        self.snaps.append(snap)
        if len(self.snaps) == 2:
            raise OSError("terminal gone")

    def note(self, message: str) -> None:
        pass

    def close(self) -> None:
        self.closed = True


def test_live_view_gets_snapshots_and_a_failing_one_is_disabled(store: Store, run_key: int) -> None:
    def host(n: int) -> Sequence[Reading]:
        return [
            counter("host_network_receive_bytes_total", 100.0 * n, labels(interface="eth0")),
            counter("host_network_receive_bytes_total", 1e9 * n, labels(interface="lo")),
            gauge("tree_processes", 3),
        ]

    live = RaisingLive()
    s, _ = make(store, run_key, [FakeSource("host", host)], live=live, allowed_cores=2.0)
    for _ in range(3):
        s.tick()
    assert len(live.snaps) == 2
    first, second = live.snaps
    assert first.cpu_ratio is None and first.net_recv_bytes_per_second is None
    assert first.processes == 3
    assert first.allowed_cores == 2.0
    assert second.net_recv_bytes_per_second is not None
    assert s.live is None
    assert s.notes == ["live view disabled: terminal gone"]


def test_spool_steps_and_writers_are_stored(store: Store, run_key: int, tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    started = 1000.0
    writer = StepWriter(spool, {"name": "train", "started_mono": started})
    try:
        for i in range(3):
            writer.append((started + 1 + i, 32.0, None if i else 4096.0))
        writer.flush()
        reader = SpoolReader(spool)
        seen: list[dict[str, Any]] = []
        s, _ = make(store, run_key, [], spool=reader)
        s.on_writer = seen.append
        s.tick()
        s.tick()  # nothing new: no duplicates
        assert s.flush() is True
    finally:
        writer.close()
    pid = os.getpid()
    steps = store.steps(run_key)
    assert [(x.pid, x.mono, x.samples, x.tokens) for x in steps] == [
        (pid, 1001.0, 32.0, 4096.0),
        (pid, 1002.0, 32.0, None),
        (pid, 1003.0, 32.0, None),
    ]
    # Step wall times use the sampler's clock offset.
    assert steps[0].wall == pytest.approx(s._wall0 + (1001.0 - s._mono0))
    assert store.writers(run_key) == {
        pid: (started, {"name": "train", "started_mono": started, "pid": pid})
    }
    assert seen == [{"name": "train", "started_mono": started, "pid": pid}]


def test_tree_source_processes_are_stored(store: Store, run_key: int) -> None:
    tree = ProcessTreeSource(os.getpid())
    s, _ = make(store, run_key, [tree])
    try:
        s.tick()
        s.tick()
        s.flush()
        assert tree.new_processes == []
    finally:
        s.close()
    procs = store.processes(run_key)
    mine = [p for p in procs if p["pid"] == os.getpid()]
    assert len(mine) == 1
    assert mine[0]["ppid"] == os.getppid()
    assert mine[0]["first_seen"] == store.ticks(run_key)[0][2]
    assert mine[0]["cmdline"]
    names = {x.name for x in store.series(run_key)}
    assert {"tree_cpu_seconds_total", "process_cpu_seconds_total"} <= names


def test_close_closes_sources_even_if_one_raises(store: Store, run_key: int) -> None:
    class Bad(FakeSource):
        def close(self) -> None:
            raise OSError("already closed")

    a, b = Bad("a", lambda n: []), FakeSource("b", lambda n: [])
    s, _ = make(store, run_key, [a, b])
    s.close()
    assert b.closed
