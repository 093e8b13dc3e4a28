"""A cgroup v2 of the run's own, which counts the CPU of every process the job ever started,
double-forked daemons reparented to init included (the process tree loses those when they are
reaped outside it).

:func:`open_run_cgroup` makes ``<our cgroup>/computewatch-<run id>`` under a cgroup-v2 mount
(``cgroup_root``, a parameter) or returns the reason it cannot. It enables no controller: the
``usage_usec``, ``user_usec`` and ``system_usec`` of ``cpu.stat`` exist in every v2 cgroup
without the cpu controller (kernel Documentation/admin-guide/cgroup-v2.rst, "cpu"), so the new
cgroup is a leaf with an empty ``cgroup.subtree_control`` and may hold processes whatever our
own cgroup's controllers are ("no internal process" constraint: it applies to a cgroup whose
subtree_control enables controllers, which ours never becomes). Every failure is a reason
string, never an exception into the run.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from computewatch.readings import Reading, counter
from computewatch.sources.base import SourceUnavailable

__all__ = [
    "DEFAULT_CGROUP_ROOT",
    "CgroupCpuSource",
    "RunCgroup",
    "open_run_cgroup",
    "own_cgroup",
    "read_cpu_stat",
]

DEFAULT_CGROUP_ROOT = "/sys/fs/cgroup"
_STAT_KEYS = ("usage_usec", "user_usec", "system_usec")


def own_cgroup(procfs_root: str = "/proc", pid: int | str = "self") -> str | None:
    """The cgroup-v2 path of ``pid`` (the ``0::/path`` line of /proc/<pid>/cgroup), or None."""
    try:
        with open(f"{procfs_root}/{pid}/cgroup", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("0::"):
                    return line[3:].strip() or "/"
    except OSError:
        return None
    return None


def read_cpu_stat(cgroup_dir: Path) -> dict[str, int]:
    """``usage_usec``, ``user_usec`` and ``system_usec`` of ``cgroup_dir/cpu.stat`` (µs);
    raises OSError or ValueError when unreadable."""
    out: dict[str, int] = {}
    with open(cgroup_dir / "cpu.stat", encoding="ascii") as f:
        for line in f:
            key, _, value = line.partition(" ")
            if key in _STAT_KEYS:
                out[key] = int(value)
    if "usage_usec" not in out:
        raise ValueError(f"{cgroup_dir}/cpu.stat has no usage_usec")
    return out


def _why(e: OSError) -> str:
    return os.strerror(e.errno) if e.errno else str(e)


class RunCgroup:
    """The run's own cgroup: ``spawn_inside`` puts the job in it from its first instruction,
    ``remove`` removes it at the end."""

    def __init__(self, path: Path, home: Path) -> None:
        self.path = path
        self.home = home  # the cgroup we came from, and return to

    def join(self) -> str | None:
        """Move this process into the run's cgroup, to spawn the job there: a child starts in
        its parent's cgroup, so the job and whatever it forks are inside from their first
        instruction, with no window for a fork to escape. :meth:`leave` right after the spawn;
        our own CPU counted there is that of the spawn call alone. The reason on failure."""
        return self.move(os.getpid())

    def leave(self) -> str | None:
        """Move this process back to the cgroup it came from; the reason on failure."""
        try:
            (self.home / "cgroup.procs").write_text(f"{os.getpid()}\n")
        except OSError as e:
            return f"cannot move back to {self.home}: {_why(e)}"
        return None

    def move(self, pid: int) -> str | None:
        """Move ``pid`` (all its threads) into the run's cgroup; the reason on failure."""
        try:
            (self.path / "cgroup.procs").write_text(f"{pid}\n")
        except OSError as e:
            return f"cannot move process {pid} into {self.path}: {_why(e)}"
        return None

    def pids(self) -> list[int]:
        with open(self.path / "cgroup.procs", encoding="ascii") as f:
            return [int(x) for x in f.read().split()]

    def remove(self) -> str | None:
        """Remove the cgroup once it is empty; a note when processes remain (escaped daemons:
        the cgroup is left for them) or removal fails."""
        try:
            left = self.pids()
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as e:
            return f"run cgroup {self.path} not removed: {e}"
        if left:
            shown = " ".join(map(str, left[:8])) + (" ..." if len(left) > 8 else "")
            return (
                f"{len(left)} process(es) of the run outlived it (pid {shown}); "
                f"its cgroup {self.path} is left for them"
            )
        try:
            self.path.rmdir()
        except OSError as e:
            if e.errno == errno.ENOENT:
                return None
            return f"run cgroup {self.path} not removed: {_why(e)}"
        return None


def open_run_cgroup(
    run_id: str, *, cgroup_root: str = DEFAULT_CGROUP_ROOT, procfs_root: str = "/proc"
) -> RunCgroup | str:
    """Create ``<our cgroup>/computewatch-<run_id>`` under the cgroup-v2 mount ``cgroup_root``;
    the reason as a string when cgroup v2 is not usable and delegated to us here."""
    path = own_cgroup(procfs_root)
    if path is None:
        return "no cgroup v2 (no 0:: line in /proc/self/cgroup)"
    root = Path(cgroup_root)
    if not (root / "cgroup.controllers").is_file():
        return f"no cgroup v2 mounted at {cgroup_root}"
    home = root / path.lstrip("/")
    if not (home / "cgroup.procs").is_file():
        return f"our cgroup {path} is not under {cgroup_root}"
    try:
        read_cpu_stat(home)
    except (OSError, ValueError) as e:
        return f"cpu.stat of {home} unreadable: {e}"
    if not os.access(home, os.W_OK) or not os.access(home / "cgroup.procs", os.W_OK):
        return f"cgroup {home} is not writable by us (not delegated)"
    child = home / f"computewatch-{run_id}"
    try:
        child.mkdir(exist_ok=True)  # a run id is new: an existing one is this run's own
    except OSError as e:
        return f"cannot create {child}: {_why(e)}"
    try:
        read_cpu_stat(child)
    except (OSError, ValueError) as e:
        try:
            child.rmdir()
        except OSError:
            pass
        return f"cpu.stat of {child} unreadable: {e}"
    return RunCgroup(child, home)


class CgroupCpuSource:
    """The run cgroup's CPU counters, in seconds: ``run_cgroup_cpu_seconds_total`` (user +
    system), ``run_cgroup_cpu_user_seconds_total`` and ``run_cgroup_cpu_system_seconds_total``."""

    name = "cgroup"

    def __init__(self, cgroup_dir: Path) -> None:
        self.path = cgroup_dir
        try:
            read_cpu_stat(cgroup_dir)
        except (OSError, ValueError) as e:
            raise SourceUnavailable(f"cpu.stat of {cgroup_dir} unreadable: {e}") from None
        self._last: list[Reading] = []

    def read(self) -> list[Reading]:
        try:
            st = read_cpu_stat(self.path)
        except FileNotFoundError:  # removed at the end: its last figures stand
            return self._last
        self._last = [
            counter("run_cgroup_cpu_seconds_total", st["usage_usec"] / 1e6),
            counter("run_cgroup_cpu_user_seconds_total", st.get("user_usec", 0) / 1e6),
            counter("run_cgroup_cpu_system_seconds_total", st.get("system_usec", 0) / 1e6),
        ]
        return self._last

    def close(self) -> None:
        pass
