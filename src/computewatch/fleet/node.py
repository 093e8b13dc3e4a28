"""One node, sampled whole: host, CPU energy, every GPU, every process, attributed to jobs.

Each :meth:`NodeSampler.sample` is one tick. Its cost is kept proportional to the live
processes, with no ``open`` for a process already known (as
:class:`computewatch.sources.process_tree.ProcessTreeSource`): ``/proc`` is listed only when
``/proc/loadavg``'s last PID moved (a process was born), a new process has its ``stat`` opened
once and re-read with ``pread``, and its job, user and start time are learned once (the
environment and cgroup are read by the :class:`~computewatch.fleet.attribution.Attributor`).
Kernel threads are skipped.

A job is its series' labels (``job``, ``node``, ``team``, ``user``): processes whose identities
differ elsewhere (a ``project`` tag) are one job, described by its first tagged process.

Per job the counters stay cumulative (docs/metrics.md, "Prometheus export"):

- CPU seconds: each process's ``utime+stime+cutime+cstime`` since the agent first saw it (a
  process present at the agent's first tick counts from then), plus the last-seen figure of
  processes that ended. A process reaped by a parent of the same job moves into that parent's
  ``cutime`` and is not counted twice; one reaped by a parent of another job is counted in its
  own job and taken off the parent's.
- GPU-seconds, busy and idle GPU-seconds, and energy accrue over each tick's interval from what
  the GPUs' process lists show at the tick.

A job whose processes have all ended keeps its counters for ``job_expiry_seconds`` and is then
dropped. A catch-all ``process:<user>`` job is exported only once one of its processes used
at least ``min_cpu_cores`` or a GPU (small processes are aggregated, never exported one by one).
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field

from computewatch.accounting.cpu_power import CpuPowerModel
from computewatch.fleet.attribution import Attributor, JobIdentity
from computewatch.metrics.families import (
    GpuCounters,
    counter_delta,
    device_labels,
    gpu_samples,
    gpu_value_key,
    reading_energy_method,
    with_device,
)
from computewatch.metrics.model import MetricSample
from computewatch.readings import Labels, Reading
from computewatch.redact import redact_argv
from computewatch.sources.base import SourceUnavailable
from computewatch.sources.gpus import GpuBackend, GpuSource, open_backend
from computewatch.sources.host import HostSource, host_facts
from computewatch.sources.procfs import (
    IDLE_CPU_MODES,
    PAGE_SIZE,
    PF_KTHREAD,
    ProcessCache,
    StatHandle,
    mid_exec,
    parse_stat,
    read_cmdline,
    read_file,
    stat_cpu_seconds,
    status_uid,
)
from computewatch.sources.rapl import SUMMED_DOMAINS, RaplSource

__all__ = ["JobGpus", "NodeOptions", "NodeSampler", "open_node"]

IDLE_UTILIZATION = 0.05  # a held GPU below this utilization counts as idle (the contract's)
UNSETTLED_TICKS = 3
"""Ticks a new process with an empty command line (read mid-exec) waits to be adopted; one that
keeps it empty (argv of nothing) is adopted after them as it is."""


@dataclass(frozen=True, slots=True)
class NodeOptions:
    """What an agent samples and exports (the config's ``[agent]`` section)."""

    node: str = field(default_factory=socket.gethostname)
    procfs_root: str = "/proc"
    sysfs_root: str = "/sys"
    powercap_root: str = "/sys/class/powercap"
    min_cpu_cores: float = 0.05
    job_expiry_seconds: float = 300.0
    per_process: bool = False
    export_cmdline: bool = False
    redact_names: tuple[str, ...] = ()
    """More names whose values the exported command lines hide (``[privacy] redact``)."""
    filesystems: tuple[str, ...] = ("/",)
    cpu_tdp_watts: float | None = None


@dataclass(frozen=True, slots=True)
class JobGpus:
    """One exported job at the last tick, for components that follow jobs over time (training
    detection): its identity and labels, and the readings of each GPU its processes held at
    that tick (``computewatch.traces.METRICS`` names, SI units) with the GPUs' names."""

    ident: JobIdentity
    labels: Labels
    gpus: Mapping[str, Mapping[str, float]]  # GPU UUID -> readings
    gpu_names: Mapping[str, str]  # GPU UUID -> name as NVML gives it


class _Job:
    __slots__ = (
        "busy",
        "cpu_delta",
        "cpu_exited",
        "cpu_reported",
        "energy",
        "exported",
        "gpu_mem",
        "gpu_seconds",
        "gpus",
        "ident",
        "idle",
        "info_lbl",
        "last_live",
        "lbl",
        "live",
        "mem",
        "nproc",
        "sm",
        "xid",
    )

    def __init__(self, ident: JobIdentity, node: str, now: float) -> None:
        self.ident = ident
        self.lbl = ident.labels(node)
        self.info_lbl = ident.info_labels(node)
        self.exported = ident.kind != "process" or ident.tagged
        self.cpu_exited = 0.0
        self.cpu_reported = 0.0
        self.cpu_delta = 0.0
        self.live = 0.0  # CPU total of live processes this tick
        self.mem = 0.0
        self.nproc = 0
        self.gpu_seconds = 0.0
        self.busy = 0.0
        self.idle = 0.0
        self.gpu_mem = 0.0
        self.energy = 0.0
        self.last_live = now
        self.sm: dict[str, float] = {}  # this tick: GPU UUID -> the job's SM samples
        self.gpus: set[str] = set()  # this tick: the GPUs its processes held
        self.xid = 0.0  # XIDs on GPUs while held

    def join(self, ident: JobIdentity, node: str) -> None:
        """A process of another identity with this job's labels joins it: a tagged one is
        exported, and describes the job (``computewatch_job_info``) in place of an untagged
        one; otherwise the first description stays."""
        if ident.kind != "process" or ident.tagged:
            self.exported = True
        if ident.tagged and not self.ident.tagged:
            self.ident = ident
            self.info_lbl = ident.info_labels(node)


class _Proc:
    __slots__ = (
        "baseline",
        "cmdline",
        "debit",
        "job",
        "lbl",
        "name",
        "noticed",
        "pid",
        "ppid",
        "raw",
        "rss",
        "start",
        "stat",
        "total",
    )

    def __init__(self, pid: int, start: int, stat: StatHandle, name: str, job: _Job) -> None:
        self.pid = pid
        self.start = start
        self.stat = stat
        self.name = name
        self.job = job
        self.ppid = 0
        self.baseline = 0.0
        self.debit = 0.0  # CPU of children counted in another job, inside our cutime
        self.raw = 0.0  # utime+stime+cutime+cstime at the last read
        self.total = 0.0  # raw - baseline - debit
        self.rss = 0.0
        self.noticed = False
        self.cmdline = ""
        self.lbl: Labels = ()


def _lbl(**pairs: str) -> Labels:
    return tuple(sorted(pairs.items()))


class NodeSampler:
    """Samples the node each :meth:`sample` call and returns the exported samples.

    ``host``, ``rapl`` and ``gpus`` are the sources (any may be missing: what they would give is
    then absent, and :attr:`notes` says why). GPU sources must have been opened with
    ``pids=node.pids_view`` and ``all_gpus=True`` for per-process attribution (:func:`open_node`
    does this).
    """

    def __init__(
        self,
        options: NodeOptions,
        attributor: Attributor,
        *,
        host: HostSource | None = None,
        rapl: RaplSource | None = None,
        gpus: Sequence[GpuSource] = (),
        cpu_model: str = "unknown",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.options = options
        self.attributor = attributor
        self.host = host
        self.rapl = rapl
        self.gpus: list[GpuSource] = list(gpus)
        self.notes: list[str] = []
        self._noted: set[str] = set()
        self._clock = clock
        self._root = options.procfs_root
        self._node = options.node
        # Foreign PIDs: kernel threads, until they vanish.
        self._cache: ProcessCache[_Proc] = ProcessCache(self._root)
        self._procs = self._cache.procs
        # Jobs by their series' labels: identities that differ off them (a project tag, a tag
        # at all, a Slurm time limit one process's environment lacks) are one job, so that no
        # series is exported twice (the exposition keeps the first and drops the rest).
        self._jobs: dict[Labels, _Job] = {}
        self._first = True
        # New processes read in the middle of their exec, adopted at a later tick: by PID, their
        # start time, the ticks they have waited and whether they were there at the first tick.
        self._unsettled: dict[int, tuple[int, int, bool]] = {}
        self._last_mono: float | None = None
        self._host_busy: float | None = None
        self._host_total: float | None = None
        self._rapl_last: float | None = None
        self._gpu_energy_last: dict[str, float] = {}
        self._gpu_xid_last: dict[str, float] = {}
        self._gpu_counters = GpuCounters()
        self._gpu_lbl: dict[str, Labels] = {}
        self._gpu_names: dict[str, str] = {}
        self._gpu_values: dict[str, dict[str, float]] = {}  # this tick's readings, per GPU
        self._node_lbl: Labels = (("node", self._node),)
        self._cpu_model = CpuPowerModel.for_cpu(
            cpu_model, os.cpu_count() or 1, options.cpu_tdp_watts
        )
        self.source_up: dict[str, bool] = {
            "host": host is not None,
            "rapl": rapl is not None,
            "gpu": bool(self.gpus),
        }

    # -- public -------------------------------------------------------------------------------
    def pids_view(self) -> Collection[int]:
        """The live PIDs known at this tick (what the GPU sources attribute per process)."""
        return self._procs.keys()

    @property
    def cpu_power_model(self) -> CpuPowerModel:
        return self._cpu_model

    @property
    def processes(self) -> int:
        return len(self._procs)

    @property
    def jobs(self) -> int:
        return len(self._jobs)

    def job_gpus(self) -> list[JobGpus]:
        """Every exported job of the last tick with its GPUs' readings at that tick (a job
        holding no GPU has none)."""
        out = []
        for job in self._jobs.values():
            if not job.exported or job.nproc == 0:
                continue
            gpus = {u: self._gpu_values[u] for u in sorted(job.gpus) if u in self._gpu_values}
            names = {u: self._gpu_names[u] for u in gpus if u in self._gpu_names}
            out.append(JobGpus(job.ident, job.lbl, gpus, names))
        return out

    def note(self, message: str, key: str) -> None:
        if key not in self._noted:
            self._noted.add(key)
            self.notes.append(message)

    def sample(self) -> list[MetricSample]:
        """One tick: read everything once, update the jobs, return every exported sample."""
        mono = self._clock()
        dt = 0.0 if self._last_mono is None else max(mono - self._last_mono, 0.0)
        self._last_mono = mono
        out: list[MetricSample] = []
        self._read_processes(mono, dt)
        cpu_busy_delta, host_util = self._read_host(out)
        cpu_energy_delta = self._read_rapl(out, dt, host_util)
        self._read_gpus(out, dt)
        self._charge_cpu_energy(cpu_energy_delta, cpu_busy_delta)
        self._emit_jobs(out, mono)
        self._filesystems(out)
        self._first = False
        return out

    def close(self) -> None:
        """Close every descriptor and source; safe to call twice."""
        self._cache.close()
        for src in (self.host, self.rapl, *self.gpus):
            if src is not None:
                with contextlib.suppress(Exception):
                    src.close()
        self.gpus = []
        self.host = self.rapl = None

    # -- processes ----------------------------------------------------------------------------
    def _discover(self) -> None:
        """Adopt processes never seen: one listing, only when a process was born since."""
        try:
            new = self._cache.new_pids(force=self._first or bool(self._unsettled))
        except OSError as e:
            self.note(f"cannot list {self._root}: {e.strerror or e}", "listdir")
            return
        for pid in new or ():
            self._adopt(pid)
        if new is not None:
            for pid in self._unsettled.keys() - new:
                del self._unsettled[pid]  # gone

    def _adopt(self, pid: int) -> None:
        base = os.path.join(self._root, str(pid))
        stat = self._cache.open_stat(pid)
        if stat is None:
            return  # gone already
        try:
            raw = stat.read()
            if raw is None:
                raise OSError(f"process {pid} is gone")
            name, rest = parse_stat(raw)
            if int(rest[6]) & PF_KTHREAD or int(rest[1]) == 2 or pid == 2:
                self._cache.release(stat)
                self._cache.foreign.add(pid)
                return
            start = int(rest[19])
            uid = self._uid(base)
        except (OSError, ValueError, IndexError):
            self._cache.release(stat)
            return
        first = self._first
        if mid_exec(rest, read_file(os.path.join(base, "cmdline"), 1)):
            # Its identity, found once for its life, would miss its environment: it is adopted
            # at a later tick instead (its CPU time is counted from its start all the same, or
            # from the agent's first tick for one there then).
            waited_start, waited, first = self._unsettled.get(pid, (start, 0, first))
            if waited_start != start:
                waited, first = 0, self._first
            if waited < UNSETTLED_TICKS:
                self._cache.release(stat)
                self._unsettled[pid] = (start, waited + 1, first)
                return
        self._unsettled.pop(pid, None)
        ident = self.attributor.identify(pid, start, uid)
        key = ident.labels(self._node)
        job = self._jobs.get(key)
        if job is None:
            job = self._jobs[key] = _Job(ident, self._node, self._clock())
        elif job.ident != ident:
            job.join(ident, self._node)
        p = _Proc(pid, start, stat, name, job)
        if first:  # usage from before the agent started is not counted
            p.baseline = stat_cpu_seconds(rest)
        if self.options.per_process:
            pairs = dict(job.lbl)
            pairs.update(pid=str(pid), name=name)
            if self.options.export_cmdline:
                # Secrets are redacted before the cut, so a cut cannot split one out of view.
                argv = redact_argv(read_cmdline(self._root, pid, 4096), self.options.redact_names)
                p.cmdline = " ".join(argv)[:256]
                pairs["cmdline"] = p.cmdline
            p.lbl = tuple(sorted(pairs.items()))
        self._procs[pid] = p

    @staticmethod
    def _uid(base: str) -> int:
        status = read_file(os.path.join(base, "status"), 4096)
        if status is None:
            raise OSError(f"cannot read {base}/status")
        return status_uid(status)

    def _read_processes(self, mono: float, dt: float) -> None:
        self._discover()
        for job in self._jobs.values():
            job.live = job.mem = job.cpu_delta = job.gpu_mem = 0.0
            job.nproc = 0
            job.sm.clear()
            job.gpus.clear()
        # Read every stat first, retire the vanished, then total: a child reaped by a parent of
        # another job is taken off that parent's cutime in the same tick it appears there.
        reads: list[tuple[_Proc, list[bytes]]] = []
        gone: list[_Proc] = []
        for p in self._procs.values():
            rest = p.stat.fields()
            if rest is None:
                gone.append(p)
                continue
            reads.append((p, rest))
        gone_pids = {p.pid for p in gone}
        for p in gone:
            self._retire(p, gone_pids)
        min_cpu = self.options.min_cpu_cores
        for p, rest in reads:
            p.ppid = int(rest[1])
            p.raw = stat_cpu_seconds(rest)
            total = p.raw - p.baseline - p.debit
            delta = max(total - p.total, 0.0)
            p.total = total
            p.rss = float(int(rest[21]) * PAGE_SIZE)
            job = p.job
            job.live += total
            job.mem += p.rss
            job.nproc += 1
            job.cpu_delta += delta
            job.last_live = mono
            if dt > 0 and delta / dt >= min_cpu:
                p.noticed = True
                job.exported = True

    def _retire(self, p: _Proc, gone_pids: set[int]) -> None:
        self._cache.drop(p)
        self.attributor.forget(p.pid, p.start)
        parent = self._procs.get(p.ppid)
        if parent is not None and p.ppid not in gone_pids and parent.job is p.job:
            return  # its times go into the parent's cutime/cstime (proc(5))
        p.job.cpu_exited += p.total
        if parent is not None and p.ppid not in gone_pids:
            parent.debit += p.raw  # the parent's cutime will hold it: counted here already

    # -- host and CPU energy ------------------------------------------------------------------
    def _read_host(self, out: list[MetricSample]) -> tuple[float, float | None]:
        """Host gauges; returns (busy CPU seconds over the tick, busy ratio or None)."""
        if self.host is None:
            return 0.0, None
        try:
            readings = self.host.read()
        except Exception as e:
            self.note(f"host readings failed: {e}", "host")
            self.source_up["host"] = False
            return 0.0, None
        self.source_up["host"] = True
        busy = total = 0.0
        node = self._node_lbl
        names = {
            "host_memory_used_bytes": "computewatch_host_memory_used_bytes",
            "host_memory_total_bytes": "computewatch_host_memory_total_bytes",
            "host_swap_used_bytes": "computewatch_host_swap_used_bytes",
        }
        for r in readings:
            if r.name == "host_cpu_seconds_total":
                total += r.value
                if dict(r.labels).get("mode") not in IDLE_CPU_MODES:
                    busy += r.value
            elif r.name in names:
                out.append(MetricSample(names[r.name], node, r.value))
        busy_delta = 0.0
        util: float | None = None
        if self._host_busy is not None and self._host_total is not None:
            busy_delta = max(busy - self._host_busy, 0.0)
            total_delta = total - self._host_total
            if total_delta > 0:
                util = min(busy_delta / total_delta, 1.0)
                out.append(MetricSample("computewatch_host_cpu_utilization_ratio", node, util))
        self._host_busy, self._host_total = busy, total
        return busy_delta, util

    def _read_rapl(self, out: list[MetricSample], dt: float, util: float | None) -> float:
        """CPU energy over the tick: RAPL package + DRAM, else the model (0 without a figure)."""
        if self.rapl is not None:
            try:
                readings = self.rapl.read()
            except Exception as e:
                self.note(f"RAPL readings failed, CPU energy is modeled from now: {e}", "rapl")
                self.source_up["rapl"] = False
                self.rapl = None
                readings = None
            if readings is not None:
                summed = 0.0
                for r in readings:
                    domain = dict(r.labels).get("domain")
                    if domain in SUMMED_DOMAINS:
                        summed += r.value
                        lbl = tuple(sorted((*r.labels, ("node", self._node))))
                        out.append(
                            MetricSample("computewatch_cpu_energy_joules_total", lbl, r.value)
                        )
                delta = 0.0 if self._rapl_last is None else max(summed - self._rapl_last, 0.0)
                self._rapl_last = summed
                return delta
        if util is None:
            return 0.0
        return self._cpu_model.watts(util) * dt

    def _charge_cpu_energy(self, joules: float, busy_delta: float) -> None:
        if joules <= 0 or busy_delta <= 0:
            return
        for job in self._jobs.values():
            if job.cpu_delta > 0:
                job.energy += joules * min(job.cpu_delta / busy_delta, 1.0)

    # -- GPUs ---------------------------------------------------------------------------------
    def _gpu_labels(self, src: GpuSource) -> None:
        for d in src.devices:
            if d.uuid not in self._gpu_lbl:
                index = d.index if d.mig_index is None else f"{d.index}.{d.mig_index}"
                self._gpu_lbl[d.uuid] = device_labels(
                    d.uuid,
                    index,
                    d.name,
                    self._node,
                    simulated=d.simulated or src.simulated,
                )
                self._gpu_names[d.uuid] = d.name

    def _read_gpus(self, out: list[MetricSample], dt: float) -> None:
        if not self.gpus:
            return
        readings: list[Reading] = []
        ok = False
        for src in self.gpus:
            self._gpu_labels(src)
            try:
                readings.extend(src.read())
                ok = True
            except Exception as e:
                self.note(f"GPU readings ({src.name}) failed: {e}", f"gpu:{src.name}")
            for n in src.notes:
                self.note(n, n)
        self.source_up["gpu"] = ok
        per_gpu: dict[str, dict[str, float]] = {}
        self._gpu_values = per_gpu
        proc_mem: dict[str, dict[int, float]] = {}
        proc_sm: dict[str, dict[int, float]] = {}
        e_method: dict[str, str | None] = {}  # counter, polled or modeled, as the source says
        for r in readings:
            ld = dict(r.labels)
            uuid = ld.get("gpu")
            if uuid is None:
                continue
            if r.name == "gpu_process_memory_used_bytes":
                proc_mem.setdefault(uuid, {})[int(ld["pid"])] = r.value
            elif r.name == "gpu_process_sm_utilization_ratio":
                proc_sm.setdefault(uuid, {})[int(ld["pid"])] = r.value
            else:
                per_gpu.setdefault(uuid, {})[gpu_value_key(r.name, ld)] = r.value
                if r.name == "gpu_energy_joules_total":
                    e_method[uuid] = reading_energy_method(r.name, ld)
        procs = self._procs
        for uuid, values in per_gpu.items():
            lbl = self._gpu_lbl.get(uuid) or _lbl(gpu=uuid, node=self._node)
            mem = {pid: m for pid, m in proc_mem.get(uuid, {}).items() if pid in procs}
            sm = proc_sm.get(uuid, {})
            process_sm = None
            if sm:  # NVML's per-process SM samples, ours and everyone else's
                process_sm = sum(sm.values()) + values.get(
                    "gpu_other_processes_sm_utilization_ratio", 0.0
                )
            gpu_samples(  # held by a job: holders below
                out,
                lbl,
                values,
                allocated=bool(mem),
                process_sm=process_sm,
                dt=dt,
                counters=self._gpu_counters,
                energy_method=e_method.get(uuid),
            )
            e_delta = counter_delta(
                self._gpu_energy_last, uuid, values.get("gpu_energy_joules_total")
            )
            x_delta = counter_delta(self._gpu_xid_last, uuid, values.get("gpu_xid_errors_total"))
            holders: dict[_Job, float] = {}
            weights: dict[_Job, float] = {}
            for pid, m in mem.items():
                p = procs[pid]
                p.noticed = True
                job = p.job
                job.exported = True
                holders[job] = holders.get(job, 0.0) + m
                job.gpu_mem += m
                job.gpus.add(uuid)
                weights[job] = weights.get(job, 0.0) + sm.get(pid, 0.0)
                if pid in sm:
                    job.sm[uuid] = job.sm.get(uuid, 0.0) + sm[pid]
                if self.options.per_process:
                    plbl = with_device(p.lbl, self._gpu_lbl.get(uuid), uuid)
                    out.append(MetricSample("computewatch_process_gpu_memory_used_bytes", plbl, m))
            if not holders or dt <= 0:
                continue
            # The job's share of the GPU: by SM utilization where NVML gives it per process,
            # else by memory held, else equal parts.
            total_w = sum(weights.values())
            if total_w <= 0:
                weights = dict(holders)
                total_w = sum(weights.values())
            util = values.get("gpu_utilization_ratio")
            for job in holders:
                share = weights[job] / total_w if total_w > 0 else 1.0 / len(holders)
                job.xid += x_delta
                job.gpu_seconds += dt
                if util is not None:
                    job.busy += util * dt * share
                    if util < IDLE_UTILIZATION:
                        job.idle += dt
                job.energy += e_delta * share

    # -- jobs ---------------------------------------------------------------------------------
    def _emit_jobs(self, out: list[MetricSample], mono: float) -> None:
        expiry = self.options.job_expiry_seconds
        dead: list[Labels] = []
        add = out.append
        for key, job in self._jobs.items():
            if job.nproc == 0 and (not job.exported or mono - job.last_live > expiry):
                dead.append(key)
                continue
            if not job.exported:
                continue
            cpu = job.cpu_exited + job.live
            job.cpu_reported = max(job.cpu_reported, cpu)  # a counter never goes back
            lbl = job.lbl
            add(MetricSample("computewatch_job_info", job.info_lbl, 1.0))
            add(MetricSample("computewatch_job_cpu_seconds_total", lbl, job.cpu_reported))
            add(MetricSample("computewatch_job_memory_bytes", lbl, job.mem))
            add(MetricSample("computewatch_job_processes", lbl, float(job.nproc)))
            add(MetricSample("computewatch_job_gpu_seconds_total", lbl, job.gpu_seconds))
            add(MetricSample("computewatch_job_gpu_busy_seconds_total", lbl, job.busy))
            add(MetricSample("computewatch_job_gpu_idle_seconds_total", lbl, job.idle))
            add(MetricSample("computewatch_job_gpu_memory_used_bytes", lbl, job.gpu_mem))
            add(MetricSample("computewatch_job_energy_joules_total", lbl, job.energy))
            add(MetricSample("computewatch_job_gpu_xid_errors_total", lbl, job.xid))
            for uuid, sm in job.sm.items():
                slbl = with_device(
                    lbl, self._gpu_lbl.get(uuid), uuid, method="nvml_process_samples"
                )
                add(MetricSample("computewatch_job_gpu_sm_active_ratio", slbl, min(sm, 1.0)))
        for key in dead:
            del self._jobs[key]
        if self.options.per_process:
            for p in self._procs.values():
                if p.noticed:
                    add(MetricSample("computewatch_process_cpu_seconds_total", p.lbl, p.total))
                    add(MetricSample("computewatch_process_memory_bytes", p.lbl, p.rss))

    def _filesystems(self, out: list[MetricSample]) -> None:
        for mount in self.options.filesystems:
            try:
                st = os.statvfs(mount)
            except OSError as e:
                self.note(f"cannot stat filesystem {mount}: {e.strerror or e}", f"fs:{mount}")
                continue
            lbl = _lbl(mountpoint=mount, node=self._node)
            out.append(
                MetricSample("computewatch_filesystem_avail_bytes", lbl, st.f_bavail * st.f_frsize)
            )
            out.append(
                MetricSample("computewatch_filesystem_size_bytes", lbl, st.f_blocks * st.f_frsize)
            )


def open_node(
    options: NodeOptions,
    attributor: Attributor,
    gpu_backend: str = "auto",
    fake_pids: Collection[int] = (),
) -> tuple[NodeSampler, GpuBackend]:
    """A sampler with the host, RAPL and GPU sources of this node opened; a source that is
    not available here leaves a note saying why. Raises
    :class:`computewatch.sources.gpus.GpuBackendError` for an invalid ``gpu_backend``."""
    notes: list[str] = []
    host: HostSource | None
    try:
        host = HostSource(options.procfs_root, options.sysfs_root)
    except SourceUnavailable as e:
        host = None
        notes.append(f"host readings unavailable: {e}")
    rapl: RaplSource | None
    try:
        rapl = RaplSource(options.powercap_root)
    except SourceUnavailable as e:
        rapl = None
        notes.append(f"no RAPL energy counters ({e}); CPU energy is modeled from the TDP")
    cpu_model = str(host_facts(options.procfs_root).get("cpu_model") or "unknown")
    node = NodeSampler(options, attributor, host=host, rapl=rapl, cpu_model=cpu_model)
    try:
        backend = open_backend(
            gpu_backend,
            pids=node.pids_view,
            all_gpus=True,
            procfs_root=options.procfs_root,
            fake_pids=fake_pids,
        )
    except BaseException:
        node.close()
        raise
    node.gpus = list(backend.sources)
    node.source_up["gpu"] = bool(backend.sources)
    for name, why in backend.skipped:
        notes.append(f"GPU backend {name} skipped: {why}")
    for n in notes:
        node.note(n, n)
    return node, backend
