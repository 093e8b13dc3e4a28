"""A store that is corrupt, read-only or on a full disk never stops the job, never changes its
exit status or output; readers of a read-only store still read, and a corrupt file is left
untouched. Read-only places are real read-only bind mounts and the full disk a real tmpfs, each
made by the test (as root, as CI runs it) in a mount namespace of its own or unmounted after."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import CW, TIMEOUT


def _digest(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def _garbage(db: Path) -> None:
    db.write_bytes(os.urandom(40_000))


def _truncated(db: Path) -> None:
    with sqlite3.connect(db) as c:
        c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    os.truncate(db, 5000)  # the header says more pages than the file has


def _text(db: Path) -> None:
    db.write_text("these are my notes, not a database\n" * 200)


@pytest.mark.parametrize(
    "spoil", [_garbage, _truncated, _text], ids=["garbage", "truncated", "text"]
)
def test_corrupt_database(cw: Any, spoil: Any) -> None:
    cw.ok("run", "--quiet", "--", "true")
    spoil(cw.db)
    before = _digest(cw.db)
    r = cw("run", "--quiet", "--", "sh", "-c", "echo out; exit 6")
    assert r.returncode == 6, r.stderr
    assert r.stdout == "out\n"
    assert r.stderr.count("computewatch:") == 1, r.stderr  # one line says why
    assert "could not be stored now (corrupt database)" in r.stderr
    for reader in (("runs",), ("show", "last"), ("report", "last", "-o", str(cw.tmp / "r.html"))):
        got = cw(*reader)
        assert got.returncode != 0
        lines = got.stderr.strip().splitlines()
        assert "not a usable computewatch database" in lines[-1], got.stderr
        if reader == ("runs",):  # and, before it, the run that waits in the spool, with why
            assert len(lines) == 2, got.stderr
            assert "1 run(s) waiting to be stored" in lines[0], got.stderr
            assert "(corrupt database)" in lines[0], got.stderr
        else:
            assert len(lines) == 1, got.stderr
    assert _digest(cw.db) == before  # never modified
    assert len(list((cw.home / "spool").glob("*.run.sqlite"))) == 1  # the run waits


def _in_mounts(cw: Any, binds: list[Path], *args: str) -> subprocess.CompletedProcess[str]:
    """``computewatch ARGS`` in a private mount namespace where each of ``binds`` is remounted
    read-only (``unshare -m``: the test's own mounts are not touched)."""
    script = "".join(f'mount -o bind,ro "{b}" "{b}" && ' for b in binds) + 'exec "$@"'
    return subprocess.run(
        ["unshare", "-m", "sh", "-c", script, "sh", *CW, *args],
        capture_output=True, text=True, env=cw.env(), cwd=cw.tmp, timeout=TIMEOUT, check=False,
    )  # fmt: skip


@pytest.mark.parametrize("what", ["directory", "file"])
def test_read_only_store_is_read(cw: Any, what: str) -> None:
    cw.ok("run", "--quiet", "--name", "kept", "--", "sh", "-c", "exit 0")
    binds = [cw.home] if what == "directory" else [cw.db]
    before = _digest(cw.db)
    runs = _in_mounts(cw, binds, "runs")
    assert runs.returncode == 0, runs.stderr
    assert "kept" in runs.stdout
    show = _in_mounts(cw, binds, "show", "last", "--json")
    assert show.returncode == 0, show.stderr
    assert '"exit_code": 0' in show.stdout
    report = _in_mounts(cw, binds, "report", "last", "-o", str(cw.tmp / "r.html"))
    assert report.returncode == 0, report.stderr
    export = _in_mounts(cw, binds, "export", "last", "--format", "csv", "-o", str(cw.tmp / "x.csv"))
    assert export.returncode == 0, export.stderr
    diagnose = _in_mounts(cw, binds, "diagnose", "last", "--json")
    assert diagnose.returncode == 0, diagnose.stderr
    assert json.loads(diagnose.stdout)["run"]["name"] == "kept"
    assert _digest(cw.db) == before


@pytest.mark.parametrize("what", ["directory", "file"])
def test_read_only_store_does_not_mark_runs(cw: Any, what: str) -> None:
    cw.ok("run", "--quiet", "--", "true")
    with sqlite3.connect(cw.db) as c:  # a run whose monitor is gone, as after a kill -9
        c.execute("UPDATE runs SET status='running', supervisor_pid=1, supervisor_start=0")
    r = _in_mounts(cw, [cw.home] if what == "directory" else [cw.db], "runs")
    assert r.returncode == 0, r.stderr
    assert "read-only: not marked" in r.stderr
    with sqlite3.connect(cw.db) as c:
        assert c.execute("SELECT status FROM runs").fetchone()[0] == "running"


def test_read_only_home_runs_the_job(cw: Any) -> None:
    cw.ok("run", "--quiet", "--", "true")
    r = _in_mounts(cw, [cw.home], "run", "--", "sh", "-c", "echo out; exit 9")
    assert r.returncode == 9, r.stderr
    assert r.stdout == "out\n"
    warnings = [x for x in r.stderr.splitlines() if x.startswith("computewatch: run ")]
    assert len(warnings) == 1 and "could not be stored" in warnings[0], r.stderr
    assert "status" in r.stderr  # the summary is still printed


@pytest.fixture
def small_disk(cw: Any) -> Iterator[Path]:
    """``$COMPUTEWATCH_HOME`` on a 4 MiB tmpfs, unmounted after the test."""
    cw.home.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(cw.home)], check=True)
    try:
        yield cw.home
    finally:
        subprocess.run(["umount", "-l", str(cw.home)], check=True)


def _fill(home: Path) -> Path:
    filler = home / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while True:
            os.write(fd, b"\0" * 4096)  # unbuffered: stops at the first ENOSPC
    except OSError:
        pass
    finally:
        os.close(fd)
    return filler


def test_full_disk_at_the_start(cw: Any, small_disk: Path) -> None:
    cw.ok("run", "--quiet", "--", "true")
    _fill(small_disk)
    r = cw("run", "--", "sh", "-c", "echo out; exit 3")
    assert r.returncode == 3, r.stderr
    assert r.stdout == "out\n"
    warnings = [x for x in r.stderr.splitlines() if x.startswith("computewatch: run ")]
    assert len(warnings) == 1 and "could not be stored" in warnings[0], r.stderr
    assert "status" in r.stderr  # the summary, from memory


def _running_row(db: Path) -> bool:
    """Whether the run's row is in the store (read directly: no command writes to the disk)."""
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as c:
            return c.execute("SELECT count(*) FROM runs WHERE status='running'").fetchone()[0] > 0
    except sqlite3.Error:
        return False


def test_full_disk_mid_run(cw: Any, small_disk: Path) -> None:
    """The disk fills while the job runs: the job's status still reaches the store (the run's
    reserve is released for its end row, written before the data the disk refuses)."""
    go = cw.tmp / "go"
    p = cw.popen(
        "run", "--quiet", "--interval", "0.1", "--", "sh", "-c",
        'echo start; while [ ! -e "$0" ]; do sleep 0.05; done; sleep 0.5; exit 4', str(go),
    )  # fmt: skip
    cw.wait_for(lambda: _running_row(cw.db), what="the run's row")  # mid-run, deterministically
    filler = _fill(small_disk)
    go.touch()
    out, err = p.communicate(timeout=TIMEOUT)
    assert p.returncode == 4, err
    assert out == "start\n"
    assert "cannot rollback" not in err  # the real error, not the failed ROLLBACK's
    filler.unlink()
    runs = cw.json("runs")
    assert [(x["status"], x["exit_code"]) for x in runs] == [("failed", 4)], err
    assert runs[0]["ended_at"] is not None
    assert not list(small_disk.glob("spool/*.reserve"))  # the reserve is not left behind
