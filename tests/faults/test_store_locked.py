"""A store that another process holds locked (``BEGIN EXCLUSIVE``) never holds the job's exit
status: the run waits in the spool and the next command stores it, once. The lock holder is a
real process; the ordering of events (the supervisor gone while the lock is still held) is
asserted, never a duration."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

HOLDER = """
import sqlite3, sys, time
c = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=60)
c.execute("BEGIN EXCLUSIVE")
c.execute("UPDATE runs SET notes=notes WHERE 0")  # a write: the lock is really taken
print("locked", flush=True)
sys.stdin.read()  # held until the test closes our stdin (or it dies)
c.execute("COMMIT")
open(sys.argv[2], "w").write("released")
"""


class Lock:
    """A child process holding the database's write lock until :meth:`release`."""

    def __init__(self, db: Path, tmp: Path) -> None:
        self.released_marker = tmp / "lock-released"
        self.proc = subprocess.Popen(
            [sys.executable, "-c", HOLDER, str(db), str(self.released_marker)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        assert self.proc.stdout.readline() == "locked\n"

    @property
    def held(self) -> bool:
        return self.proc.poll() is None and not self.released_marker.exists()

    def release(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            self.proc.wait(timeout=60)
        self.close()

    def close(self) -> None:
        for f in (self.proc.stdin, self.proc.stdout):
            if f is not None and not f.closed:
                f.close()


@pytest.fixture
def locks(tmp_path: Path) -> Iterator[list[Lock]]:
    held: list[Lock] = []
    yield held
    for lock in held:
        if lock.proc.poll() is None:
            lock.proc.kill()
            lock.proc.wait()
        lock.close()


def _stored_runs(cw: Any) -> list[dict[str, Any]]:
    runs: list[dict[str, Any]] = cw.json("runs")
    return runs


def _running_row(db: Path) -> bool:
    try:
        with sqlite3.connect(db, timeout=5) as c:
            return c.execute("SELECT count(*) FROM runs WHERE status='running'").fetchone()[0] > 0
    except sqlite3.Error:
        return False


def test_locked_at_the_start(cw: Any, tmp_path: Path, locks: list[Lock]) -> None:
    cw.ok("run", "--quiet", "--", "true")  # the database exists
    lock = Lock(cw.db, tmp_path)
    locks.append(lock)
    r = cw("run", "--quiet", "--", "sh", "-c", "echo out; exit 3")
    assert lock.held  # the supervisor ended while the store was still locked
    assert r.returncode == 3, r.stderr
    assert r.stdout == "out\n"
    assert "could not be stored now (database locked)" in r.stderr
    assert r.stderr.count("computewatch:") == 1, r.stderr  # said once
    lock.release()
    runs = _stored_runs(cw)
    assert [(x["status"], x["exit_code"]) for x in runs] == [("failed", 3), ("completed", 0)]
    assert _stored_runs(cw) == runs  # stored exactly once
    assert not list((cw.home / "spool").glob("*.run.sqlite"))
    summary = cw.show()
    assert summary["exit_code"] == 3


@pytest.mark.parametrize("after_lock", ["sleep 1", ":"], ids=["mid-run", "at-the-end"])
def test_locked_during_the_run(cw: Any, tmp_path: Path, locks: list[Lock], after_lock: str) -> None:
    go = tmp_path / "go"
    p = cw.popen(
        "run", "--quiet", "--interval", "0.2", "--", "sh", "-c",
        f'echo start; while [ ! -e "$0" ]; do sleep 0.05; done; {after_lock}; exit 4', str(go),
    )  # fmt: skip
    cw.wait_for(lambda: _running_row(cw.db), what="the run's row")
    lock = Lock(cw.db, tmp_path)
    locks.append(lock)
    go.touch()
    try:
        out, err = p.communicate(timeout=120)
    finally:
        still_held = lock.held
        lock.release()
    assert still_held  # the exit status came back while the store was locked
    assert p.returncode == 4, err
    assert out == "start\n"
    assert "could not be stored now (database locked)" in err
    runs = _stored_runs(cw)
    assert [(x["status"], x["exit_code"]) for x in runs] == [("failed", 4)]
    assert _stored_runs(cw) == runs
    summary = cw.show()
    assert summary["exit_code"] == 4
    assert summary["samples"]["count"] >= 2  # the ticks kept in memory while locked are stored
    assert any("stored later" in n for n in summary["notes"])


def test_waiting_run_is_listed_then_ingested_once(
    cw: Any, tmp_path: Path, locks: list[Lock]
) -> None:
    cw.ok("run", "--quiet", "--", "true")
    lock = Lock(cw.db, tmp_path)
    locks.append(lock)
    r = cw("run", "--quiet", "--", "sh", "-c", "exit 5")
    assert r.returncode == 5
    listed = cw("runs")  # still locked: the run waits, and `runs` says so
    assert listed.returncode == 0, listed.stderr
    waiting = [x for x in listed.stderr.splitlines() if "waiting to be stored" in x]
    assert len(waiting) == 1 and "(database locked)" in waiting[0], listed.stderr
    lock.release()
    spooled = list((cw.home / "spool").glob("*.run.sqlite"))
    assert len(spooled) == 1
    copy = tmp_path / "copy.run.sqlite"
    copy.write_bytes(spooled[0].read_bytes())
    runs = _stored_runs(cw)
    assert [x["exit_code"] for x in runs] == [5, 0]
    # The same file again (a crash between the commit and its removal): nothing doubles.
    copy.rename(spooled[0])
    assert _stored_runs(cw) == runs
    with sqlite3.connect(cw.db) as c:
        assert c.execute("SELECT count(*) FROM runs").fetchone()[0] == 2
        dup = "SELECT count(*) - count(DISTINCT run_key || ':' || seq) FROM ticks"
        assert c.execute(dup).fetchone()[0] == 0
    assert json.dumps(cw.show()["exit_code"]) == "5"


def test_a_lock_held_at_the_end_delays_the_exit_by_about_a_second_at_most(
    cw: Any, tmp_path: Path, locks: list[Lock]
) -> None:
    """The end of a run has one deadline, 1 s from the job's end, for all its writes: past it the
    run goes to the spool. A bound with a wide margin (a behaviour check, not a benchmark:
    without the deadline the exit came 1.5 to 2 s after the job's end, without a lock 0.04 s)."""
    go, ended = tmp_path / "go", tmp_path / "ended"
    p = cw.popen(
        "run", "--quiet", "--interval", "0.1", "--", "sh", "-c",
        'while [ ! -e "$0" ]; do sleep 0.02; done; sleep 1.3; date +%s.%N > "$1"; exit 4',
        str(go), str(ended),
    )  # fmt: skip
    cw.wait_for(lambda: _running_row(cw.db), what="the run's row")
    lock = Lock(cw.db, tmp_path)  # taken mid-run: the sampler's flushes meet it before the end
    locks.append(lock)
    go.touch()
    try:
        _, err = p.communicate(timeout=120)
        exited = time.time()
    finally:
        still_held = lock.held
        lock.release()
    assert still_held
    assert p.returncode == 4, err
    assert "could not be stored now (database locked)" in err
    after_job = exited - float(ended.read_text())
    assert after_job < 1.5, f"the exit came {after_job:.2f} s after the job's end"
    assert [(x["status"], x["exit_code"]) for x in _stored_runs(cw)] == [("failed", 4)]


TRACKED = """
import json, sys, time
from pathlib import Path
import computewatch

go, out = Path(sys.argv[1]), Path(sys.argv[2])
with computewatch.track(name="tracked", interval=0.1) as run:
    while not go.exists():
        time.sleep(0.02)
    for _ in range(5):
        time.sleep(0.05)
        run.step(samples=1)
    ended = time.time()
out.write_text(json.dumps([ended, time.time(), run.summary is not None]))
"""


@pytest.mark.parametrize("when", ["at-the-start", "mid-run"])
def test_a_tracked_block_is_not_held_by_a_locked_store(
    cw: Any, tmp_path: Path, locks: list[Lock], when: str
) -> None:
    """track() ends as `computewatch run` does: its sampler's writes wait for a lock only until
    the end's deadline, then the run goes to the spool (said once), and the program goes on.
    Without it, the block's end waited for the lock to be released (10 s and more)."""
    cw.ok("run", "--quiet", "--", "true")  # the database exists
    go, out = tmp_path / "go", tmp_path / "out"
    script = tmp_path / "tracked.py"
    script.write_text(TRACKED)
    if when == "at-the-start":
        locks.append(Lock(cw.db, tmp_path))
    p = subprocess.Popen(
        [sys.executable, str(script), str(go), str(out)],
        env=cw.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    if when == "mid-run":
        cw.wait_for(lambda: _running_row(cw.db), what="the tracked run's row")
        locks.append(Lock(cw.db, tmp_path))
    go.touch()
    try:
        _, err = p.communicate(timeout=120)
    finally:
        still_held = locks[-1].held
        locks[-1].release()
    assert still_held  # the program ended while the store was still locked
    assert p.returncode == 0, err
    ended, left, has_summary = json.loads(out.read_text())
    assert left - ended < 1.5, f"the block's end took {left - ended:.2f} s"
    assert not has_summary  # the run is not in the store yet
    assert "could not be stored now (database locked)" in err, err
    assert "Traceback" not in err
    runs = _stored_runs(cw)  # the next command stores it, once
    assert [(x["name"], x["status"]) for x in runs] == [
        ("tracked", "completed"),
        (None, "completed"),
    ]
    assert _stored_runs(cw) == runs
    steps = cw.show("tracked")["steps"]
    assert steps["count"] == 5
