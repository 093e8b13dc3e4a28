"""The SQLite store: opening and migrating, batched writes, finding runs, reconcile, retention."""

from __future__ import annotations

import os
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from computewatch.readings import Kind, labels
from computewatch.records import PhaseRecord
from computewatch.store import (
    COMPLETED,
    INTERRUPTED,
    RUNNING,
    SCHEMA_VERSION,
    SeriesRow,
    StepRow,
    Store,
    StoreError,
)
from computewatch.store.db import process_start_ticks
from computewatch.store.reserve import RESERVE_BYTES, make_reserve, reserve_path

T0 = 1_700_000_000.0


def new_run(store: Store, run_id: str, **kw: Any) -> int:
    args: dict[str, Any] = {
        "run_id": run_id,
        "name": None,
        "tags": {},
        "command": ["python", "train.py"],
        "cwd": "/work",
        "mode": "run",
        "started_at": T0,
        "interval_seconds": 1.0,
        "host": {"logical_cpus": 8},
    }
    args.update(kw)
    return store.create_run(**args)


def open_fds_on(path: Path) -> list[str]:
    """Descriptors of this process that refer to ``path`` (or its -wal/-shm files)."""
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(str(path)):
            out.append(target)
    return out


def count(store: Store, table: str, run_key: int) -> int:
    n: int = store.conn.execute(
        f"SELECT count(*) FROM {table} WHERE run_key=?", (run_key,)
    ).fetchone()[0]
    return n


# -- opening ------------------------------------------------------------------------------------
def test_fresh_db_is_migrated_to_current_schema_in_wal_mode(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "dir" / "cw.db"  # parents are created
    with Store.open(path) as s:
        assert s.path == path
        assert s.conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        tables = {r[0] for r in s.conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        assert {"runs", "series", "ticks", "samples", "steps", "writers", "processes"} <= tables
    raw = sqlite3.connect(path)
    try:
        assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert raw.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    finally:
        raw.close()


def test_reopening_is_idempotent_and_keeps_data(tmp_path: Path) -> None:
    path = tmp_path / "cw.db"
    with Store.open(path) as s:
        new_run(s, "aaaa1111")
    for _ in range(2):
        with Store.open(path, create=False) as s:
            assert s.conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
            assert [r.id for r in s.list_runs()] == ["aaaa1111"]


def test_open_without_create_on_missing_file(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="no computewatch database"):
        Store.open(tmp_path / "absent.db", create=False)
    assert not (tmp_path / "absent.db").exists()


def test_newer_schema_is_refused_naming_both_versions(tmp_path: Path) -> None:
    path = tmp_path / "cw.db"
    Store.open(path).close()
    raw = sqlite3.connect(path)
    raw.execute(f"PRAGMA user_version={SCHEMA_VERSION + 3}")
    raw.commit()
    raw.close()
    with pytest.raises(StoreError) as info:
        Store.open(path)
    # The refused database is closed at once (the traceback still holds the Store object).
    assert open_fds_on(path) == []
    msg = str(info.value)
    assert f"version {SCHEMA_VERSION + 3}" in msg
    assert f"({SCHEMA_VERSION})" in msg
    assert "upgrade computewatch" in msg


@pytest.mark.parametrize(
    "content",
    [
        b"hello, this is not a database\n",
        bytes(range(256)) * 16,
        b"SQLite format 2\x00" + b"x" * 84,
    ],
)
def test_garbage_file_is_refused_and_left_untouched(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "cw.db"
    path.write_bytes(content)
    with pytest.raises(StoreError, match="not a usable computewatch database"):
        Store.open(path)
    assert open_fds_on(path) == []
    assert path.read_bytes() == content
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cw.db"]  # no -wal/-shm left behind


def test_directory_path_is_refused(tmp_path: Path) -> None:
    d = tmp_path / "cw.db"
    d.mkdir()
    with pytest.raises(StoreError, match="is a directory"):
        Store.open(d)


def test_parent_that_cannot_be_made_is_refused(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(StoreError, match="cannot create"):
        Store.open(blocker / "cw.db")


# -- writing and reading back -------------------------------------------------------------------
def test_write_batch_round_trip(store: Store) -> None:
    rk = new_run(store, "0123abcd")
    other = new_run(store, "9999ffff")
    cpu_lbl = labels(pid=42, name="python")
    store.write_batch(
        rk,
        series=[
            (0, "tree_cpu_seconds_total", (), Kind.COUNTER),
            (1, "process_resident_memory_bytes", cpu_lbl, Kind.GAUGE),
        ],
        ticks=[(0, 10.0, T0 + 0.5), (1, 11.0, T0 + 1.5)],
        samples=[(rk, 0, 0, 0.25), (rk, 0, 1, 1e6), (rk, 1, 0, 1.25), (rk, 1, 1, 2e6)],
        steps=[(42, 10.2, T0 + 0.7, 32.0, None), (42, 10.9, T0 + 1.4, None, 512.0)],
        processes=[(42, 1, "python", ["python", "train.py"], T0 + 0.5)],
        writers=[(42, 10.0, {"name": "train", "started_mono": 10.0})],
        heartbeat_at=T0 + 2,
        data_until=T0 + 1.5,
    )
    # A second batch: a new series and tick; an already-known series row is ignored.
    store.write_batch(
        rk,
        series=[(0, "ignored_duplicate", (), Kind.GAUGE), (2, "tree_processes", (), Kind.GAUGE)],
        ticks=[(2, 12.0, T0 + 2.5)],
        samples=[(rk, 2, 0, 2.0), (rk, 2, 2, 3.0)],
        data_until=T0 + 2.5,
    )
    store.write_batch(other, ticks=[(0, 5.0, T0)], samples=[(other, 0, 0, 99.0)])

    assert store.series(rk) == [
        SeriesRow(0, "tree_cpu_seconds_total", {}, Kind.COUNTER),
        SeriesRow(1, "process_resident_memory_bytes", {"name": "python", "pid": "42"}, Kind.GAUGE),
        SeriesRow(2, "tree_processes", {}, Kind.GAUGE),
    ]
    assert isinstance(store.series(rk)[0].kind, Kind)
    assert store.ticks(rk) == [(0, 10.0, T0 + 0.5), (1, 11.0, T0 + 1.5), (2, 12.0, T0 + 2.5)]
    assert store.points(rk, 0) == [(0, 0.25), (1, 1.25), (2, 2.0)]
    assert store.points(rk, 1) == [(0, 1e6), (1, 2e6)]
    assert store.points_of(rk, [0, 2, 7]) == {
        0: [(0, 0.25), (1, 1.25), (2, 2.0)],
        2: [(2, 3.0)],
        7: [],
    }
    assert store.points_of(rk, []) == {}
    assert list(store.iter_samples(rk)) == [
        (0, 0, 0.25),
        (0, 1, 1e6),
        (1, 0, 1.25),
        (1, 1, 2e6),
        (2, 0, 2.0),
        (2, 2, 3.0),
    ]
    assert store.sample_count(rk) == 6
    assert store.sample_count(other) == 1
    assert store.steps(rk) == [
        StepRow(42, 10.2, 32.0, None, wall=T0 + 0.7),
        StepRow(42, 10.9, None, 512.0, wall=T0 + 1.4),
    ]
    first = store.steps(rk)[0]  # the stored step reads as the record it holds
    assert (first.pid, first.mono, first.wall, first.samples, first.tokens, first.flops) == (
        42, 10.2, T0 + 0.7, 32.0, None, None,
    )  # fmt: skip
    assert store.writers(rk) == {42: (10.0, {"name": "train", "started_mono": 10.0})}
    assert store.processes(rk) == [
        {
            "pid": 42,
            "ppid": 1,
            "name": "python",
            "cmdline": ["python", "train.py"],
            "first_seen": T0 + 0.5,
        }
    ]
    run = store.run_by_key(rk)
    assert run.heartbeat_at == T0 + 2
    assert run.data_until == T0 + 2.5
    assert run.status == RUNNING
    assert run.command == ["python", "train.py"]
    assert run.host == {"logical_cpus": 8}
    assert run.supervisor_pid == os.getpid()
    assert run.supervisor_host == socket.gethostname()
    # Nothing leaked into the other run.
    assert store.ticks(other) == [(0, 5.0, T0)]
    assert store.series(other) == []


def test_thinned_reads_seek_to_every_nth_tick(store: Store) -> None:
    rk = new_run(store, "thin00000000")
    other = new_run(store, "thin11111111")
    store.write_batch(
        rk,
        series=[(i, f"s{i}", (), Kind.GAUGE) for i in range(3)],
        ticks=[(q, 10.0 + q, T0 + q) for q in range(23)],
        # series 1 is missing at some ticks, as a process that comes and goes
        samples=[(rk, q, i, q * 10.0 + i) for q in range(23) for i in range(3) if i != 1 or q % 4],
    )
    store.write_batch(other, ticks=[(q, 1.0, T0) for q in range(40)],
                      samples=[(other, q, 0, -1.0) for q in range(40)])  # fmt: skip
    full = store.points_of(rk, [0, 1, 2])
    for stride in (1, 2, 5, 7, 22, 23, 100):
        thin = store.points_of(rk, [0, 1], stride=stride)
        assert thin == {i: [(q, v) for q, v in full[i] if q % stride == 0] for i in (0, 1)}, stride
        assert store.ticks(rk, stride=stride) == [t for t in store.ticks(rk) if t[0] % stride == 0]
    assert store.points_of(rk, [], stride=5) == {}
    assert store.tick_bounds(rk) == ((0, 10.0, T0), (22, 32.0, T0 + 22))
    empty = new_run(store, "thin22222222")
    assert store.tick_bounds(empty) is None
    assert store.ticks(empty, stride=3) == []
    assert store.points_of(empty, [0], stride=3) == {0: []}


def test_iter_points_and_counts(store: Store) -> None:
    rk = new_run(store, "iter00000000")
    store.write_batch(
        rk,
        series=[(i, f"s{i}", (), Kind.GAUGE) for i in range(3)],
        ticks=[(q, 10.0 + q, T0 + q) for q in range(3)],
        samples=[(rk, q, i, float(q * 3 + i)) for q in range(3) for i in (2, 0, 1)],
        phases=[(1, "data", 0.0, 1.0, None)] * 2,
    )
    assert list(store.iter_points(rk, [2, 0])) == [
        (rk, 0, 0, 0.0), (rk, 0, 2, 2.0), (rk, 1, 0, 3.0), (rk, 1, 2, 5.0), (rk, 2, 0, 6.0),
        (rk, 2, 2, 8.0),
    ]  # fmt: skip
    assert list(store.iter_points(rk, [])) == []
    assert store.counts(rk, ("phases", "requests", "samples")) == [2, 0, 9]
    with pytest.raises(ValueError, match="not a table of run data"):
        store.counts(rk, ("runs",))


def test_write_batch_rolls_back_everything_on_a_bad_row(store: Store) -> None:
    rk = new_run(store, "0123abcd")
    with pytest.raises(sqlite3.IntegrityError):
        store.write_batch(
            rk,
            series=[(0, "tree_cpu_seconds_total", (), Kind.COUNTER)],
            ticks=[(0, 10.0, T0)],
            samples=[(rk, 0, 0, 1.0), (rk, 0, 1, None)],  # type: ignore[list-item]
            steps=[(42, 10.2, T0, None, None)],
            processes=[(42, 1, "python", [], T0)],
            writers=[(42, 10.0, {})],
            heartbeat_at=T0 + 5,
            data_until=T0 + 5,
        )
    for table in ("series", "ticks", "samples", "steps", "processes", "writers"):
        assert count(store, table, rk) == 0, table
    run = store.run_by_key(rk)
    assert run.heartbeat_at == T0  # set by create_run, not by the failed batch
    assert run.data_until is None
    assert not store.conn.in_transaction
    # The connection is still usable.
    store.write_batch(rk, ticks=[(0, 10.0, T0)])
    assert store.ticks(rk) == [(0, 10.0, T0)]


def test_update_run_stores_json_and_refuses_unknown_columns(store: Store) -> None:
    rk = new_run(store, "0123abcd")
    store.update_run(
        rk,
        status=COMPLETED,
        exit_code=0,
        ended_at=T0 + 9,
        notes=["a", "b"],
        summary={"cpu": {"seconds_total": 1.5}},
        tags={"team": "ml"},
    )
    run = store.run_by_key(rk)
    assert (run.status, run.exit_code, run.ended_at) == (COMPLETED, 0, T0 + 9)
    assert run.notes == ["a", "b"]
    assert run.summary == {"cpu": {"seconds_total": 1.5}}
    assert run.tags == {"team": "ml"}
    with pytest.raises(ValueError, match="supervisor_pid"):
        store.update_run(rk, supervisor_pid=1)
    with pytest.raises(StoreError):
        store.run_by_key(rk + 100)


# -- finding runs -------------------------------------------------------------------------------
def test_find_run(store: Store) -> None:
    new_run(store, "abc111", name="train", started_at=T0)
    new_run(store, "abc222", name="train", started_at=T0 + 10)
    new_run(store, "def333", name="eval", started_at=T0 + 5)
    assert store.find_run("abc111").id == "abc111"
    assert store.find_run("def").id == "def333"  # unique prefix
    assert store.find_run("abc2").id == "abc222"
    with pytest.raises(StoreError, match="ambiguous") as info:
        store.find_run("abc")
    assert "abc111" in str(info.value) and "abc222" in str(info.value)
    assert store.find_run("train").id == "abc222"  # newest of that name
    assert store.find_run("eval").id == "def333"
    assert store.find_run("last").id == "abc222"
    for ref in ("nope", "fff", "", "abc%", "a_c"):
        with pytest.raises(StoreError, match="no run matches"):
            store.find_run(ref)


def test_find_last_on_empty_store(store: Store) -> None:
    with pytest.raises(StoreError, match="no runs stored yet"):
        store.find_run("last")


def test_list_runs_order_tags_and_limit(store: Store) -> None:
    new_run(store, "aa01", started_at=T0 + 1, tags={"team": "ml", "env": "prod"})
    new_run(store, "aa02", started_at=T0 + 3, tags={"team": "ml"})
    new_run(store, "aa03", started_at=T0 + 2, tags={"team": "infra"})
    new_run(store, "aa04", started_at=T0 + 3)  # same start: the later insert first
    assert [r.id for r in store.list_runs()] == ["aa04", "aa02", "aa03", "aa01"]
    assert [r.id for r in store.list_runs(limit=2)] == ["aa04", "aa02"]
    assert [r.id for r in store.list_runs(tags={"team": "ml"})] == ["aa02", "aa01"]
    assert [r.id for r in store.list_runs(tags={"team": "ml", "env": "prod"})] == ["aa01"]
    assert [r.id for r in store.list_runs(tags={"team": "ml"}, limit=1)] == ["aa02"]
    assert store.list_runs(tags={"team": "nobody"}) == []
    assert store.list_runs(limit=0) == []


# -- reconcile ----------------------------------------------------------------------------------
def _dead_pid_and_start() -> tuple[int, int]:
    """The PID and start ticks of a process that we started and reaped."""
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE
    )
    try:
        start = process_start_ticks(proc.pid)
        assert start is not None
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait()
    assert process_start_ticks(proc.pid) != start
    return proc.pid, start


def test_reconcile_marks_a_run_of_a_dead_supervisor_interrupted(store: Store) -> None:
    pid, start = _dead_pid_and_start()
    dead = new_run(store, "dead0001")
    store.write_batch(dead, ticks=[(0, 1.0, T0 + 1)], heartbeat_at=T0 + 8, data_until=T0 + 7)
    store.conn.execute(
        "UPDATE runs SET supervisor_pid=?, supervisor_start=? WHERE key=?", (pid, start, dead)
    )
    alive = new_run(store, "live0001")  # owned by this process

    assert store.reconcile() == ["dead0001"]
    run = store.run_by_key(dead)
    assert run.status == INTERRUPTED
    assert run.ended_at == T0 + 7  # data_until
    assert len(run.notes) == 1 and "killed or crashed" in run.notes[0]
    assert store.run_by_key(alive).status == RUNNING
    assert store.run_by_key(alive).ended_at is None
    # Idempotent: nothing more to mark, the note is not repeated.
    assert store.reconcile() == []
    assert store.run_by_key(dead).notes == run.notes


def test_reconcile_ends_at_heartbeat_or_start_without_data(store: Store) -> None:
    pid, start = _dead_pid_and_start()
    a = new_run(store, "dead0001", started_at=T0)
    b = new_run(store, "dead0002", started_at=T0 + 100)
    store.update_run(a, heartbeat_at=T0 + 30)
    store.update_run(b, heartbeat_at=None)
    for k in (a, b):
        store.conn.execute(
            "UPDATE runs SET supervisor_pid=?, supervisor_start=? WHERE key=?", (pid, start, k)
        )
    assert sorted(store.reconcile()) == ["dead0001", "dead0002"]
    assert store.run_by_key(a).ended_at == T0 + 30
    assert store.run_by_key(b).ended_at == T0 + 100


def test_reconcile_trusts_only_a_recent_heartbeat_from_another_host(store: Store) -> None:
    now = time.time()
    fresh = new_run(store, "remote01")
    stale = new_run(store, "remote02")
    store.update_run(fresh, heartbeat_at=now - 5)
    store.update_run(stale, heartbeat_at=now - 3600)
    store.conn.execute("UPDATE runs SET supervisor_host='elsewhere.example'")
    assert store.reconcile() == ["remote02"]
    assert store.run_by_key(fresh).status == RUNNING
    assert store.run_by_key(stale).status == INTERRUPTED


def test_find_run_and_list_runs_reconcile_first(store: Store) -> None:
    pid, start = _dead_pid_and_start()
    k = new_run(store, "dead0001")
    store.conn.execute(
        "UPDATE runs SET supervisor_pid=?, supervisor_start=? WHERE key=?", (pid, start, k)
    )
    assert store.find_run("dead0001").status == INTERRUPTED


# -- retention ----------------------------------------------------------------------------------
def _fill(store: Store, rk: int) -> None:
    store.write_batch(
        rk,
        series=[(0, "tree_cpu_seconds_total", (), Kind.COUNTER)],
        ticks=[(0, 1.0, T0), (1, 2.0, T0 + 1)],
        samples=[(rk, 0, 0, 0.0), (rk, 1, 0, 1.0)],
        steps=[(7, 1.5, T0 + 0.5, None, None)],
        processes=[(7, 1, "python", [], T0)],
        writers=[(7, 1.0, {})],
    )


def test_delete_samples_before_keeps_run_and_summary(store: Store) -> None:
    old = new_run(store, "old00001", started_at=T0)
    old_running = new_run(store, "old00002", started_at=T0)
    recent = new_run(store, "new00001", started_at=T0 + 1000)
    for k in (old, old_running, recent):
        _fill(store, k)
    store.update_run(old, status=COMPLETED, ended_at=T0 + 2, summary={"cpu": {"x": 1}})
    store.update_run(recent, status=COMPLETED, ended_at=T0 + 1002)

    before = time.time()
    done = store.delete_samples_before(T0 + 500)
    assert [r.id for r in done] == ["old00001"]
    run = store.run_by_key(old)
    assert run.summary == {"cpu": {"x": 1}}
    assert run.status == COMPLETED
    assert run.samples_deleted_at is not None and run.samples_deleted_at >= before
    for table in ("series", "ticks", "samples", "steps", "processes", "writers"):
        assert count(store, table, old) == 0, table
        assert count(store, table, old_running) > 0, table  # a running run is never touched
        assert count(store, table, recent) > 0, table
    assert store.run_by_key(old_running).samples_deleted_at is None
    # Already collected: not returned again.
    assert store.delete_samples_before(T0 + 500) == []
    store.vacuum()
    assert store.run_by_key(old).summary == {"cpu": {"x": 1}}


def _new_run(store: Store, run_id: str = "r1", **kw: Any) -> int:
    fields: dict[str, Any] = dict(
        run_id=run_id, name=None, tags={}, command=["python"], cwd=None, mode="run",
        started_at=T0, interval_seconds=1.0, host={},
    )  # fmt: skip
    fields.update(kw)
    return store.create_run(**fields)


def test_a_full_database_raises_its_own_error_not_the_rollbacks(tmp_path: Path) -> None:
    """SQLite ends the transaction itself on SQLITE_FULL: the ROLLBACK after it must not
    replace "database or disk is full" with "cannot rollback - no transaction is active"."""
    with Store.open(tmp_path / "cw.db") as store:
        rk = _new_run(store)
        pages = store.conn.execute("PRAGMA page_count").fetchone()[0]
        store.conn.execute(f"PRAGMA max_page_count={pages + 2}")  # a full disk, in miniature
        with pytest.raises(sqlite3.OperationalError, match="full"):
            store.write_batch(rk, ticks=[(i, float(i), T0 + i) for i in range(20_000)])
        assert not store.conn.in_transaction
        store.update_run(rk, status="failed", exit_code=4)  # a small row still fits
        assert (store.run_by_key(rk).status, store.run_by_key(rk).exit_code) == ("failed", 4)


def test_tags_and_writer_metadata_are_stored_redacted(tmp_path: Path) -> None:
    db = tmp_path / "cw.db"
    with Store.open(db) as store:
        rk = _new_run(store, tags={"team": "a", "db_password": "HUNTER2"})
        store.update_run(rk, tags={"token": "SEKRITD", "url": "https://u:PW9@h/x"}, name="n")
        store.write_batch(
            rk,
            writers=[(7, 1.0, {"name": "n", "tags": {"api_key": "KEYVAL"}, "total_steps": 3})],
            phases=[(7, "fetch --token PHASETOK", 1.0, 2.0, None), (7, "data", 2.0, 3.0, 0.5)],
            requests=[(7, "POST /login password=REQPW", 1.0, 2.0, 3.0, 4.0, True)],
        )
        assert [p.name for p in store.phases(rk)] == ["fetch --token ***", "data"]
        assert store.phases(rk)[1] == PhaseRecord(7, "data", 2.0, 3.0, 0.5)
        assert [r.name for r in store.requests(rk)] == ["POST /login password=***"]
        assert store.run_by_key(rk).tags == {"token": "***", "url": "https://u:***@h/x"}
        assert store.writers(rk)[7][1] == {
            "name": "n",
            "tags": {"api_key": "***"},
            "total_steps": 3,
        }
        store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    raw = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.is_file())
    for secret in (b"HUNTER2", b"SEKRITD", b"PW9", b"KEYVAL", b"PHASETOK", b"REQPW"):
        assert secret not in raw


def test_a_write_waiting_for_a_lock_gives_up_when_told(tmp_path: Path) -> None:
    """The sampler's flush stops waiting for another process's lock when the command ends
    (``give_up``), without waiting out its busy timeout."""
    db = tmp_path / "cw.db"
    with Store.open(db, busy_timeout=60.0) as store:
        rk = _new_run(store)
        holder = sqlite3.connect(db, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
        try:
            calls: list[int] = []

            def give_up() -> bool:
                calls.append(1)
                return len(calls) >= 3  # the third time it is asked

            with pytest.raises(sqlite3.OperationalError, match="locked"):
                store.write_batch(rk, ticks=[(0, 1.0, T0)], give_up=give_up)
            assert len(calls) == 3  # asked between slices of the wait, not after 60 s
            assert store.busy_timeout == 60.0  # the store's own timeout is back
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        store.write_batch(rk, ticks=[(0, 1.0, T0)], give_up=lambda: True)  # free: written
        assert store.ticks(rk) == [(0, 1.0, T0)]


def test_reserve_is_allocated_and_released_by_reconcile(tmp_path: Path) -> None:
    db = tmp_path / "cw.db"
    path = make_reserve(db, "deadbeef0001")
    assert path == reserve_path(db, "deadbeef0001")
    assert path.stat().st_size == RESERVE_BYTES
    assert path.stat().st_blocks * 512 >= RESERVE_BYTES  # allocated, not a sparse hole
    assert make_reserve(db, "deadbeef0001") is None  # one per run
    with Store.open(db) as store:  # its supervisor is gone (a kill -9): marked, reserve freed
        rk = _new_run(store, run_id="deadbeef0001")
        store.conn.execute(
            "UPDATE runs SET supervisor_pid=1, supervisor_start=0 WHERE key=?", (rk,)
        )
        assert store.reconcile() == ["deadbeef0001"]
    assert not path.exists()
