"""procfs, read once per tick: the parser of ``/proc/PID/stat`` and friends, and the cache of
process handles shared by the process-tree source, ``computewatch top`` and the node agent.
A process's environment is read by :func:`read_environ` alone (``computewatch top``'s run ids,
``computewatch profile PID``, the agent's attribution).

Every function takes the procfs root (``/proc`` on a real host, a recorded tree in tests).

A process's ``stat`` is opened once and re-read with ``pread``: procfs regenerates the text on a
read at offset 0, and a descriptor stays bound to its process, so a reused PID can never be
mistaken for it (a read of a reaped process fails with ESRCH). ``/proc`` is listed only when a
process was born since the last listing (:class:`PidBirths`).
"""

from __future__ import annotations

import contextlib
import errno
import os
import resource
from collections.abc import Iterable, Iterator, Sequence
from typing import Generic, Protocol, TypeVar

from computewatch.escape import decode_text

__all__ = [
    "CLK_TCK",
    "ENVIRON_LIMIT",
    "IDLE_CPU_MODES",
    "PAGE_SIZE",
    "PF_KTHREAD",
    "PidBirths",
    "ProcessCache",
    "StatHandle",
    "close_fd",
    "environ_values",
    "mid_exec",
    "open_ro",
    "parse_stat",
    "pread_all",
    "read_cmdline",
    "read_environ",
    "read_file",
    "split_stat",
    "stat_cpu_seconds",
    "stat_fields",
    "status_effective_uid",
    "status_uid",
]

# /proc/PID/stat times are in USER_HZ units (proc(5)), which sysconf reports as SC_CLK_TCK.
CLK_TCK = float(os.sysconf("SC_CLK_TCK"))
PAGE_SIZE = int(os.sysconf("SC_PAGE_SIZE"))
PF_KTHREAD = 0x00200000  # include/linux/sched.h: the flags field of stat marks kernel threads
# proc(5), /proc/stat: the CPU modes that are not busy time.
IDLE_CPU_MODES = frozenset({"idle", "iowait"})

# Indexes into the fields of /proc/PID/stat after the command name (proc(5) numbers them from
# 1 with pid and comm first, so field n of proc(5) is index n - 3 here).
STATE, PPID, FLAGS = 0, 1, 6
UTIME, STIME, CUTIME, CSTIME = 11, 12, 13, 14
NUM_THREADS, STARTTIME, RSS = 17, 19, 21

ENVIRON_LIMIT = 1 << 20
"""The most of ``/proc/PID/environ`` read (1 MiB): an environment counts against ARG_MAX, a few
hundred KiB on Linux; a larger one is searched in its first MiB only."""

_CHUNK = 65536
_STAT_MAX = 4096


# --- reading files ---------------------------------------------------------------------------


def open_ro(path: str) -> int | None:
    """A read-only descriptor for ``path``, or None when it cannot be opened."""
    try:
        return os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None


def close_fd(fd: int) -> None:
    """Close ``fd`` unless it is -1; an error (already closed) is ignored."""
    if fd >= 0:
        with contextlib.suppress(OSError):
            os.close(fd)


def pread_all(fd: int, records: bool = False) -> bytes:
    """The whole current text of a procfs/sysfs/cgroupfs file (or of a plain file).

    A file printed as one seq_file record (/proc/stat, /proc/meminfo, cgroup files) comes back
    whole from one read that is big enough. A file of many records (/proc/diskstats,
    /proc/net/dev) comes back at most one seq_file buffer (a page) per read, however large the
    read (fs/seq_file.c, ``seq_read_iter``), so ``records=True`` reads on until end of file.
    """
    data = os.pread(fd, _CHUNK, 0)
    if not data or (len(data) < _CHUNK and not records):
        return data
    parts = [data]
    offset = len(data)
    while more := os.pread(fd, _CHUNK, offset):
        parts.append(more)
        offset += len(more)
    return b"".join(parts) if len(parts) > 1 else data


def read_file(path: str, limit: int = -1) -> bytes | None:
    """A file's bytes (at most ``limit``), read once; None when it cannot be read."""
    try:
        with open(path, "rb") as f:
            return f.read(limit)
    except OSError:
        return None


def read_cmdline(procfs_root: str, pid: int, limit: int = -1) -> list[str]:
    """The arguments of ``/proc/PID/cmdline`` (empty for a kernel thread, a zombie, or when
    the file cannot be read)."""
    raw = read_file(os.path.join(procfs_root, str(pid), "cmdline"), limit)
    return [decode_text(a) for a in (raw or b"").split(b"\0") if a]


def read_environ(
    procfs_root: str, pid: int, names: Iterable[str], limit: int = ENVIRON_LIMIT
) -> dict[str, str] | None:
    """The variables ``names`` of a process's initial environment (``/proc/PID/environ``, its
    first ``limit`` bytes), as :func:`environ_values` gives them; nothing else is kept.

    None when the kernel refuses the read: another user's process without CAP_SYS_PTRACE
    (proc(5): ptrace access mode ``PTRACE_MODE_READ_FSCREDS``, EACCES). A process without an
    address space (a kernel thread, a zombie) reads empty, and one gone before the open (ENOENT)
    or during it (ESRCH, fs/proc/base.c ``proc_mem_open``) has no environment either: ``{}``.
    """
    try:
        with open(os.path.join(procfs_root, str(pid), "environ"), "rb") as f:
            raw = f.read(limit)
    except OSError as e:
        return {} if e.errno in (errno.ENOENT, errno.ESRCH) else None
    return environ_values(raw, names)


# --- parsing ---------------------------------------------------------------------------------


def environ_values(raw: bytes, names: Iterable[str]) -> dict[str, str]:
    """The variables ``names`` of an environment image (``NAME=value`` entries separated by
    NUL bytes, as ``/proc/PID/environ``), each value decoded by
    :func:`computewatch.escape.decode_text` (an undecodable byte as ``\\xNN``).

    A name absent from the image is absent from the result. A name given twice keeps its first
    entry, the value getenv(3) returns. An entry cut by a read limit keeps what was read.
    """
    data = b"\0" + raw
    out: dict[str, str] = {}
    for name in names:
        key = b"\0" + os.fsencode(name) + b"="
        i = data.find(key)
        if i >= 0:
            start = i + len(key)
            end = data.find(b"\0", start)
            out[name] = decode_text(data[start : end if end >= 0 else len(data)])
    return out


def split_stat(raw: bytes) -> tuple[bytes, list[bytes]]:
    """A /proc/PID/stat text as ``(comm, fields from state on)``."""
    # The command name may contain spaces and ')': it ends at the last ')' (proc(5)).
    close = raw.rindex(b")")
    return raw[raw.index(b"(") + 1 : close], raw[close + 2 :].split()


def parse_stat(raw: bytes) -> tuple[str, list[bytes]]:
    """A /proc/PID/stat text as the command name (decoded) and the fields after it."""
    comm, fields = split_stat(raw)
    return decode_text(comm), fields


def mid_exec(fields: list[bytes], cmdline: bytes | Sequence[str] | None) -> bool:
    """Whether a process (its stat ``fields``, and its ``cmdline`` as read: bytes, arguments,
    or None when unreadable) is in the middle of an exec: its new image's argument and
    environment bounds are not set yet, so its command line and environment read empty. A
    zombie or a kernel thread reads so for good and is not; an unreadable file says nothing.
    Whatever is read of such a process once and kept (its job, its run id) is read again later.
    """
    return (
        cmdline is not None
        and not cmdline
        and fields[STATE] != b"Z"
        and not int(fields[FLAGS]) & PF_KTHREAD
    )


def stat_cpu_seconds(fields: list[bytes], *, children: bool = True) -> float:
    """utime + stime (+ cutime + cstime of waited-for children) in seconds."""
    ticks = int(fields[UTIME]) + int(fields[STIME])
    if children:
        ticks += int(fields[CUTIME]) + int(fields[CSTIME])
    return ticks / CLK_TCK


def stat_fields(fd: int) -> list[bytes] | None:
    """The fields of /proc/PID/stat after the command name (``state`` first), read through an
    open descriptor; None when the process is gone (unreadable, empty, or state X: dead, being
    removed)."""
    try:
        raw = os.pread(fd, _STAT_MAX, 0)
    except OSError:
        return None
    return _live_fields(raw)


def _live_fields(raw: bytes | None) -> list[bytes] | None:
    if not raw:
        return None
    try:
        rest = split_stat(raw)[1]
    except ValueError:
        return None
    return None if not rest or rest[STATE] == b"X" else rest


def status_uid(status: bytes) -> int:
    """The real UID from the ``Uid:`` line of /proc/PID/status; ValueError when absent."""
    i = status.find(b"\nUid:")
    if i < 0:
        raise ValueError("no Uid line in status")
    end = status.find(b"\n", i + 5)
    return int(status[i + 5 : end if end >= 0 else len(status)].split()[0])


def status_effective_uid(status: bytes) -> int:
    """The effective UID (the second figure of the ``Uid:`` line), as ps's USER shows."""
    i = status.find(b"\nUid:")
    if i < 0:
        raise ValueError("no Uid line in status")
    try:
        return int(status[i + 5 :].split(None, 2)[1])
    except IndexError:
        raise ValueError("short Uid line in status") from None


# --- handles and the cache -------------------------------------------------------------------


class StatHandle:
    """``/proc/PID/stat`` of one process: an open descriptor re-read with ``pread``, or (past
    a descriptor budget) the path, read afresh each time."""

    __slots__ = ("fd", "path", "pid")

    def __init__(self, pid: int, path: str, fd: int) -> None:
        self.pid = pid
        self.path = path
        self.fd = fd  # -1: read by path

    def read(self) -> bytes | None:
        """The current text; None when the process is gone (ESRCH, or nothing to read)."""
        if self.fd >= 0:
            try:
                return os.pread(self.fd, _STAT_MAX, 0) or None
            except OSError:  # ESRCH: the process has been reaped
                return None
        return read_file(self.path, _STAT_MAX) or None

    def fields(self) -> list[bytes] | None:
        """The fields after the command name (``state`` first); None when the process is gone
        (unreadable, empty, or state X: dead, being removed)."""
        return _live_fields(self.read())


class PidBirths:
    """Whether a process was born since the last look. The last field of /proc/loadavg is the
    most recently created PID of this PID namespace (proc(5)): while it has not moved, no
    process was born, and a listing of /proc can be skipped. One descriptor, kept open."""

    def __init__(self, procfs_root: str) -> None:
        self._path = os.path.join(procfs_root, "loadavg")
        self._fd: int | None = None
        self._seen: int | None = None

    def last_pid(self) -> int | None:
        """The most recently created PID, or None where loadavg cannot be read."""
        if self._fd is None:
            fd = open_ro(self._path)
            self._fd = -1 if fd is None else fd
        if self._fd < 0:
            return None
        try:
            return int(os.pread(self._fd, 128, 0).split()[4])
        except (OSError, ValueError, IndexError):
            return None

    def moved(self) -> bool:
        """False only when the last PID is known and the same as at the previous call."""
        last = self.last_pid()
        if last is not None and last == self._seen:
            return False
        self._seen = last
        return True

    def close(self) -> None:
        if self._fd is not None:
            close_fd(self._fd)
        self._fd = None


class _HasStat(Protocol):
    stat: StatHandle


P = TypeVar("P", bound=_HasStat)


def default_fd_budget() -> int:
    """Half the soft ``RLIMIT_NOFILE``, at most 4096: room left for everything else."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return 4096 if soft == resource.RLIM_INFINITY else min(4096, soft // 2)


class ProcessCache(Generic[P]):
    """The processes a reader follows, by PID, each record holding its :class:`StatHandle`;
    the PIDs it chose not to follow (``foreign``, until they vanish); and the listing of
    ``/proc``, redone only when a process was born.

    At most ``max_open`` stat descriptors stay open (None: no limit); processes past it are
    read by path (and a reader must then check the start time to tell a reused PID).
    """

    def __init__(self, procfs_root: str = "/proc", *, max_open: int | None = None) -> None:
        self.root = procfs_root
        self.procs: dict[int, P] = {}
        self.foreign: set[int] = set()
        self._births = PidBirths(procfs_root)
        self._max_open = max_open
        self._open = 0

    def __len__(self) -> int:
        return len(self.procs)

    def __iter__(self) -> Iterator[P]:
        return iter(list(self.procs.values()))

    def pids(self) -> set[int]:
        """Every PID under the root now (empty when it cannot be listed: OSError is raised)."""
        return {int(e) for e in os.listdir(self.root) if e.isdigit()}

    def new_pids(self, *, force: bool = False) -> set[int] | None:
        """PIDs neither followed nor foreign; None (no listing made) when no process was born
        since the last call, unless ``force``. Raises OSError when the root cannot be listed."""
        if not self._births.moved() and not force:
            return None
        present = self.pids()
        self.foreign &= present
        return present - self.foreign - self.procs.keys()

    def open_stat(self, pid: int) -> StatHandle | None:
        """A handle on ``/proc/PID/stat``; None when the process is gone already."""
        path = os.path.join(self.root, str(pid), "stat")
        if self._max_open is not None and self._open >= self._max_open:
            return StatHandle(pid, path, -1)
        fd = open_ro(path)
        if fd is None:
            return None
        self._open += 1
        return StatHandle(pid, path, fd)

    def release(self, handle: StatHandle) -> None:
        """Close the handle's descriptor (it then reads by path); idempotent."""
        if handle.fd >= 0:
            close_fd(handle.fd)
            handle.fd = -1
            self._open -= 1

    def drop(self, p: P) -> None:
        """Stop following the process of record ``p``: its stat handle is closed."""
        self.release(p.stat)
        if self.procs.get(p.stat.pid) is p:
            del self.procs[p.stat.pid]

    def close(self) -> None:
        """Close every handle and the births descriptor; the cache is empty after."""
        for p in self.procs.values():
            self.release(p.stat)
        self.procs.clear()
        self.foreign.clear()
        self._births.close()
