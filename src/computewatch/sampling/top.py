"""What ``computewatch top`` shows, as data: one :class:`TopSnapshot` of the whole host per
refresh (no terminal code here; :mod:`computewatch.views.top` draws it).

Each refresh reads, once each:

- the host through :class:`~computewatch.sources.host.HostSource` (CPU time, memory, load);
- every process's ``/proc/PID/stat`` (CPU time, RSS), through a descriptor opened when the
  process is first seen and re-read with ``pread`` (procfs regenerates the text on a read at
  offset 0, and the descriptor stays bound to its process, so a reused PID is never mistaken
  for it); ``status``, ``cmdline`` and ``environ`` are read once per process (again after an
  ``exec``, seen as a change of ``comm``);
- the GPU backend (opened once, every GPU, per-process readings for every PID of the host).

CPU shares are deltas over the time between two refreshes, so the first snapshot makes a short
priming read first. A process's ``cpu_ratio`` is of one core (2.0 = two cores busy), like
top's ``%CPU``; the host's ``cpu_ratio`` is of all its online CPUs.
"""

from __future__ import annotations

import dataclasses
import os
import pwd
import socket
import time
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any, Literal

from computewatch.escape import decode_text
from computewatch.readings import Reading
from computewatch.redact import redact_argv
from computewatch.sampling.channel import ENV_RUN_ID
from computewatch.sources.gpus import GpuBackend, open_backend
from computewatch.sources.host import HostSource
from computewatch.sources.procfs import (
    CLK_TCK,
    IDLE_CPU_MODES,
    PAGE_SIZE,
    PF_KTHREAD,
    ProcessCache,
    StatHandle,
    default_fd_budget,
    mid_exec,
    read_cmdline,
    read_environ,
    read_file,
    split_stat,
    status_effective_uid,
)

__all__ = [
    "SORT_KEYS",
    "GpuRow",
    "HostRow",
    "ProcessRow",
    "SortKey",
    "TopCollector",
    "TopSnapshot",
    "snapshot_as_dict",
    "sort_processes",
]

SortKey = Literal["cpu", "memory", "gpu-memory", "gpu", "pid"]
SORT_KEYS: tuple[SortKey, ...] = ("cpu", "memory", "gpu-memory", "gpu", "pid")


@dataclasses.dataclass(frozen=True, slots=True)
class HostRow:
    """The host at one refresh; ``None`` where procfs could not say."""

    hostname: str
    cpu_ratio: float | None  # busy share of all online CPUs over the interval, 0-1
    cpu_count: int
    memory_used_bytes: float | None  # MemTotal - MemAvailable
    memory_total_bytes: float | None
    swap_used_bytes: float | None
    swap_total_bytes: float | None
    load1: float | None
    load5: float | None
    load15: float | None
    processes: int  # processes on the host (not threads)
    running: int  # of them in state R


@dataclasses.dataclass(frozen=True, slots=True)
class GpuRow:
    """One GPU (or MIG instance) at one refresh; ``None`` where the device cannot say."""

    index: str  # NVML index; "0/1" for MIG instance 1 of GPU 0
    uuid: str
    name: str
    simulated: bool
    utilization_ratio: float | None  # share of time a kernel ran (NVML), 0-1
    memory_used_bytes: float | None
    memory_total_bytes: float | None
    power_watts: float | None
    power_limit_watts: float | None
    temperature_celsius: float | None
    sm_clock_hertz: float | None
    lost: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class ProcessRow:
    """One process worth showing: it used CPU in the interval, holds GPU memory or runs on a
    GPU, or belongs to a computewatch run."""

    pid: int
    user: str
    state: str  # the one-letter state of /proc/PID/stat (R, S, D, Z...)
    cpu_ratio: float  # CPU seconds per second over the interval: 1.0 = one core
    rss_bytes: int
    gpus: tuple[str, ...]  # GpuRow.index of each device it is on
    gpu_memory_bytes: float | None  # summed over its devices; None when none reports it
    gpu_sm_ratio: float | None  # SM utilization summed over its devices: 1.0 = one whole GPU
    command: str  # command line, truncated; "[comm]" when it has none (kernel threads)
    run_id: str | None  # COMPUTEWATCH_RUN_ID from its environment
    run_id_readable: bool  # False: its environ could not be read (another user's; needs root)


@dataclasses.dataclass(frozen=True, slots=True)
class TopSnapshot:
    """Everything one refresh of ``computewatch top`` shows."""

    wall_time: float  # Unix time of the refresh
    interval_seconds: float  # the window the CPU shares are measured over
    host: HostRow
    gpu_backend: str
    gpus: tuple[GpuRow, ...]
    gpu_notes: tuple[str, ...]  # why there are no GPUs, and what the GPU sources noted
    processes: tuple[ProcessRow, ...]  # unsorted: see sort_processes
    unreadable_environ: int  # processes whose run id could not be read

    @property
    def simulated(self) -> bool:
        """True when any GPU shown is fake or replayed."""
        return any(g.simulated for g in self.gpus)


def sort_processes(rows: Iterable[ProcessRow], key: SortKey) -> list[ProcessRow]:
    """Rows in display order: largest first (unknown last), ties by PID; ``pid`` ascending."""
    if key == "pid":
        return sorted(rows, key=lambda r: r.pid)
    get: Callable[[ProcessRow], float | None]
    if key == "cpu":
        get = lambda r: r.cpu_ratio  # noqa: E731
    elif key == "memory":
        get = lambda r: r.rss_bytes  # noqa: E731
    elif key == "gpu-memory":
        get = lambda r: r.gpu_memory_bytes  # noqa: E731
    elif key == "gpu":
        get = lambda r: r.gpu_sm_ratio  # noqa: E731
    else:
        raise ValueError(f"unknown sort key {key!r}; expected one of {', '.join(SORT_KEYS)}")

    def order(r: ProcessRow) -> tuple[float, int]:
        v = get(r)
        return (1.0 if v is None else -float(v) - 1.0, r.pid)

    return sorted(rows, key=order)


def snapshot_as_dict(snap: TopSnapshot, sort: SortKey = "cpu") -> dict[str, Any]:
    """A JSON-ready form of ``snap`` (SI units, as in the rest of computewatch), processes in
    ``sort`` order."""
    return {
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(snap.wall_time)),
        "interval_seconds": round(snap.interval_seconds, 3),
        "host": dataclasses.asdict(snap.host),
        "gpu_backend": snap.gpu_backend,
        "gpus_simulated": snap.simulated,
        "gpus": [dataclasses.asdict(g) for g in snap.gpus],
        "gpu_notes": list(snap.gpu_notes),
        "sort": sort,
        "processes": [
            {**dataclasses.asdict(p), "gpus": list(p.gpus)}
            for p in sort_processes(snap.processes, sort)
        ],
    }


# --- processes -------------------------------------------------------------------------------


@dataclasses.dataclass(slots=True)
class _Proc:
    """A process seen before: its cached descriptor and what is read once per process."""

    pid: int
    starttime: bytes  # field 22 of stat: with the PID, identifies the process
    stat: StatHandle  # /proc/PID/stat kept open; read by path when over the descriptor budget
    comm: bytes
    user: str
    command: str
    run_id: str | None
    run_id_readable: bool
    ticks: int  # utime + stime at the last read
    generation: int  # the refresh that last saw it
    settled: bool = True  # False: read mid-exec (no command line yet), described again


class TopCollector:
    """Builds a :class:`TopSnapshot` of the host at each :meth:`snapshot` call.

    ``gpu_backend`` is a ``--gpu-backend`` value (``auto``, ``none``, ``fake:2xA100-80GB``...);
    it is opened once, for every GPU, and an invalid one raises
    :class:`~computewatch.sources.gpus.GpuBackendError`. ``fake_pids`` are placed on every
    fake device. A process is listed when it used CPU in the interval, holds at least
    ``gpu_memory_min_bytes`` of GPU memory or has SM activity, or carries a computewatch run id.
    """

    def __init__(
        self,
        gpu_backend: str = "auto",
        *,
        procfs_root: str = "/proc",
        fake_pids: Collection[int] = (),
        gpu_memory_min_bytes: int = 1 << 20,
        command_width: int = 256,
        prime_seconds: float = 0.2,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        max_cached_fds: int | None = None,
    ) -> None:
        """``prime_seconds`` is how long the first snapshot measures CPU over. At most
        ``max_cached_fds`` stat descriptors stay open (default: half the soft ``RLIMIT_NOFILE``,
        at most 4096); processes past it are read by path."""
        self._root = procfs_root
        self._gpu_min = gpu_memory_min_bytes
        self._command_width = command_width
        self._prime = prime_seconds
        self._clock = clock
        self._sleep = sleep
        if max_cached_fds is None:
            max_cached_fds = default_fd_budget()
        self._cache: ProcessCache[_Proc] = ProcessCache(
            procfs_root, max_open=max(0, max_cached_fds)
        )
        self._procs = self._cache.procs
        self._pids: frozenset[int] = frozenset()
        self._users: dict[int, str] = {}
        self._generation = 0
        self._last_t: float | None = None
        self._cpu_prev: tuple[float, float] | None = None  # (busy, total) seconds
        self._hostname = socket.gethostname()
        self._closed = False
        self._host = HostSource(procfs_root=procfs_root)
        self._backend: GpuBackend | None = None
        try:
            self._backend = open_backend(
                gpu_backend,
                pids=self._pid_view,
                all_gpus=True,
                procfs_root=procfs_root,
                fake_pids=fake_pids,
            )
        except BaseException:
            self._host.close()
            raise
        self.gpu_backend = self._backend.spec

    @property
    def backend(self) -> GpuBackend:
        """The GPU sources opened, and why the others were skipped."""
        assert self._backend is not None
        return self._backend

    def snapshot(self) -> TopSnapshot:
        """One refresh. The first call reads twice, ``prime_seconds`` apart."""
        if self._closed:
            raise ValueError("snapshot() on a closed TopCollector")
        if self._last_t is None:
            self._refresh()
            self._sleep(self._prime)
        snap = self._refresh()
        assert snap is not None
        return snap

    def close(self) -> None:
        """Close the GPU backend, the host source and every cached descriptor; idempotent."""
        if self._closed:
            return
        self._closed = True
        self._cache.close()
        self._host.close()
        if self._backend is not None:
            self._backend.close()

    def __enter__(self) -> TopCollector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- one refresh ------------------------------------------------------------------------
    def _pid_view(self) -> Collection[int]:
        return self._pids

    def _refresh(self) -> TopSnapshot | None:
        now = self._clock()
        wall = time.time()
        dt = None if self._last_t is None else max(now - self._last_t, 1e-6)
        self._last_t = now
        host_readings = self._host.read()
        ticks, states = self._scan()
        gpus, per_pid, notes = self._read_gpus()
        host = self._host_row(host_readings, dt, states)
        if dt is None:
            return None
        rows: list[ProcessRow] = []
        unreadable = 0
        for pid, p in self._procs.items():
            prev = ticks.get(pid)
            if prev is None:
                continue
            cpu = max(0, p.ticks - prev) / CLK_TCK / dt
            gpu = per_pid.get(pid)
            gpu_mem = gpu[1] if gpu else None
            gpu_sm = gpu[2] if gpu else None
            on_gpu = bool(gpu) and (
                (gpu_mem is not None and gpu_mem >= self._gpu_min) or bool(gpu_sm)
            )
            if not p.run_id_readable:
                unreadable += 1
            if cpu <= 0 and not on_gpu and p.run_id is None:
                continue
            state, rss = states.get(pid, (b"?", 0))
            rows.append(
                ProcessRow(
                    pid=pid,
                    user=p.user,
                    state=state.decode("ascii", "replace"),
                    cpu_ratio=cpu,
                    rss_bytes=rss,
                    gpus=tuple(gpu[0]) if gpu else (),
                    gpu_memory_bytes=gpu_mem,
                    gpu_sm_ratio=gpu_sm,
                    command=p.command,
                    run_id=p.run_id,
                    run_id_readable=p.run_id_readable,
                )
            )
        return TopSnapshot(
            wall_time=wall,
            interval_seconds=dt,
            host=host,
            gpu_backend=self.gpu_backend,
            gpus=gpus,
            gpu_notes=notes,
            processes=tuple(rows),
            unreadable_environ=unreadable,
        )

    def _host_row(
        self, readings: Sequence[Reading], dt: float | None, states: dict[int, tuple[bytes, int]]
    ) -> HostRow:
        busy = total = 0.0
        cpus: set[str] = set()
        values: dict[str, float] = {}
        for r in readings:
            if r.name == "host_cpu_seconds_total":
                lbl = dict(r.labels)
                cpus.add(lbl.get("cpu", ""))
                total += r.value
                if lbl.get("mode") not in IDLE_CPU_MODES:
                    busy += r.value
            elif not r.labels:
                values[r.name] = r.value
        ratio = None
        if self._cpu_prev is not None and dt is not None:
            d_total = total - self._cpu_prev[1]
            if d_total > 0:
                ratio = min(1.0, max(0.0, (busy - self._cpu_prev[0]) / d_total))
        self._cpu_prev = (busy, total)
        return HostRow(
            hostname=self._hostname,
            cpu_ratio=ratio,
            cpu_count=len(cpus) or (os.cpu_count() or 1),
            memory_used_bytes=values.get("host_memory_used_bytes"),
            memory_total_bytes=values.get("host_memory_total_bytes"),
            swap_used_bytes=values.get("host_swap_used_bytes"),
            swap_total_bytes=values.get("host_swap_total_bytes"),
            load1=values.get("host_load1"),
            load5=values.get("host_load5"),
            load15=values.get("host_load15"),
            processes=len(states),
            running=sum(1 for s, _ in states.values() if s == b"R"),
        )

    def _scan(self) -> tuple[dict[int, int], dict[int, tuple[bytes, int]]]:
        """Read every process's stat. Returns the previous tick counts of processes seen at
        the last refresh too (or born since: 0) and ``{pid: (state, rss_bytes)}``."""
        self._generation += 1
        gen = self._generation
        first = gen == 1
        try:
            pids = sorted(self._cache.pids())
        except OSError:
            pids = []
        self._pids = frozenset(pids)
        prev_ticks: dict[int, int] = {}
        states: dict[int, tuple[bytes, int]] = {}
        procs = self._procs
        for pid in pids:
            p = procs.get(pid)
            raw = p.stat.read() if p is not None else None
            if p is not None and raw is None:  # gone, or the PID was reused: start over
                self._cache.drop(p)
                p = None
            try:
                if p is None:
                    raw = read_file(os.path.join(self._root, str(pid), "stat"), 4096)
                    if not raw:
                        continue
                    comm, fields = split_stat(raw)
                    p = self._adopt(pid, comm, fields)
                    if p is None:
                        continue
                    # Born since the last refresh: all its CPU time falls in this interval.
                    prev = None if first else 0
                else:
                    assert raw is not None
                    comm, fields = split_stat(raw)
                    if fields[19] != p.starttime:  # read by path: another process, same PID
                        self._cache.drop(p)
                        p = self._adopt(pid, comm, fields)
                        if p is None:
                            continue
                        prev = None if first else 0
                    else:
                        prev = p.ticks
                        if comm != p.comm or not p.settled:  # exec: new argv and environ
                            self._describe(p, comm, fields)
                ticks = int(fields[11]) + int(fields[12])
                rss = int(fields[21]) * PAGE_SIZE
            except (ValueError, IndexError):
                continue
            p.ticks = ticks
            p.generation = gen
            if prev is not None:
                prev_ticks[pid] = prev
            states[pid] = (fields[0], rss)
        for p in [p for p in procs.values() if p.generation != gen]:
            self._cache.drop(p)
        return prev_ticks, states

    def _adopt(self, pid: int, comm: bytes, fields: list[bytes]) -> _Proc | None:
        stat = self._cache.open_stat(pid)
        if stat is None:
            return None
        p = _Proc(pid, fields[19], stat, comm, "?", "", None, False, 0, 0)
        if stat.fd >= 0:
            # The descriptor may have been opened on a newer process than ``fields`` came from.
            raw = stat.read()
            if raw is None:
                self._cache.release(stat)
                return None
            comm, fields = split_stat(raw)
            p.starttime = fields[19]
        self._procs[pid] = p
        self._describe(p, comm, fields)
        return p

    def _describe(self, p: _Proc, comm: bytes, fields: list[bytes]) -> None:
        """Read what changes only at exec: user, command line, run id."""
        base = os.path.join(self._root, str(p.pid))
        p.comm = comm
        p.user = self._user_of(base)
        args = read_cmdline(self._root, p.pid, self._command_width * 4 + 4)
        kthread = int(fields[6]) & PF_KTHREAD
        # Read mid-exec: described again at the next refresh (comm need not change at exec).
        p.settled = not mid_exec(fields, args)
        # Shown for every user's processes: secrets redacted as in stored command lines.
        text = " ".join(redact_argv(args)) if args else f"[{decode_text(comm)}]"
        p.command = "".join(c if c.isprintable() else " " for c in text[: self._command_width])
        env = {} if kthread else read_environ(self._root, p.pid, (ENV_RUN_ID,))
        p.run_id_readable = env is not None
        p.run_id = (env or {}).get(ENV_RUN_ID) or None

    def _user_of(self, base: str) -> str:
        """The effective user, from the Uid line of /proc/PID/status (as ps's USER)."""
        status = read_file(os.path.join(base, "status"), 8192)
        if not status:
            return "?"
        try:
            uid = status_effective_uid(status)
        except ValueError:
            return "?"
        name = self._users.get(uid)
        if name is None:
            try:
                name = pwd.getpwuid(uid).pw_name
            except KeyError:
                name = str(uid)
            self._users[uid] = name
        return name

    # -- GPUs -------------------------------------------------------------------------------
    def _read_gpus(
        self,
    ) -> tuple[
        tuple[GpuRow, ...], dict[int, tuple[list[str], float | None, float | None]], tuple[str, ...]
    ]:
        """Device rows, ``{pid: (device indexes, GPU memory, SM ratio)}`` and notes."""
        backend = self.backend
        notes: list[str] = []
        if not backend.sources:
            if backend.spec == "none":
                notes.append("GPUs are not read (--gpu-backend none)")
            elif backend.skipped:
                notes.extend(f"no GPU backend: {name}: {why}" for name, why in backend.skipped)
            else:
                notes.append(f"no GPU backend ({backend.spec})")
            return (), {}, tuple(notes)
        readings: list[Reading] = []
        for s in backend.sources:
            try:
                readings.extend(s.read())
            except Exception as e:  # one failing source must not stop the view
                notes.append(f"GPU source {s.name} failed this refresh: {e}")
            notes.extend(s.notes[-5:])
        dev_values: dict[str, dict[str, float]] = {}
        proc_mem: dict[tuple[str, int], float] = {}
        proc_sm: dict[tuple[str, int], float] = {}
        for r in readings:
            lbl = dict(r.labels)
            uuid = lbl.get("gpu")
            if uuid is None:
                continue
            pid_text = lbl.get("pid")
            if pid_text is not None:
                try:
                    key = (uuid, int(pid_text))
                except ValueError:
                    continue
                if r.name == "gpu_process_memory_used_bytes":
                    proc_mem[key] = r.value
                elif r.name == "gpu_process_sm_utilization_ratio":
                    proc_sm[key] = r.value
                continue
            if len(lbl) == 1 or (len(lbl) == 2 and "parent" in lbl):
                dev_values.setdefault(uuid, {})[r.name] = r.value
        rows: list[GpuRow] = []
        index_of: dict[str, str] = {}
        for d in backend.devices:
            idx = str(d.index) if d.mig_index is None else f"{d.index}/{d.mig_index}"
            index_of[d.uuid] = idx
            v = dev_values.get(d.uuid, {})
            rows.append(
                GpuRow(
                    index=idx,
                    uuid=d.uuid,
                    name=d.name,
                    simulated=d.simulated,
                    utilization_ratio=v.get("gpu_utilization_ratio"),
                    memory_used_bytes=v.get("gpu_memory_used_bytes"),
                    memory_total_bytes=v.get("gpu_memory_total_bytes", d.memory_total_bytes),
                    power_watts=v.get("gpu_power_watts"),
                    power_limit_watts=v.get("gpu_power_limit_watts", d.power_limit_watts),
                    temperature_celsius=v.get("gpu_temperature_celsius"),
                    sm_clock_hertz=v.get("gpu_sm_clock_hertz"),
                    lost=bool(d.capabilities.get("lost", False)),
                )
            )
        per_pid: dict[int, tuple[list[str], float | None, float | None]] = {}
        for uuid, pid in sorted(proc_mem.keys() | proc_sm.keys()):
            devs, mem, sm = per_pid.get(pid, ([], None, None))
            idx = index_of.get(uuid, uuid[:8])
            if idx not in devs:
                devs.append(idx)
            m = proc_mem.get((uuid, pid))
            if m is not None:
                mem = m if mem is None else mem + m
            u = proc_sm.get((uuid, pid))
            if u is not None:
                sm = u if sm is None else sm + u
            per_pid[pid] = (devs, mem, sm)
        return tuple(rows), per_pid, tuple(dict.fromkeys(notes))
