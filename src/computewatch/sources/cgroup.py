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

Where our cgroup is not ours to write (a desktop or server session under systemd), a systemd
manager makes one instead: :func:`find_systemd_run` tells whether a manager is reachable (its
private socket, a few ``stat`` calls) and which ``systemd-run`` to use; the supervisor spawns
``systemd-run [--user] --scope ... -- CMD``, which asks the manager for a transient scope holding
its own PID and then execs the command in it (systemd-run(1): "executed by systemd-run itself",
the same process). :func:`await_scope_exec` watches that PID until it has exec'd the command, or
tells that it never will (systemd-run exited, or hung and was stopped before its exec), so that
the supervisor starts the command itself, exactly once. The scope's ``cpu.stat`` is readable
without delegation; :class:`ScopeCgroup` is the run's cgroup then, and systemd removes it.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path

import msgspec

from computewatch.readings import Reading, counter
from computewatch.sources.base import SourceUnavailable

__all__ = [
    "CGROUP_METHOD",
    "DEFAULT_CGROUP_ROOT",
    "SCOPE_METHOD",
    "SCOPE_START_TIMEOUT",
    "CgroupCpuSource",
    "RunCgroup",
    "ScopeCgroup",
    "ScopeStart",
    "SystemdRun",
    "await_scope_exec",
    "find_systemd_run",
    "open_run_cgroup",
    "own_cgroup",
    "read_cpu_stat",
    "scope_cgroup",
]

DEFAULT_CGROUP_ROOT = "/sys/fs/cgroup"
_STAT_KEYS = ("usage_usec", "user_usec", "system_usec")
CGROUP_METHOD = "cgroup"
"""``cpu.method`` when the run's own cgroup counted the CPU."""
SCOPE_METHOD = "systemd scope"
"""``cpu.method`` when a systemd transient scope counted it (the series' ``method`` label)."""
SCOPE_START_TIMEOUT = 3.0
"""Seconds systemd-run may take to exec the command before it is stopped and the command
started without it (a scope takes milliseconds; systemd-run's own D-Bus timeout is 25 s)."""
EXPAND_FLAG_SINCE = 254
"""systemd-run expands ``$VAR`` in a scope's command line from v254 on, unless given
``--expand-environment=no`` (added in the same version; systemd-run(1))."""


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

    method = CGROUP_METHOD

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
    system), ``run_cgroup_cpu_user_seconds_total`` and ``run_cgroup_cpu_system_seconds_total``.

    ``method`` names who made the cgroup: :data:`CGROUP_METHOD` (the run's own, unlabelled
    series) or :data:`SCOPE_METHOD` (a systemd scope, the series labelled ``method``). None: a
    ``computewatch-<run id>.scope`` directory is a scope (systemd names a scope's cgroup after
    its unit, systemd.scope(5)), any other the run's own."""

    name = "cgroup"

    def __init__(self, cgroup_dir: Path, method: str | None = None) -> None:
        self.path = cgroup_dir
        if method is None:
            method = SCOPE_METHOD if _is_scope_dir(cgroup_dir) else CGROUP_METHOD
        self.method = method
        self._labels: tuple[tuple[str, str], ...] = (
            () if method == CGROUP_METHOD else (("method", method),)
        )
        try:
            read_cpu_stat(cgroup_dir)
        except (OSError, ValueError) as e:
            raise SourceUnavailable(f"cpu.stat of {cgroup_dir} unreadable: {e}") from None
        self._last: list[Reading] = []
        self._last_mono: float | None = None
        self.notes: list[str] = []
        """Said once in the run's notes (the sampler reads a source's ``notes``)."""

    def read(self) -> list[Reading]:
        try:
            st = read_cpu_stat(self.path)
        except OSError as e:
            # Removed at the end (rmdir by us, or systemd collecting an empty scope; a read of
            # a removed cgroup's open file is ENODEV): its last figures stand.
            if e.errno not in (errno.ENOENT, errno.ENODEV):
                raise
            if self.method == SCOPE_METHOD and self._last_mono is not None:
                # systemd removes a scope's cgroup as soon as its last process exits, which
                # may be before the run's final reading: say what that reading missed
                ago = time.monotonic() - self._last_mono
                self.notes.append(
                    f"systemd removed the scope {self.path.name} when its last process exited,"
                    f" before the final reading: its CPU figure is that of the reading {ago:.2f}"
                    " s earlier (CPU used after it is not counted)"
                )
                self._last_mono = None  # said once
            return self._last
        self._last_mono = time.monotonic()
        lb = self._labels
        self._last = [
            counter("run_cgroup_cpu_seconds_total", st["usage_usec"] / 1e6, lb),
            counter("run_cgroup_cpu_user_seconds_total", st.get("user_usec", 0) / 1e6, lb),
            counter("run_cgroup_cpu_system_seconds_total", st.get("system_usec", 0) / 1e6, lb),
        ]
        return self._last

    def close(self) -> None:
        pass


def _is_scope_dir(path: Path) -> bool:
    return path.name.startswith("computewatch-") and path.name.endswith(".scope")


# --- a systemd transient scope ------------------------------------------------------------


class ScopeCgroup(RunCgroup):
    """The cgroup of the transient scope ``unit`` the command was started in. systemd made it
    and removes it once empty (``--collect``); :meth:`remove` only says who outlived the run."""

    method = SCOPE_METHOD

    def __init__(self, path: Path, unit: str) -> None:
        super().__init__(path, path.parent)
        self.unit = unit

    def join(self) -> str | None:
        return "a systemd scope is joined through systemd-run only"

    def remove(self) -> str | None:
        try:
            left = self.pids()
        except (OSError, ValueError):  # collected by systemd: nothing outlived the run
            return None
        if not left:
            return None
        shown = " ".join(map(str, left[:8])) + (" ..." if len(left) > 8 else "")
        return (
            f"{len(left)} process(es) of the run outlived it (pid {shown}); "
            f"they go on in the systemd scope {self.unit}"
        )


class SystemdRun(msgspec.Struct, frozen=True):
    """How to ask a reachable systemd manager for a transient scope."""

    path: str
    """The ``systemd-run`` executable."""
    user: bool
    """The user's manager (``--user``); else the system's (as root)."""
    version: int
    """systemd-run's version (``systemd-run --version``)."""

    def argv(self, unit: str, command: list[str]) -> list[str]:
        """``systemd-run ... --unit=UNIT -- COMMAND...``: a scope of its own, nothing printed,
        never a password prompt, the command's ``$`` left alone."""
        args = [self.path]
        if self.user:
            args.append("--user")
        args += ["--scope", "--quiet", "--collect", "--no-ask-password"]
        if self.version >= EXPAND_FLAG_SINCE:
            args.append("--expand-environment=no")
        return [*args, f"--unit={unit}", "--", *command]


_VERSION = re.compile(rb"^systemd (\d+)")


def find_systemd_run(
    env: Mapping[str, str], *, euid: int | None = None, run_root: str = "/run"
) -> SystemdRun | str | None:
    """The systemd-run to start a scope with; None when no systemd manager is reachable (no
    cost beyond a few ``stat`` calls); the reason as a string when one is but cannot be used.

    Reachable: as root, the system manager (``/run/systemd/system``, sd_booted(3)); else the
    user's manager, whose private socket is ``$XDG_RUNTIME_DIR/systemd/private``, which
    ``systemd-run --user`` connects to. ``env`` is the command's environment (its ``PATH``
    finds systemd-run)."""
    uid = os.geteuid() if euid is None else euid
    if uid == 0 and os.path.isdir(os.path.join(run_root, "systemd", "system")):
        user = False
    else:
        runtime = env.get("XDG_RUNTIME_DIR", "")
        if not runtime or not os.path.exists(os.path.join(runtime, "systemd", "private")):
            return None
        user = True
    path = shutil.which("systemd-run", path=env.get("PATH", os.defpath))
    if path is None:
        return "a systemd manager is running but systemd-run is not on PATH"
    try:
        out = subprocess.run(
            [path, "--version"], capture_output=True, timeout=SCOPE_START_TIMEOUT, check=False
        )
    except (OSError, subprocess.SubprocessError) as e:
        return f"{path} --version failed: {e}"
    m = _VERSION.match(out.stdout)
    if out.returncode != 0 or m is None:
        return f"{path} --version said no version (exit status {out.returncode})"
    return SystemdRun(path, user, int(m.group(1)))


class ScopeStart(msgspec.Struct, frozen=True):
    """What became of systemd-run's process (:func:`await_scope_exec`)."""

    started: bool
    """The command runs (or ran) in the process: never start it again. False: it never
    started, the process is reaped, and the command is the caller's to start."""
    scope: ScopeCgroup | None = None
    """The scope's cgroup, when the command is in one whose ``cpu.stat`` is readable."""
    note: str | None = None
    """Why the scope does not count the CPU, or why the command was started without it."""


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


def _state_comm(procfs_root: str, pid: int) -> tuple[str, bytes] | None:
    """The state letter and comm of ``/proc/<pid>/stat`` (a zombie's too), or None."""
    raw = _read(f"{procfs_root}/{pid}/stat")
    if raw is None or b"(" not in raw:
        return None
    head, _, tail = raw.rpartition(b")")
    comm = head.partition(b"(")[2]
    state = tail.split()[0].decode("ascii", "replace") if tail.split() else "?"
    return state, comm


def _exited(pid: int) -> os.waitid_result | None:
    """The exit of our child ``pid`` without reaping it (WNOWAIT), or None while it runs."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return None


_INTERRUPTS = frozenset({signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT})


def _reap(pid: int) -> int:
    while True:
        try:
            return os.waitpid(pid, 0)[1]
        except InterruptedError:
            continue
        except ChildProcessError:
            return 255 << 8


def _status_text(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"killed by {signal.Signals(os.WTERMSIG(status)).name}"
    return f"exit status {os.waitstatus_to_exitcode(status)}"


def await_scope_exec(
    pid: int,
    marker: str,
    unit: str,
    launcher_comm: bytes,
    command_comm: bytes,
    *,
    cgroup_root: str = DEFAULT_CGROUP_ROOT,
    procfs_root: str = "/proc",
    timeout: float = SCOPE_START_TIMEOUT,
) -> ScopeStart:
    """Watch our child ``pid``, a systemd-run given ``marker`` (its ``--unit=...`` argument),
    until it has exec'd the command: ``marker`` is gone from its command line (a live process)
    or its comm is no longer systemd-run's ``launcher_comm`` (one that already exited: a zombie
    keeps its comm, not its command line). One that exits before, with a status of its own, is
    reaped: the command never ran. One still before its exec after ``timeout`` is stopped
    (SIGSTOP) and, seen stopped before its exec with no other process in its scope, killed:
    it cannot exec once stopped, so the command never ran; seen after its exec, continued.
    Never a started command taken for an unstarted one: where the two comms are the same, an
    exited process counts as having run the command."""
    deadline = time.monotonic() + timeout
    nap = 0.0005
    while True:
        done = _exited(pid)
        if done is not None:
            return _after_exit(pid, done, launcher_comm, command_comm, procfs_root)
        argv = _read(f"{procfs_root}/{pid}/cmdline")
        # empty: mid-exec (the new image's arguments not yet set up) or exited just now
        if argv and marker.encode() not in argv.split(b"\0"):
            return _in_scope(pid, unit, cgroup_root, procfs_root)
        if time.monotonic() >= deadline:
            return _stop_hung(pid, marker, unit, launcher_comm, command_comm, cgroup_root,
                              procfs_root, timeout)  # fmt: skip
        time.sleep(nap)
        nap = min(nap * 2, 0.005)


def _after_exit(
    pid: int, done: os.waitid_result, launcher: bytes, command: bytes, procfs_root: str
) -> ScopeStart:
    sc = _state_comm(procfs_root, pid)
    comm = sc[1] if sc is not None else launcher
    if comm != launcher or launcher == command:  # it exec'd the command, which already ended
        return ScopeStart(True, None, "the command ended before its scope's cgroup was read")
    if done.si_code in (os.CLD_KILLED, os.CLD_DUMPED) and done.si_status in _INTERRUPTS:
        # Ctrl-C (or a kill) while the scope was being made: the run ends as interrupted,
        # without the command, as it would have had the command received it first
        sig = signal.Signals(done.si_status).name
        return ScopeStart(True, None, f"systemd-run was killed by {sig} before the command ran")
    status = _reap(pid)  # failed, or crashed: the command is the caller's to start
    return ScopeStart(False, None, f"systemd-run failed ({_status_text(status)})")


def _stop_hung(
    pid: int,
    marker: str,
    unit: str,
    launcher: bytes,
    command: bytes,
    cgroup_root: str,
    procfs_root: str,
    timeout: float,
) -> ScopeStart:
    try:
        os.kill(pid, signal.SIGSTOP)
    except ProcessLookupError:
        pass
    until = time.monotonic() + 1.0
    while True:
        done = _exited(pid)
        if done is not None:
            return _after_exit(pid, done, launcher, command, procfs_root)
        sc = _state_comm(procfs_root, pid)
        if sc is not None and sc[0] in ("T", "t"):
            break
        if time.monotonic() >= until:  # not stopping (in the kernel): let it be the command
            os.kill(pid, signal.SIGCONT)
            return ScopeStart(True, None, f"systemd-run did not stop within 1 s after {timeout} s")
        time.sleep(0.001)
    argv = _read(f"{procfs_root}/{pid}/cmdline") or b""
    path = own_cgroup(procfs_root, pid) or ""
    others = False
    if path.endswith(f"/{unit}.scope"):
        for root in _v2_roots(cgroup_root):
            procs = _read(f"{root}{path}/cgroup.procs")
            if procs is not None:
                others = any(x != str(pid).encode() for x in procs.split())
                break
    if marker.encode() in argv.split(b"\0") and not others:
        os.kill(pid, signal.SIGKILL)  # stopped before its exec: the command never ran
        _reap(pid)
        return ScopeStart(False, None, f"systemd-run did not start the command within {timeout} s")
    os.kill(pid, signal.SIGCONT)
    return _in_scope(pid, unit, cgroup_root, procfs_root)


def _v2_roots(cgroup_root: str) -> list[str]:
    """The cgroup-v2 mount: ``cgroup_root`` (unified), or its ``unified`` (systemd's hybrid)."""
    return [r for r in (cgroup_root, os.path.join(cgroup_root, "unified"))
            if os.path.isfile(os.path.join(r, "cgroup.controllers"))]  # fmt: skip


def _in_scope(pid: int, unit: str, cgroup_root: str, procfs_root: str) -> ScopeStart:
    made = scope_cgroup(pid, unit, cgroup_root=cgroup_root, procfs_root=procfs_root)
    if isinstance(made, str):
        return ScopeStart(True, None, made)
    return ScopeStart(True, made, None)


def scope_cgroup(
    pid: int, unit: str, *, cgroup_root: str = DEFAULT_CGROUP_ROOT, procfs_root: str = "/proc"
) -> ScopeCgroup | str:
    """The cgroup of the scope ``unit`` that ``pid`` is in, from ``/proc/<pid>/cgroup``; the
    reason as a string when it is in no such scope or its ``cpu.stat`` is unreadable."""
    path = own_cgroup(procfs_root, pid)
    if path is None:
        return "the command ended before its scope's cgroup was read"
    if not path.endswith(f"/{unit}.scope"):
        return f"the command is not in the scope {unit}.scope but in {path}"
    roots = _v2_roots(cgroup_root)
    if not roots:
        return f"no cgroup v2 mounted at {cgroup_root} to read the scope {unit}.scope"
    why = ""
    for root in roots:
        d = Path(root) / path.lstrip("/")
        try:
            read_cpu_stat(d)
        except (OSError, ValueError) as e:
            why = f"cpu.stat of {d} unreadable: {e}"
            continue
        return ScopeCgroup(d, unit)
    return why
