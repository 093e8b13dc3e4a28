"""``computewatch run --prometheus``: one run's ticks as the exported metric contract.

The run is the job (``job`` = run id, ``kind="computewatch"``, ``user`` = the current user,
``team`` from a ``team`` tag, ``project`` from a ``project`` tag). :func:`run_observer` maps each
tick's readings (internal names, docs/metrics.md) to the same families the agent exports, so
alert rules and dashboards read one set of names; :func:`prometheus_sink` serves them.

GPU-seconds count the GPUs on which the run's processes hold memory; the run's share of a
shared GPU (for busy seconds and energy) is its SM utilization over everyone's where NVML gives
it, else its memory over everyone's, else 1. CPU energy is RAPL package + DRAM (else the TDP
model) times the run's share of the host's busy CPU time. Steps come from ``run.step()``: a
step's duration is the time since the same process's previous step (the first one: since the
run started).
"""

from __future__ import annotations

import getpass
import os
import socket
from collections.abc import Sequence
from typing import Any

from computewatch.accounting.cpu_power import CpuPowerModel
from computewatch.analysis.summary_types import RunSummary
from computewatch.fleet.node import IDLE_UTILIZATION
from computewatch.metrics.exposition import LatestSamples
from computewatch.metrics.families import (
    GpuCounters,
    counter_delta,
    device_labels,
    gpu_samples,
    gpu_value_key,
    reading_energy_method,
    with_device,
)
from computewatch.metrics.model import MetricSample, MetricsSink
from computewatch.metrics.server import MetricsServer, ServerSecurity
from computewatch.readings import Labels
from computewatch.sampling.observers import RunInfo, RunObserver, SamplerTick
from computewatch.sources.rapl import SUMMED_DOMAINS

__all__ = ["PrometheusSink", "RunExport", "prometheus_sink", "run_observer"]

_HOST = {
    "host_memory_used_bytes": "computewatch_host_memory_used_bytes",
    "host_memory_total_bytes": "computewatch_host_memory_total_bytes",
    "host_swap_used_bytes": "computewatch_host_swap_used_bytes",
}


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.getuid())


class RunExport:
    """A :class:`~computewatch.sampling.observers.RunObserver`: forwards each tick as samples."""

    def __init__(
        self, sinks: Sequence[MetricsSink], *, filesystems: Sequence[str] = ("/",)
    ) -> None:
        self.sinks = list(sinks)
        self._filesystems = tuple(filesystems)
        self._node = socket.gethostname()
        self._job_lbl: Labels = ()
        self._info_lbl: Labels = ()
        self._gpu_lbl: dict[str, Labels] = {}
        self._simulated = False
        self._last_mono: float | None = None
        self._start_mono: float | None = None
        self._started_at = 0.0
        self._last_step: dict[int, float] = {}
        self._gpu_energy: dict[str, float] = {}
        self._gpu_counters = GpuCounters()
        self._rapl: float | None = None
        self._host_busy: float | None = None
        self._host_total: float | None = None
        self._tree_cpu: float | None = None
        self._model: CpuPowerModel | None = None
        self.steps = 0.0
        self.step_time = 0.0
        self.flops = 0.0
        self.gpu_seconds = 0.0
        self.busy = 0.0
        self.idle = 0.0
        self.energy = 0.0

    # -- RunObserver --------------------------------------------------------------------------
    def start(self, run: RunInfo) -> None:
        facts = run.facts
        self._node = str(facts.get("hostname") or self._node)
        team = run.tags.get("team", "")
        self._job_lbl = (
            ("job", run.run_id),
            ("node", self._node),
            ("team", team),
            ("user", _user()),
        )
        info = dict(self._job_lbl)
        info.update(
            kind="computewatch",
            slurm_account=os.environ.get("SLURM_JOB_ACCOUNT", ""),
            namespace="",
            pod="",
            project=run.tags.get("project", ""),
        )
        self._info_lbl = tuple(sorted(info.items()))
        backend = str(facts.get("gpu_backend") or "")
        self._simulated = backend.startswith(("fake:", "replay:"))
        for d in facts.get("gpus") or []:
            if isinstance(d, dict) and d.get("uuid"):
                self._gpu_label(str(d["uuid"]), d.get("index"), d.get("name"), d.get("simulated"))
        self._started_at = run.started_at
        self._model = CpuPowerModel.for_cpu(
            str(facts.get("cpu_model") or "unknown"), int(facts.get("logical_cpus") or 1)
        )

    def on_tick(self, tick: SamplerTick) -> None:
        samples = self.samples(tick)
        for sink in list(self.sinks):
            try:
                sink.on_metrics(tick.wall, samples)
            except Exception:
                self.sinks.remove(sink)  # one failing sink does not stop the others
        if not self.sinks:
            raise RuntimeError("every metrics sink failed")

    def finish(self, status: str, summary: RunSummary | None) -> None:
        for sink in self.sinks:
            try:
                sink.close()
            except Exception:
                pass

    # -- mapping ------------------------------------------------------------------------------
    def _gpu_label(self, uuid: str, index: Any, name: Any, simulated: Any) -> Labels:
        lbl = device_labels(
            uuid, index, name, self._node, simulated=bool(simulated or self._simulated)
        )
        self._gpu_lbl[uuid] = lbl
        return lbl

    def samples(self, tick: SamplerTick) -> list[MetricSample]:
        """The exported samples of one tick (counters updated)."""
        if self._start_mono is None:
            self._start_mono = tick.mono - max(tick.wall - self._started_at, 0.0)
        dt = 0.0 if self._last_mono is None else max(tick.mono - self._last_mono, 0.0)
        self._last_mono = tick.mono
        out: list[MetricSample] = []
        node = (("node", self._node),)
        gpus: dict[str, dict[str, float]] = {}
        e_method: dict[str, str | None] = {}  # counter, polled or modeled, as the source says
        mine_mem: dict[str, float] = {}
        mine_sm: dict[str, float] = {}
        tree: dict[str, float] = {}
        busy = total = rapl = 0.0
        have_rapl = have_host = False
        for r in tick.readings:
            name = r.name
            if name.startswith(("gpu_", "tpu_")):  # a TPU chip's HBM bandwidth too
                ld = dict(r.labels)
                uuid = ld.get("gpu", "")
                if name == "gpu_process_memory_used_bytes":
                    mine_mem[uuid] = mine_mem.get(uuid, 0.0) + r.value
                elif name == "gpu_process_sm_utilization_ratio":
                    mine_sm[uuid] = mine_sm.get(uuid, 0.0) + r.value
                elif "pid" not in ld:
                    gpus.setdefault(uuid, {})[gpu_value_key(name, ld)] = r.value
                    if name == "gpu_energy_joules_total":
                        e_method[uuid] = reading_energy_method(name, ld)
            elif name.startswith("tree_"):
                tree[name] = r.value
            elif name == "host_cpu_seconds_total":
                have_host = True
                total += r.value
                if dict(r.labels).get("mode") not in ("idle", "iowait"):
                    busy += r.value
            elif name in _HOST:
                out.append(MetricSample(_HOST[name], node, r.value))
            elif (
                name == "cpu_energy_joules_total" and dict(r.labels).get("domain") in SUMMED_DOMAINS
            ):
                have_rapl = True
                rapl += r.value
                lbl = tuple(sorted((*r.labels, ("node", self._node))))
                out.append(MetricSample("computewatch_cpu_energy_joules_total", lbl, r.value))
        # host CPU
        busy_d = util = None
        if have_host:
            if self._host_busy is not None and self._host_total is not None:
                busy_d = max(busy - self._host_busy, 0.0)
                td = total - self._host_total
                if td > 0:
                    util = min(busy_d / td, 1.0)
                    out.append(MetricSample("computewatch_host_cpu_utilization_ratio", node, util))
            self._host_busy, self._host_total = busy, total
        cpu = tree.get("tree_cpu_seconds_total")
        cpu_d = 0.0
        if cpu is not None:
            cpu_d = 0.0 if self._tree_cpu is None else max(cpu - self._tree_cpu, 0.0)
            self._tree_cpu = cpu
        cpu_e = 0.0
        if have_rapl:
            cpu_e = 0.0 if self._rapl is None else max(rapl - self._rapl, 0.0)
            self._rapl = rapl
        elif util is not None and self._model is not None:
            cpu_e = self._model.watts(util) * dt
        if cpu_e > 0 and busy_d:
            self.energy += cpu_e * min(cpu_d / busy_d, 1.0)
        # GPUs
        gpu_mem_total = 0.0
        sm_job: dict[str, float] = {}
        for uuid, values in gpus.items():
            lbl = self._gpu_lbl.get(uuid) or self._gpu_label(uuid, None, None, None)
            held = uuid in mine_mem
            process_sm = None
            if uuid in mine_sm:
                process_sm = mine_sm[uuid] + values.get(
                    "gpu_other_processes_sm_utilization_ratio", 0.0
                )
            gpu_samples(
                out,
                lbl,
                values,
                allocated=held,
                process_sm=process_sm,
                dt=dt,
                counters=self._gpu_counters,
                energy_method=e_method.get(uuid),
            )
            e_d = counter_delta(self._gpu_energy, uuid, values.get("gpu_energy_joules_total"))
            if not held:
                continue
            gpu_mem_total += mine_mem[uuid]
            if uuid in mine_sm:  # the run's processes' SM samples on this GPU (DCGM's per job)
                sm_job[uuid] = min(mine_sm[uuid], 1.0)
            share = 1.0
            other_sm = values.get("gpu_other_processes_sm_utilization_ratio")
            other_mem = values.get("gpu_other_processes_memory_used_bytes")
            if uuid in mine_sm and other_sm is not None and mine_sm[uuid] + other_sm > 0:
                share = mine_sm[uuid] / (mine_sm[uuid] + other_sm)
            elif other_mem is not None and mine_mem[uuid] + other_mem > 0:
                share = mine_mem[uuid] / (mine_mem[uuid] + other_mem)
            if dt > 0:
                self.gpu_seconds += dt
                u = values.get("gpu_utilization_ratio")
                if u is not None:
                    self.busy += u * dt * share
                    if u < IDLE_UTILIZATION:
                        self.idle += dt
                self.energy += e_d * share
        # steps
        for ev in tick.steps:
            prev = self._last_step.get(ev.pid, self._start_mono)
            self.steps += 1
            self.step_time += max(ev.mono - prev, 0.0)
            self._last_step[ev.pid] = ev.mono
            if ev.flops:
                self.flops += ev.flops
        job = self._job_lbl
        add = out.append
        add(MetricSample("computewatch_job_info", self._info_lbl, 1.0))
        if cpu is not None:
            add(MetricSample("computewatch_job_cpu_seconds_total", job, cpu))
        if "tree_resident_memory_bytes" in tree:
            add(
                MetricSample(
                    "computewatch_job_memory_bytes", job, tree["tree_resident_memory_bytes"]
                )
            )
        if "tree_processes" in tree:
            add(MetricSample("computewatch_job_processes", job, tree["tree_processes"]))
        add(MetricSample("computewatch_job_gpu_seconds_total", job, self.gpu_seconds))
        add(MetricSample("computewatch_job_gpu_busy_seconds_total", job, self.busy))
        add(MetricSample("computewatch_job_gpu_idle_seconds_total", job, self.idle))
        add(MetricSample("computewatch_job_gpu_memory_used_bytes", job, gpu_mem_total))
        add(MetricSample("computewatch_job_energy_joules_total", job, self.energy))
        for uuid, sm in sm_job.items():
            slbl = with_device(job, self._gpu_lbl.get(uuid), uuid, method="nvml_process_samples")
            add(MetricSample("computewatch_job_gpu_sm_active_ratio", slbl, sm))
        add(MetricSample("computewatch_job_steps_total", job, self.steps))
        add(MetricSample("computewatch_job_step_time_seconds_total", job, self.step_time))
        if self.flops:
            flbl = tuple(sorted((*job, ("method", "counted"))))
            add(MetricSample("computewatch_job_flops_total", flbl, self.flops))
        for mount in self._filesystems:
            try:
                st = os.statvfs(mount)
            except OSError:
                continue
            lbl = (("mountpoint", mount), ("node", self._node))
            add(MetricSample("computewatch_filesystem_avail_bytes", lbl, st.f_bavail * st.f_frsize))
            add(MetricSample("computewatch_filesystem_size_bytes", lbl, st.f_blocks * st.f_frsize))
        return out


def run_observer(sinks: list[MetricsSink]) -> RunObserver:
    """An observer of a run that hands each tick's samples to ``sinks`` (closed at the end)."""
    return RunExport(sinks)


class PrometheusSink:
    """Serves the latest samples on ``/metrics`` (:class:`MetricsServer`) until closed."""

    def __init__(self, listen: str, security: ServerSecurity | None = None) -> None:
        self.latest = LatestSamples()
        self.server = MetricsServer(listen, self.latest, security)

    @property
    def url(self) -> str:
        return self.server.url

    def on_metrics(self, now: float, samples: Sequence[MetricSample]) -> None:
        self.latest.on_metrics(now, samples)

    def close(self) -> None:
        self.server.close()


def prometheus_sink(
    listen: str,
    *,
    token_file: str | None = None,
    tls_cert: str | None = None,
    tls_key: str | None = None,
) -> PrometheusSink:
    """A sink serving ``/metrics`` on ``listen`` (``HOST:PORT``, or a port on 127.0.0.1) now,
    with the agent's rules: a token file and a TLS key only their owner can read or write.
    Raises :class:`computewatch.metrics.server.ServerError` (a ValueError) for an unusable
    address, token file or TLS pair, with the reason."""
    security = ServerSecurity.from_files(
        token_file,
        tls_cert,
        tls_key,
        flags=("--prometheus-tls-cert", "--prometheus-tls-key"),
    )
    return PrometheusSink(listen, security)
