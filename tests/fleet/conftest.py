"""Fixtures of the agent tests: ``proc_tree``, a recorded procfs tree under tmp_path that a test
edits between ticks (the sources take ``procfs_root``); ``check_metrics``, the real
``promtool check metrics`` on an exposition; ``busy_process``, a tagged child using CPU."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

HZ = os.sysconf("SC_CLK_TCK")


def stat_line(
    pid: int,
    name: str,
    ppid: int,
    utime: int,
    stime: int = 0,
    *,
    start: int = 100,
    rss_pages: int = 256,
    flags: int = 0,
    cutime: int = 0,
    cstime: int = 0,
) -> str:
    """A /proc/PID/stat line (proc(5) field order; times in clock ticks)."""
    fields = [
        "S",
        str(ppid),
        str(pid),
        str(pid),
        "0",
        "-1",
        str(flags),
        "0",
        "0",
        "0",
        "0",
        str(utime),
        str(stime),
        str(cutime),
        str(cstime),
        "20",
        "0",
        "1",
        "0",
        str(start),
        "1000000",
        str(rss_pages),
    ]
    fields += ["0"] * 30
    return f"{pid} ({name}) " + " ".join(fields) + "\n"


class ProcTree:
    """A fake /proc: ``add`` a process, ``set_cpu`` to move its times, ``exit`` to end it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.last_pid = 1
        self._write_loadavg()

    def _write_loadavg(self) -> None:
        (self.root / "loadavg").write_text(f"0.00 0.00 0.00 1/100 {self.last_pid}\n")

    def add(
        self,
        pid: int,
        name: str = "python",
        *,
        ppid: int = 1,
        uid: int = 1000,
        cgroup: str = "0::/user.slice/user-1000.slice/session-1.scope\n",
        environ: dict[str, str] | None = None,
        utime: int = 0,
        start: int = 100,
        flags: int = 0,
        environ_readable: bool = True,
    ) -> None:
        d = self.root / str(pid)
        d.mkdir()
        (d / "stat").write_text(stat_line(pid, name, ppid, utime, start=start, flags=flags))
        (d / "status").write_text(
            f"Name:\t{name}\nUmask:\t0022\nState:\tS\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n"
        )
        (d / "cgroup").write_text(cgroup)
        (d / "cmdline").write_bytes(name.encode() + b"\0--secret-flag\0")
        if environ_readable:
            env = environ or {}
            (d / "environ").write_bytes(
                b"".join(f"{k}={v}".encode() + b"\0" for k, v in env.items())
            )
        else:  # root reads any file: a directory stands for EACCES (a missing file is a gone PID)
            (d / "environ").mkdir()
        self.last_pid = max(self.last_pid, pid)
        self._write_loadavg()

    def set_cpu(
        self,
        pid: int,
        utime: int,
        *,
        cutime: int = 0,
        ppid: int = 1,
        name: str = "python",
        start: int = 100,
        rss_pages: int = 256,
    ) -> None:
        (self.root / str(pid) / "stat").write_text(
            stat_line(pid, name, ppid, utime, cutime=cutime, start=start, rss_pages=rss_pages)
        )

    def exit(self, pid: int) -> None:
        """The process is gone: an empty stat reads as a vanished process."""
        (self.root / str(pid) / "stat").write_text("")
        for f in (self.root / str(pid)).iterdir():
            if f.name != "stat":
                f.unlink()


@pytest.fixture
def proc_tree(tmp_path: Path) -> ProcTree:
    return ProcTree(tmp_path / "proc")


def _check_metrics(body: str) -> None:
    r = subprocess.run(
        ["promtool", "check", "metrics"],
        check=False,
        input=body,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.fixture
def check_metrics() -> Callable[[str], None]:
    """``check_metrics(body)`` asserts that promtool accepts a text exposition. Without promtool
    (the Debian package ``prometheus``) the test is skipped, never passed unchecked; under
    ``CI=true`` that skip fails it (tests/conftest.py)."""
    if not shutil.which("promtool"):
        pytest.skip("no promtool (apt-get install prometheus); CI installs it")
    return _check_metrics


_BUSY = textwrap.dedent(
    """
    import time
    while True:
        t = time.monotonic()
        while time.monotonic() - t < 0.05:
            pass
        time.sleep(0.05)
    """
)


@pytest.fixture
def busy_process() -> Iterator[Callable[[str], subprocess.Popen[bytes]]]:
    """``busy_process("team=nlp")`` starts a Python child that keeps half a core busy, with
    that ``COMPUTEWATCH_TAGS``; every one is killed at teardown."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(tags: str) -> subprocess.Popen[bytes]:
        env = dict(os.environ, COMPUTEWATCH_TAGS=tags)
        procs.append(subprocess.Popen([sys.executable, "-c", _BUSY], env=env))
        return procs[-1]

    yield start
    for p in procs:
        p.kill()
        p.wait(timeout=10)
