"""The run summary: what a run used, computed from the store alone.

Every field is documented in ``docs/summary.md``. Bump ``SUMMARY_SCHEMA_VERSION`` when a field
changes meaning or is removed (adding a field does not bump it).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Literal, cast

from computewatch.analysis.aggregates import GpuFigures, RunAggregates, aggregates_from_store
from computewatch.analysis.common import iso, percentile
from computewatch.analysis.steps import steps_sections
from computewatch.analysis.summary_types import (
    CpuStats,
    DiskStats,
    GpuDevice,
    GpuStats,
    HostInfo,
    MemoryStats,
    NetworkStats,
    RunSummary,
    SampleStats,
    StepStats,
    stored_summary,
)
from computewatch.catalog.clock_events import decode_clock_events
from computewatch.store import RUNNING, RunRow, SeriesRow, Store

__all__ = [
    "build_summary",
    "current_summary",
    "gpu_stats",
    "iso",
    "percentile",
    "step_stats",
    "summary_of",
]

SUMMARY_SCHEMA_VERSION = 1


def build_summary(store: Store, run: RunRow) -> RunSummary:
    """Compute a run's summary from its stored samples and steps."""
    if run.summary is not None and run.samples_deleted_at is not None:
        # samples are gone; the summary kept at gc time is all there is
        return stored_summary(run.summary)

    return summary_of(store, run, aggregates_from_store(store, run))


def current_summary(store: Store, run: RunRow) -> RunSummary:
    """What ``computewatch show --json`` prints for a run: the summary stored when it ended,
    else (a running run, or one that ended without one) built from its samples now."""
    if run.summary is not None and run.status != RUNNING:
        return stored_summary(run.summary)
    return build_summary(store, run)


def summary_of(store: Store, run: RunRow, agg: RunAggregates) -> RunSummary:
    """A run's summary from its aggregates: kept by the sampler while the run went on, or
    rebuilt from the store (:func:`build_summary`). Reads no samples, and the steps, phases
    and requests only for the sections that have something to show."""
    last, delta, peak = agg.last, agg.delta, agg.peak
    host = cast(HostInfo, dict(run.host))
    allowed = float(host.get("allowed_cores") or host.get("logical_cpus") or 1.0)
    ended = run.ended_at
    if ended is None:
        ended = run.data_until if run.status != RUNNING else time.time()
    duration = max((ended or run.started_at) - run.started_at, 0.0)

    cpu_total = agg.cpu_seconds()
    util_max = agg.cpu_window_max()
    if util_max is not None and cpu_total is not None and duration > 0:
        # A run's last, partial window is not among the >= 1 s windows; the mean covers it.
        util_max = max(util_max, cpu_total / duration)
    cpu: CpuStats = {
        "seconds_total": _round(cpu_total),
        "utilization_mean": _round(cpu_total / duration / allowed)
        if cpu_total is not None and duration > 0
        else None,
        "utilization_max": _round(util_max / allowed) if util_max is not None else None,
        "allowed_cores": allowed,
        "method": agg.cpu_method(),
    }
    peak_tree = peak("tree_resident_memory_bytes")
    peak_proc = last("tree_process_peak_resident_memory_bytes")
    peak_rss = max((v for v in (peak_tree, peak_proc) if v is not None), default=None)
    memory: MemoryStats = {
        "peak_rss_bytes": _int(peak_rss),
        "peak_host_used_bytes": _int(peak("host_memory_used_bytes")),
        "host_total_bytes": _int(last("host_memory_total_bytes")),
    }
    disk: DiskStats = {
        "read_bytes": _int(last("tree_read_bytes_total")),
        "write_bytes": _int(last("tree_written_bytes_total")),
        "host_read_bytes": _int(delta("host_disk_read_bytes_total")),
        "host_write_bytes": _int(delta("host_disk_written_bytes_total")),
    }
    network: NetworkStats = {
        "recv_bytes": _int(delta("host_network_receive_bytes_total")),
        "sent_bytes": _int(delta("host_network_transmit_bytes_total")),
        "scope": "host",
    }
    data_until = run.data_until
    samples: SampleStats = {
        "count": agg.ticks,
        "interval_seconds": run.interval_seconds,
        "series": agg.series,
        "data_until": iso(data_until),
    }
    if agg.has_steps_sections():
        sections = steps_sections(store, run)  # phases, ranks, requests (steps.py)
    else:  # what steps_sections gives a run without phases, ranks or requests
        sections = {"phases": None, "ranks": None, "requests": None}
    return {
        "schema_version": SUMMARY_SCHEMA_VERSION,
        "id": run.id,
        "name": run.name,
        "tags": run.tags,
        "command": run.command,
        "cwd": run.cwd,
        "exit_code": run.exit_code,
        "status": run.status,
        "started_at": iso(run.started_at),
        "ended_at": iso(run.ended_at),
        "duration_seconds": _round(duration),
        "host": host,
        "cpu": cpu,
        "memory": memory,
        "disk": disk,
        "network": network,
        "gpus": _gpus_of(run, agg),
        "steps": _steps_of(store, run, agg),
        "phases": sections["phases"],
        "ranks": sections["ranks"],
        "requests": sections["requests"],
        "samples": samples,
        "notes": list(run.notes),
    }


def step_stats(store: Store, run: RunRow) -> StepStats:
    """Step count, step-time distribution and throughput over every process that reported."""
    agg = RunAggregates()
    agg.add_writers((pid, t, meta) for pid, (t, meta) in store.writers(run.key).items())
    agg.add_steps((s.pid, s.mono, s.wall, s.samples, s.tokens) for s in store.steps(run.key))
    return _step_section(agg)


def _steps_of(store: Store, run: RunRow, agg: RunAggregates) -> StepStats:
    """The steps section from the aggregates; from the store when a process's steps came in
    out of time order (the store sorts them)."""
    if agg.steps_unordered:
        return step_stats(store, run)
    return _step_section(agg)


def _step_section(agg: RunAggregates) -> StepStats:
    f = agg.step_figures()
    if f is None:
        return {"count": 0}
    out: StepStats = {"count": f.steps, "processes": f.processes}
    if f.durations:
        out["step_time_seconds"] = {
            "mean": _round(f.mean, 6),
            "p50": _round(f.p50, 6),
            "p90": _round(f.p90, 6),
            "p99": _round(f.p99, 6),
            "max": _round(f.max, 6),
        }
    span = f.span
    out["steps_per_second"] = _round(f.steps / span, 4) if span > 0 else None
    if f.samples_total is not None:
        out["samples_total"] = f.samples_total
        out["samples_per_second"] = _round(f.samples_total / span, 4) if span > 0 else None
    if f.tokens_total is not None:
        out["tokens_total"] = f.tokens_total
        out["tokens_per_second"] = _round(f.tokens_total / span, 4) if span > 0 else None
    return out


def _round(v: float | None, nd: int = 4) -> float | None:
    if v is None or math.isnan(v):
        return None
    return round(v, nd)


def _int(v: float | None) -> int | None:
    return None if v is None else int(v)


def _gpu_share(
    mine_sm: dict[int, float], mine_mem: dict[int, float], other: dict[str, dict[int, float]]
) -> tuple[float, str]:
    """The run's share of a GPU: whole when no other process was seen on it; else its share of
    the SM utilization of all processes, or failing that of their memory."""
    count = other.get("gpu_other_processes") or {}
    if not count or max(count.values()) == 0:
        return 1.0, "alone on the device: charged whole"
    o_sm = other.get("gpu_other_processes_sm_utilization_ratio") or {}
    ours, theirs = sum(mine_sm.values()), sum(o_sm.get(q, 0.0) for q in mine_sm)
    if ours + theirs > 0:
        share = ours / (ours + theirs)
        return round(share, 4), f"shared with other processes: its share of SM use ({share:.1%})"
    o_mem = other.get("gpu_other_processes_memory_used_bytes") or {}
    ours, theirs = sum(mine_mem.values()), sum(o_mem.get(q, 0.0) for q in mine_mem)
    if ours + theirs > 0:
        share = ours / (ours + theirs)
        return round(share, 4), f"shared with other processes: its share of memory ({share:.1%})"
    return 1.0, "shared, but no per-process figures: charged whole"


_GpuMean = Literal[
    "utilization_mean",
    "power_mean_watts",
    "sm_active_mean",
    "tensor_active_mean",
    "sm_occupancy_mean",
    "dram_active_mean",
    "hbm_bandwidth_mean",
]
_GPU_MEANS: dict[str, _GpuMean] = {
    "gpu_utilization_ratio": "utilization_mean",
    "gpu_power_watts": "power_mean_watts",
    "gpu_sm_active_ratio": "sm_active_mean",
    "gpu_tensor_active_ratio": "tensor_active_mean",
    "gpu_sm_occupancy_ratio": "sm_occupancy_mean",
    "gpu_dram_active_ratio": "dram_active_mean",
    "tpu_hbm_bandwidth_utilization_ratio": "hbm_bandwidth_mean",
}
# Clock-event reasons that are not throttling: the GPU idles, or clocks were set on purpose.
_NOT_THROTTLE = frozenset(
    {"gpu_idle", "applications_clocks_setting", "display_clock_setting", "sync_boost"}
)


def _gpu_series(
    run: RunRow, series: Sequence[SeriesRow]
) -> tuple[list[GpuDevice], list[SeriesRow]]:
    """The GPUs a summary covers (those the run used; all with ``--all-gpus``) and their
    series."""
    devices = run.host.get("gpus") or []
    chosen = set(run.host.get("gpus_used") or [])
    every = bool(run.host.get("gpu_all"))
    picked: list[GpuDevice] = [d for d in devices if every or d.get("uuid") in chosen]
    uuids = {d["uuid"] for d in picked}
    wanted = [
        s for s in series if s.name.startswith(("gpu_", "tpu_")) and s.labels.get("gpu") in uuids
    ]
    return picked, wanted


def gpu_stats(
    store: Store,
    run: RunRow,
    series: Sequence[SeriesRow],
    seq_mono: dict[int, float],
    pts: dict[int, list[tuple[int, float]]] | None = None,
) -> list[GpuStats]:
    """Per GPU the run used (every monitored GPU with ``--all-gpus``): utilization, memory,
    power, energy with its method, throttling by reason and, where read, GPM activity.
    ``pts``: the points of those series when the caller has read them already."""
    wanted = _gpu_series(run, series)[1]
    if pts is None:
        pts = store.points_of(run.key, [s.idx for s in wanted])
    agg = RunAggregates()
    for s in wanted:
        agg.add_series(s.idx, s.name, s.labels)
    rows = sorted((seq, s.idx, v) for s in wanted for seq, v in pts.get(s.idx, ()))
    agg.add_samples(((None, seq, idx, v) for seq, idx, v in rows), seq_mono)
    return _gpus_of(run, agg)


def _gpus_of(run: RunRow, agg: RunAggregates) -> list[GpuStats]:
    """The ``gpus`` section from the aggregates: per GPU the summary covers, its figures."""
    picked = _gpu_series(run, [])[0]
    chosen = set(run.host.get("gpus_used") or [])
    every = bool(run.host.get("gpu_all"))
    out: list[GpuStats] = []
    for d in picked:
        uuid = d["uuid"]
        g: GpuStats = {
            "uuid": uuid,
            "index": d.get("index"),
            "name": d.get("name"),
            "model": d.get("model"),
            "simulated": bool(d.get("simulated")),
            "mig_parent_uuid": d.get("mig_parent_uuid"),
            "scope": "device" if every or uuid not in chosen else "used by the run",
            # filled in below from the samples; these stay when none were read
            "energy_joules": None,
            "energy_method": None,
            "throttle_seconds": {},
            "share": 1.0,
            "share_rule": "",
        }
        fig: GpuFigures | None = agg.gpu(uuid)
        for s in fig.series if fig is not None else ():
            if s.name in _GPU_MEANS:
                g[_GPU_MEANS[s.name]] = _round(s.mean)
            elif s.name == "gpu_memory_used_bytes":
                g["memory_peak_bytes"] = _int(s.peak)
            elif s.name == "gpu_memory_total_bytes":
                g["memory_total_bytes"] = _int(s.last)
            elif s.name == "gpu_energy_joules_total":
                # A counter that stops answering mid-run goes on as method="polled": a second
                # series, whose part adds up; any polled part makes the whole figure polled.
                joules = (g.get("energy_joules") or 0.0) + s.last - s.first
                g["energy_joules"] = _round(joules, 3)
                method = s.labels.get("method", "counter")
                if g.get("energy_method") in (None, "counter"):
                    g["energy_method"] = method
            elif s.name == "gpu_clock_event_reasons":
                throttle: dict[str, float] = {}
                for mask, seconds in s.seconds_by_mask.items():
                    for reason in decode_clock_events(mask):
                        if reason not in _NOT_THROTTLE:
                            throttle[reason] = throttle.get(reason, 0.0) + seconds
                g["throttle_seconds"] = {k: round(v, 3) for k, v in sorted(throttle.items())}
        if fig is not None and fig.process_memory_peak_bytes is not None:
            g["process_memory_peak_bytes"] = _int(fig.process_memory_peak_bytes)
        if fig is not None:
            g["share"], g["share_rule"] = _gpu_share(fig.process_sm, fig.process_memory, fig.other)
        else:
            g["share"], g["share_rule"] = _gpu_share({}, {}, {})
        out.append(g)
    return out
