"""A job whose worker double-forks: the grandchild is reparented to init and reaped outside the
job's process tree, so the tree never counts its CPU; the run's own cgroup v2 does. The cgroup
v2 hierarchy is mounted by the test (as root, as CI runs it: ``mount -t cgroup2``) and named
with ``COMPUTEWATCH_CGROUP_ROOT``; it is unmounted after."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

DOUBLE_FORK = """
import os, time
def burn(seconds):
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass
time.sleep(0.5)  # after the run's first tick
if os.fork() == 0:  # the worker
    if os.fork() == 0:  # the grandchild: reparented to init once the worker exits
        burn(2.0)
        open(os.environ["DONE"], "w").close()
        os._exit(0)
    os._exit(0)
os.wait()
while not os.path.exists(os.environ["DONE"]):  # the run covers the whole burn
    time.sleep(0.05)
"""


@pytest.fixture
def cgroup2(tmp_path: Path) -> Iterator[Path]:
    """A cgroup-v2 hierarchy mounted under tmp_path (root only: the CI runs as root)."""
    if os.geteuid() != 0:
        pytest.skip("mounting cgroup2 needs root (CI runs as root)")
    d = tmp_path / "cg2"
    d.mkdir()
    subprocess.run(["mount", "-t", "cgroup2", "none", str(d)], check=True)
    try:
        yield d
    finally:
        subprocess.run(["umount", "-l", str(d)], check=False)


def _run(
    cw: Any,
    script: Path,
    done: Path,
    monkeypatch: pytest.MonkeyPatch,
    root: str,
    interval: float = 0.2,
) -> Any:
    monkeypatch.setenv("COMPUTEWATCH_CGROUP_ROOT", root)
    monkeypatch.setenv("DONE", str(done))
    r = cw("run", "--quiet", "--interval", str(interval), "--", sys.executable, script)
    assert r.returncode == 0, r.stderr
    return cw.show()


def test_double_forked_grandchild_counted_by_the_runs_cgroup(
    cw: Any,
    make_script: Callable[[str, str], Path],
    cgroup2: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    script = make_script("double_fork.py", DOUBLE_FORK)
    s = _run(cw, script, tmp_path / "done1", monkeypatch, str(cgroup2))
    assert s["cpu"]["method"] == "cgroup", s["cpu"]
    assert s["cpu"]["seconds_total"] >= 1.8, s["cpu"]
    # Removed at the end. (Every cgroup2 mount shows the one hierarchy: look for this run's.)
    assert not list(cgroup2.rglob(f"computewatch-{s['id']}"))
    text = cw("show", "last").stdout
    assert "(cgroup)" in text

    # The same job without a cgroup: the tree counts it, misses the grandchild, and says so.
    # The tree follows every process it has seen, so a tick that lists the grandchild in the
    # instant before the worker exits (a loaded machine can stretch that instant) counts the
    # grandchild too. Here the worker forks 0.5 s after the run's first tick and the next comes
    # 5 s later, when the grandchild has long been reparented outside the tree.
    s = _run(cw, script, tmp_path / "done2", monkeypatch, "off", interval=5.0)
    assert s["cpu"]["method"] == "process tree", s["cpu"]
    assert s["cpu"]["seconds_total"] < 1.8, s["cpu"]
    assert "(process tree)" in cw("show", "last").stdout


def test_a_daemon_that_outlives_the_job_leaves_its_cgroup(
    cw: Any,
    make_script: Callable[[str, str], Path],
    cgroup2: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stop = tmp_path / "stop"
    script = make_script(
        "daemon.py",
        f"""
        import os, time
        if os.fork() == 0:
            if os.fork() == 0:  # a daemon: its own stdio, so the run's pipes close
                null = os.open(os.devnull, os.O_RDWR)
                for fd in (0, 1, 2):
                    os.dup2(null, fd)
                while not os.path.exists({str(stop)!r}):
                    time.sleep(0.05)
                os._exit(0)
            os._exit(0)
        os.wait()
        """,
    )
    monkeypatch.setenv("COMPUTEWATCH_CGROUP_ROOT", str(cgroup2))
    try:
        r = cw("run", "--interval", "0.2", "--", sys.executable, script)
        assert r.returncode == 0, r.stderr
        s = cw.show()
        left = list(cgroup2.rglob(f"computewatch-{s['id']}"))
        assert len(left) == 1 and (left[0] / "cgroup.procs").read_text().strip(), left
        assert "outlived it" in r.stderr and "is left for them" in r.stderr, r.stderr
        assert s["cpu"]["method"] == "cgroup"
    finally:
        stop.touch()
    # Once the daemon is gone, the cgroup can be removed by whoever cleans up.
    for d in left:
        cw.wait_for(lambda d=d: not (d / "cgroup.procs").read_text().strip(), what="daemon gone")
        d.rmdir()
