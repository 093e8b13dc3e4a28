"""The monitored process tree: a root process and every descendant, from procfs.

Reads ``/proc/PID/{stat,io,status}`` through file descriptors opened once per process and
re-read with ``pread`` (a cached handle: procfs regenerates the text on a read at offset 0, and a
descriptor stays bound to its process, so a reused PID can never be mistaken for it).

CPU accounting of the whole tree (counter ``tree_cpu_seconds_total``):
  sum over live tree processes of utime + stime + cutime + cstime, plus the last-seen total of
  every tree process that was reaped by a process outside the tree (an orphan reaped by init, or
  the root reaped by the supervisor). ``cutime``/``cstime`` are the times of a process's waited-for
  children (proc(5)), so a worker that lives less than one tick is still counted once its parent
  reaps it, and a worker seen alive and then reaped moves from its own entry into its parent's
  ``cutime`` without being counted twice.
I/O bytes of exited processes stay counted at their last-seen value (procfs keeps no cumulative
I/O of reaped children, so a process that lives less than one tick has its I/O missed).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Collection
from dataclasses import dataclass, field

from computewatch.readings import Labels, Reading, counter, gauge, labels
from computewatch.sources.base import SourceUnavailable

_CLK_TCK = float(os.sysconf("SC_CLK_TCK"))
_PAGE = float(os.sysconf("SC_PAGE_SIZE"))
HWM_SECONDS = 1.0


@dataclass(slots=True)
class _Proc:
    pid: int
    ppid: int
    name: str
    stat_fd: int
    io_fd: int  # -1 when /proc/PID/io is not readable
    status_fd: int
    lbl: Labels
    baseline: float = 0.0
    cpu_total: float = 0.0  # utime+stime+cutime+cstime seconds, minus baseline
    read_bytes: float = 0.0
    write_bytes: float = 0.0
    io_base: tuple[float, float] = (0.0, 0.0)
    alive: bool = True
    hwm_read_at: float = -math.inf


@dataclass(slots=True)
class ProcessInfo:
    """What the tree source learned about one process, for the run's process table."""

    pid: int
    ppid: int
    name: str
    cmdline: list[str] = field(default_factory=list)


def _close(fd: int) -> None:
    if fd >= 0:
        try:
            os.close(fd)
        except OSError:
            pass


def stat_fields(fd: int) -> list[bytes] | None:
    """The fields of /proc/PID/stat after the command name (proc(5): ``state`` first), read
    through an open descriptor; None when the process is gone (unreadable, empty, or state X:
    dead, being removed)."""
    try:
        raw = os.pread(fd, 4096, 0)
    except OSError:
        return None
    if not raw:
        return None
    rest = raw[raw.rindex(b")") + 2 :].split()
    return None if rest[0] == b"X" else rest


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
            try:
                self._fd = os.open(self._path, os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                self._fd = -1
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
            _close(self._fd)
        self._fd = None


def parse_stat(raw: bytes) -> tuple[str, list[bytes]]:
    """A /proc/PID/stat text as the command name and the fields after it."""
    # The command name may contain spaces and ')': it ends at the last ')' (proc(5)).
    close = raw.rindex(b")")
    name = raw[raw.index(b"(") + 1 : close].decode("utf-8", "replace")
    return name, raw[close + 2 :].split()


class ProcessTreeSource:
    """Samples a process and all its descendants, including ones started later."""

    name = "process"

    def __init__(
        self,
        root_pid: int,
        procfs_root: str = "/proc",
        *,
        exclude_pids: frozenset[int] = frozenset(),
        count_existing_usage: bool = False,
        per_process: bool = True,
        root_cpu_baseline: float | None = None,
    ) -> None:
        """``count_existing_usage=False`` counts CPU and I/O from the moment monitoring starts:
        usage that processes already present had accumulated before is taken as a baseline
        (right for ``track()`` inside a long-lived interpreter; a fresh command starts at 0).
        ``root_cpu_baseline`` overrides the root's CPU baseline with a figure taken earlier
        (``track()`` passes its process's CPU times at the moment the block started, so the
        CPU used before the sampler's first tick still counts)."""
        self._root = procfs_root
        self.root_pid = root_pid
        self._exclude = exclude_pids
        self._per_process = per_process
        self._count_existing = count_existing_usage
        self._root_cpu_baseline = root_cpu_baseline
        self._procs: dict[int, _Proc] = {}
        self._foreign: set[int] = set()
        self._exited_cpu = 0.0
        self._exited_read = 0.0
        self._exited_write = 0.0
        self._peak_hwm = 0.0
        self._final_root_cpu: float | None = None
        self._root_seen = False
        self._births = PidBirths(procfs_root)
        self._first = True
        self.new_processes: list[ProcessInfo] = []
        if not os.path.exists(os.path.join(procfs_root, str(root_pid), "stat")):
            raise SourceUnavailable(f"process {root_pid} not found under {procfs_root}")

    # -- public -------------------------------------------------------------------------------
    @property
    def pids(self) -> list[int]:
        """PIDs of the tree's live processes at the last read."""
        return [p.pid for p in self._procs.values() if p.alive]

    def pids_view(self) -> Collection[int]:
        """A live, allocation-free view of the tree's PIDs (for per-process GPU attribution)."""
        return self._procs.keys()

    def set_final_root_cpu(self, seconds: float) -> None:
        """The root's exact CPU seconds (with its reaped children) from ``wait4``, used once
        the root has gone instead of its last-seen value."""
        self._final_root_cpu = seconds

    def note_peak_rss(self, nbytes: float) -> None:
        """Raise the tree's peak RSS with a figure known elsewhere (``ru_maxrss`` of the root)."""
        self._peak_hwm = max(self._peak_hwm, nbytes)

    def read(self) -> list[Reading]:
        self._discover()
        now = time.monotonic()
        out: list[Reading] = []
        cpu = rd = wr = 0.0
        rss_sum = 0.0
        threads = 0.0
        nlive = 0
        gone: list[_Proc] = []
        per = self._per_process
        for p in self._procs.values():
            rest = stat_fields(p.stat_fd)
            if rest is None:
                gone.append(p)
                continue
            own = (int(rest[11]) + int(rest[12])) / _CLK_TCK
            total = own + (int(rest[13]) + int(rest[14])) / _CLK_TCK - p.baseline
            p.cpu_total = total
            p.ppid = int(rest[1])  # follows reparenting: an orphan's parent becomes init
            nthreads = float(rest[17])
            rss = int(rest[21]) * _PAGE
            cpu += total
            rss_sum += rss
            threads += nthreads
            nlive += 1
            if p.io_fd >= 0:
                try:
                    io = os.pread(p.io_fd, 1024, 0).split(b"\n")
                    # Order fixed by the kernel (proc(5)): rchar wchar syscr syscw read_bytes
                    # write_bytes cancelled_write_bytes.
                    p.read_bytes = float(io[4][12:]) - p.io_base[0]
                    p.write_bytes = float(io[5][13:]) - p.io_base[1]
                except (OSError, ValueError, IndexError):
                    pass
            rd += p.read_bytes
            wr += p.write_bytes
            # VmHWM only rises, and /proc/PID/status is the costliest file here (about twice
            # stat): read it at most once per HWM_SECONDS per process (and on first sight).
            if now - p.hwm_read_at >= HWM_SECONDS:
                p.hwm_read_at = now
                try:
                    status = os.pread(p.status_fd, 4096, 0)
                    i = status.find(b"VmHWM:")
                    if i >= 0:
                        hwm = float(status[i + 6 : status.index(b"kB", i)]) * 1024.0
                        self._peak_hwm = max(self._peak_hwm, hwm)
                except (OSError, ValueError):
                    pass
            if per:
                lbl = p.lbl
                out.append(counter("process_cpu_seconds_total", own, lbl))
                out.append(gauge("process_resident_memory_bytes", rss, lbl))
                out.append(gauge("process_threads", nthreads, lbl))
                if p.io_fd >= 0:
                    out.append(counter("process_read_bytes_total", p.read_bytes, lbl))
                    out.append(counter("process_written_bytes_total", p.write_bytes, lbl))
        alive_before = set(self._procs)
        for p in gone:  # parents before children: _procs is in adoption order
            self._retire(p, alive_before)
        cpu += self._exited_cpu
        rd += self._exited_read
        wr += self._exited_write
        self._first = False
        out.append(counter("tree_cpu_seconds_total", cpu))
        out.append(gauge("tree_resident_memory_bytes", rss_sum))
        out.append(gauge("tree_process_peak_resident_memory_bytes", max(self._peak_hwm, 0.0)))
        out.append(gauge("tree_processes", nlive))
        out.append(gauge("tree_threads", threads))
        out.append(counter("tree_read_bytes_total", rd))
        out.append(counter("tree_written_bytes_total", wr))
        return out

    def close(self) -> None:
        self._births.close()
        for p in self._procs.values():
            _close(p.stat_fd)
            _close(p.io_fd)
            _close(p.status_fd)
        self._procs.clear()

    # -- internals ----------------------------------------------------------------------------
    def _retire(self, p: _Proc, alive_before: set[int]) -> None:
        """Account for a vanished process. If its parent at our last sight was a tree process
        alive at the previous read, that parent reaped it and its times are in the parent's
        cutime/cstime (for the root, in the supervisor's wait4 figures): counting them here
        too would count them twice. Otherwise (orphaned, reaped by init or a subreaper) its
        last-seen total is kept."""
        p.alive = False
        del self._procs[p.pid]
        _close(p.stat_fd)
        _close(p.io_fd)
        _close(p.status_fd)
        if p.pid == self.root_pid and self._final_root_cpu is not None:
            p.cpu_total = self._final_root_cpu - p.baseline
        if p.ppid not in alive_before:
            self._exited_cpu += p.cpu_total
            if p.pid != self.root_pid or self._final_root_cpu is None:
                # A last-seen figure holds none of the children that vanish with it in this
                # read (reaped since, or orphaned): their own last-seen figures must count.
                alive_before.discard(p.pid)
        self._exited_read += p.read_bytes
        self._exited_write += p.write_bytes

    def _discover(self) -> None:
        """Find new descendants: one directory listing, and a stat read only for PIDs never
        seen before (PIDs known to be outside the tree are remembered until they vanish)."""
        root = self._root
        # The listing is the costliest part of a tick on a busy host: skipped when no process
        # was born since the last one.
        if not self._births.moved() and not self._first:
            return
        present = {int(e) for e in os.listdir(root) if e.isdigit()}
        self._foreign &= present
        candidates = present - self._foreign - self._procs.keys()
        if not candidates and not self._first:
            return
        parents: dict[int, tuple[int, str, bytes]] = {}
        for pid in candidates:
            try:
                with open(os.path.join(root, str(pid), "stat"), "rb") as f:
                    raw = f.read()
                name, rest = parse_stat(raw)
                parents[pid] = (int(rest[1]), name, raw)
            except (OSError, ValueError, IndexError):
                continue
        tree = {p for p in self._procs if self._procs[p].alive}
        if self.root_pid not in tree and self._first and self.root_pid in parents:
            self._adopt(self.root_pid, parents.pop(self.root_pid))
            tree.add(self.root_pid)
        # Resolve chains in any PID order (PIDs wrap around, a child may have a lower PID).
        changed = True
        while changed:
            changed = False
            for pid in list(parents):
                ppid = parents[pid][0]
                if ppid in tree and pid not in self._exclude:
                    self._adopt(pid, parents.pop(pid))
                    tree.add(pid)
                    changed = True
        self._foreign.update(parents)

    def _adopt(self, pid: int, info: tuple[int, str, bytes]) -> None:
        ppid, name, _raw = info
        base = os.path.join(self._root, str(pid))
        try:
            stat_fd = os.open(os.path.join(base, "stat"), os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return
        try:
            io_fd = os.open(os.path.join(base, "io"), os.O_RDONLY | os.O_CLOEXEC)
            os.pread(io_fd, 1024, 0)
        except OSError:
            io_fd = -1
        try:
            status_fd = os.open(os.path.join(base, "status"), os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            status_fd = -1
        p = _Proc(pid, ppid, name, stat_fd, io_fd, status_fd, labels(pid=pid, name=name))
        if self._first and not self._count_existing:
            try:
                rest = parse_stat(os.pread(stat_fd, 4096, 0))[1]
                p.baseline = sum(int(x) for x in rest[11:15]) / _CLK_TCK
                if pid == self.root_pid and self._root_cpu_baseline is not None:
                    p.baseline = min(p.baseline, self._root_cpu_baseline)
                if io_fd >= 0:
                    io = os.pread(io_fd, 1024, 0).split(b"\n")
                    p.io_base = (float(io[4][12:]), float(io[5][13:]))
            except (OSError, ValueError, IndexError):
                pass
        self._procs[pid] = p
        if pid == self.root_pid:
            self._root_seen = True
        cmdline: list[str] = []
        try:
            with open(os.path.join(base, "cmdline"), "rb") as f:
                cmdline = [a.decode("utf-8", "replace") for a in f.read().split(b"\0") if a]
        except OSError:
            pass
        self.new_processes.append(ProcessInfo(pid, ppid, name, cmdline))
