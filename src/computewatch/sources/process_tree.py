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
from dataclasses import dataclass

import msgspec

from computewatch.readings import Labels, Reading, counter, gauge, labels
from computewatch.sources.base import SourceUnavailable
from computewatch.sources.procfs import (
    PAGE_SIZE,
    ProcessCache,
    StatHandle,
    close_fd,
    open_ro,
    parse_stat,
    read_cmdline,
    read_file,
    stat_cpu_seconds,
)

__all__ = ["HWM_SECONDS", "ProcessInfo", "ProcessTreeSource"]

HWM_SECONDS = 1.0


# A dataclass, not a msgspec.Struct: its fields are written on every tick, and CPython
# specialises attribute stores only for the plain __setattr__ a dataclass keeps (a Struct's
# are about 2.5 times slower).
@dataclass(slots=True)
class _Proc:
    pid: int
    ppid: int
    name: str
    stat: StatHandle
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


class ProcessInfo(msgspec.Struct):
    """What the tree source learned about one process, for the run's process table."""

    pid: int
    ppid: int
    name: str
    cmdline: list[str] = msgspec.field(default_factory=list)


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
        self._cache: ProcessCache[_Proc] = ProcessCache(procfs_root)
        self._procs = self._cache.procs
        self._exited_cpu = 0.0
        self._exited_read = 0.0
        self._exited_write = 0.0
        self._peak_hwm = 0.0
        self._final_root_cpu: float | None = None
        # (CPU seconds counted, baseline) when the root was retired on its last-seen figure,
        # with those of its children that vanished in the same read
        self._root_retired: tuple[float, float] | None = None
        self._root_seen = False
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
        the root has gone instead of its last-seen value. When a read already retired the
        root (reaped between the supervisor's ``wait4`` and this call, with its figure up to a
        tick old), the difference is added to the tree's total now."""
        self._final_root_cpu = seconds
        if self._root_retired is not None:
            counted, baseline = self._root_retired
            self._root_retired = None
            missing = seconds - baseline - counted
            if missing > 0:  # never below what the reads saw (an orphan's own figure counted)
                self._exited_cpu += missing

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
            rest = p.stat.fields()
            if rest is None:
                gone.append(p)
                continue
            own = stat_cpu_seconds(rest, children=False)
            total = stat_cpu_seconds(rest) - p.baseline
            p.cpu_total = total
            p.ppid = int(rest[1])  # follows reparenting: an orphan's parent becomes init
            nthreads = float(rest[17])
            rss = float(int(rest[21]) * PAGE_SIZE)
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
        before = self._exited_cpu
        root_gone = False
        for p in gone:  # parents before children: _procs is in adoption order
            root_gone = root_gone or p.pid == self.root_pid
            self._retire(p, alive_before)
        if root_gone and self._final_root_cpu is None:
            root = next(p for p in gone if p.pid == self.root_pid)
            self._root_retired = (self._exited_cpu - before, root.baseline)
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
        for p in self._procs.values():
            close_fd(p.io_fd)
            close_fd(p.status_fd)
        self._cache.close()

    # -- internals ----------------------------------------------------------------------------
    def _retire(self, p: _Proc, alive_before: set[int]) -> None:
        """Account for a vanished process. If its parent at our last sight was a tree process
        alive at the previous read, that parent reaped it and its times are in the parent's
        cutime/cstime (for the root, in the supervisor's wait4 figures): counting them here
        too would count them twice. Otherwise (orphaned, reaped by init or a subreaper) its
        last-seen total is kept."""
        p.alive = False
        self._cache.drop(p)
        close_fd(p.io_fd)
        close_fd(p.status_fd)
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
        # The listing is the costliest part of a tick on a busy host: skipped when no process
        # was born since the last one.
        candidates = self._cache.new_pids(force=self._first)
        if candidates is None or (not candidates and not self._first):
            return
        parents: dict[int, tuple[int, str, bytes]] = {}
        for pid in candidates:
            raw = read_file(os.path.join(self._root, str(pid), "stat"))
            if raw is None:
                continue
            try:
                name, rest = parse_stat(raw)
                parents[pid] = (int(rest[1]), name, raw)
            except (ValueError, IndexError):
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
        self._cache.foreign.update(parents)

    def _adopt(self, pid: int, info: tuple[int, str, bytes]) -> None:
        ppid, name, _raw = info
        base = os.path.join(self._root, str(pid))
        stat = self._cache.open_stat(pid)
        if stat is None:
            return
        io_fd = open_ro(os.path.join(base, "io"))
        if io_fd is not None:
            try:
                os.pread(io_fd, 1024, 0)  # another user's process opens but cannot be read
            except OSError:
                close_fd(io_fd)
                io_fd = None
        status_fd = open_ro(os.path.join(base, "status"))
        p = _Proc(
            pid,
            ppid,
            name,
            stat,
            -1 if io_fd is None else io_fd,
            -1 if status_fd is None else status_fd,
            labels(pid=pid, name=name),
        )
        if self._first and not self._count_existing:
            try:
                raw = stat.read()
                if raw is None:
                    raise OSError("gone")
                rest = parse_stat(raw)[1]
                p.baseline = stat_cpu_seconds(rest)
                if pid == self.root_pid and self._root_cpu_baseline is not None:
                    p.baseline = min(p.baseline, self._root_cpu_baseline)
                if p.io_fd >= 0:
                    io = os.pread(p.io_fd, 1024, 0).split(b"\n")
                    p.io_base = (float(io[4][12:]), float(io[5][13:]))
            except (OSError, ValueError, IndexError):
                pass
        self._procs[pid] = p
        if pid == self.root_pid:
            self._root_seen = True
        cmdline = read_cmdline(self._root, pid)
        self.new_processes.append(ProcessInfo(pid, ppid, name, cmdline))
