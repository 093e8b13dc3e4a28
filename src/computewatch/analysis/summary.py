"""The run summary: what a run used, computed from the store alone.

Every field is documented in ``docs/summary.md``. Bump ``SUMMARY_SCHEMA_VERSION`` when a field
changes meaning or is removed (adding a field does not bump it).
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Sequence
from typing import Literal, cast

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
from computewatch.store import RUNNING, RunRow, SeriesRow, Store

__all__ = ["build_summary", "gpu_stats", "iso", "percentile", "step_stats"]

SUMMARY_SCHEMA_VERSION = 1
MIN_WINDOW_SECONDS = 1.0  # utilization_max is taken over windows at least this long

_TREE = (
    "tree_cpu_seconds_total",
    "tree_resident_memory_bytes",
    "tree_process_peak_resident_memory_bytes",
    "tree_read_bytes_total",
    "tree_written_bytes_total",
    "host_memory_used_bytes",
    "host_memory_total_bytes",
)
_HOST_SUMS = (
    "host_disk_read_bytes_total",
    "host_disk_written_bytes_total",
    "host_network_receive_bytes_total",
    "host_network_transmit_bytes_total",
)


def build_summary(store: Store, run: RunRow) -> RunSummary:
    """Compute a run's summary from its stored samples and steps."""
    if run.summary is not None and run.samples_deleted_at is not None:
        # samples are gone; the summary kept at gc time is all there is
        return stored_summary(run.summary)

    ticks = store.ticks(run.key)
    series = store.series(run.key)
    wanted: dict[int, str] = {}
    for s in series:
        if s.name in _TREE or (s.name in _HOST_SUMS and s.labels.get("interface") != "lo"):
            wanted[s.idx] = s.name
    gpu_wanted = _gpu_series(run, series)[1]
    # One pass over the run's samples for everything the summary reads (a long run's samples
    # are many millions of rows).
    pts = store.points_of(run.key, [*wanted, *(s.idx for s in gpu_wanted)])
    seq_mono = {seq: mono for seq, mono, _ in ticks}

    by_name: dict[str, list[list[tuple[int, float]]]] = {}
    for idx, name in wanted.items():
        by_name.setdefault(name, []).append(pts[idx])

    def last(name: str) -> float | None:
        lists = by_name.get(name)
        if not lists:
            return None
        return sum(p[-1][1] for p in lists if p)

    def delta(name: str) -> float | None:
        lists = by_name.get(name)
        if not lists:
            return None
        return sum(p[-1][1] - p[0][1] for p in lists if p)

    def peak(name: str) -> float | None:
        lists = by_name.get(name)
        if not lists or not lists[0]:
            return None
        return max(v for _, v in lists[0])

    host = cast(HostInfo, dict(run.host))
    allowed = float(host.get("allowed_cores") or host.get("logical_cpus") or 1.0)
    ended = run.ended_at
    if ended is None:
        ended = run.data_until if run.status != RUNNING else time.time()
    duration = max((ended or run.started_at) - run.started_at, 0.0)

    cpu_pts = (by_name.get("tree_cpu_seconds_total") or [[]])[0]
    cpu_total = cpu_pts[-1][1] if cpu_pts else None
    util_max = _max_window_rate(cpu_pts, seq_mono)
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
        "count": len(ticks),
        "interval_seconds": run.interval_seconds,
        "series": len(series),
        "data_until": iso(data_until),
    }
    sections = steps_sections(store, run)  # phases, ranks, requests (steps.py)
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
        "gpus": gpu_stats(store, run, series, seq_mono, pts),
        "steps": step_stats(store, run),
        "phases": sections["phases"],
        "ranks": sections["ranks"],
        "requests": sections["requests"],
        "samples": samples,
        "notes": list(run.notes),
    }


def step_stats(store: Store, run: RunRow) -> StepStats:
    """Step count, step-time distribution and throughput over every process that reported."""
    steps = store.steps(run.key)
    if not steps:
        return {"count": 0}
    writers = store.writers(run.key)
    durations: list[float] = []
    first: float | None = None
    last_t: float | None = None
    samples_total = 0.0
    tokens_total = 0.0
    have_samples = have_tokens = False
    prev_pid: int | None = None
    prev_t = 0.0
    for s in steps:  # ordered by pid, then time
        if s.pid != prev_pid:
            start = writers.get(s.pid, (None, {}))[0]
            prev_t = start if start is not None and start <= s.mono else math.nan
            prev_pid = s.pid
            t0 = s.mono if math.isnan(prev_t) else prev_t  # no known start: its first step
            first = t0 if first is None or t0 < first else first
        if not math.isnan(prev_t):
            durations.append(s.mono - prev_t)
        prev_t = s.mono
        last_t = s.mono if last_t is None or s.mono > last_t else last_t
        if s.samples is not None:
            samples_total += s.samples
            have_samples = True
        if s.tokens is not None:
            tokens_total += s.tokens
            have_tokens = True
    if first is None or math.isnan(first):
        first = min(s.mono for s in steps)
    span = (last_t or first) - first
    durations.sort()
    out: StepStats = {"count": len(steps), "processes": len({s.pid for s in steps})}
    if durations:
        out["step_time_seconds"] = {
            "mean": _round(sum(durations) / len(durations), 6),
            "p50": _round(percentile(durations, 0.50), 6),
            "p90": _round(percentile(durations, 0.90), 6),
            "p99": _round(percentile(durations, 0.99), 6),
            "max": _round(durations[-1], 6),
        }
    out["steps_per_second"] = _round(len(steps) / span, 4) if span > 0 else None
    if have_samples:
        out["samples_total"] = samples_total
        out["samples_per_second"] = _round(samples_total / span, 4) if span > 0 else None
    if have_tokens:
        out["tokens_total"] = tokens_total
        out["tokens_per_second"] = _round(tokens_total / span, 4) if span > 0 else None
    return out


def _max_window_rate(
    points: Sequence[tuple[int, float]], seq_mono: dict[int, float]
) -> float | None:
    """Highest rate of a counter over consecutive windows of at least MIN_WINDOW_SECONDS
    (shorter windows would mostly show the kernel's 10 ms accounting granularity)."""
    best: float | None = None
    if len(points) < 2:
        return None
    start_t = seq_mono.get(points[0][0])
    start_v = points[0][1]
    for seq, v in points[1:]:
        t = seq_mono.get(seq)
        if t is None or start_t is None:
            continue
        if t - start_t >= MIN_WINDOW_SECONDS:
            r = (v - start_v) / (t - start_t)
            best = r if best is None or r > best else best
            start_t, start_v = t, v
    if best is None:  # the run was shorter than one window
        t0 = seq_mono.get(points[0][0])
        t1 = seq_mono.get(points[-1][0])
        if t0 is not None and t1 is not None and t1 > t0:
            best = (points[-1][1] - points[0][1]) / (t1 - t0)
    return best


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
]
_GPU_MEANS: dict[str, _GpuMean] = {
    "gpu_utilization_ratio": "utilization_mean",
    "gpu_power_watts": "power_mean_watts",
    "gpu_sm_active_ratio": "sm_active_mean",
    "gpu_tensor_active_ratio": "tensor_active_mean",
    "gpu_sm_occupancy_ratio": "sm_occupancy_mean",
    "gpu_dram_active_ratio": "dram_active_mean",
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
    wanted = [s for s in series if s.name.startswith("gpu_") and s.labels.get("gpu") in uuids]
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
    from computewatch.sources.nvidia import decode_clock_events

    picked, wanted = _gpu_series(run, series)
    if not picked:
        return []
    chosen = set(run.host.get("gpus_used") or [])
    every = bool(run.host.get("gpu_all"))
    if pts is None:
        pts = store.points_of(run.key, [s.idx for s in wanted])
    out: list[GpuStats] = []
    for d in picked:
        uuid = d["uuid"]
        mine = [s for s in wanted if s.labels.get("gpu") == uuid]
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
        proc_mem: dict[int, float] = {}
        proc_sm: dict[int, float] = {}
        other: dict[str, dict[int, float]] = {}
        for s in mine:
            values = [v for _, v in pts[s.idx]]
            if not values:
                continue
            if s.name in _GPU_MEANS:
                g[_GPU_MEANS[s.name]] = _round(sum(values) / len(values))
            elif s.name == "gpu_memory_used_bytes":
                g["memory_peak_bytes"] = _int(max(values))
            elif s.name == "gpu_memory_total_bytes":
                g["memory_total_bytes"] = _int(values[-1])
            elif s.name == "gpu_energy_joules_total":
                # A counter that stops answering mid-run goes on as method="polled": a second
                # series, whose part adds up; any polled part makes the whole figure polled.
                joules = (g.get("energy_joules") or 0.0) + values[-1] - values[0]
                g["energy_joules"] = _round(joules, 3)
                method = s.labels.get("method", "counter")
                if g.get("energy_method") in (None, "counter"):
                    g["energy_method"] = method
            elif s.name == "gpu_process_memory_used_bytes":
                for seq, v in pts[s.idx]:
                    proc_mem[seq] = proc_mem.get(seq, 0.0) + v
            elif s.name == "gpu_process_sm_utilization_ratio":
                for seq, v in pts[s.idx]:
                    proc_sm[seq] = proc_sm.get(seq, 0.0) + v
            elif s.name.startswith("gpu_other_processes"):
                other[s.name] = dict(pts[s.idx])
            elif s.name == "gpu_clock_event_reasons":
                throttle: dict[str, float] = {}
                p = pts[s.idx]
                for (seq, mask), (nseq, _) in itertools.pairwise(p):
                    t0, t1 = seq_mono.get(seq), seq_mono.get(nseq)
                    if t0 is None or t1 is None:
                        continue
                    for reason in decode_clock_events(mask):
                        if reason not in _NOT_THROTTLE:
                            throttle[reason] = throttle.get(reason, 0.0) + (t1 - t0)
                g["throttle_seconds"] = {k: round(v, 3) for k, v in sorted(throttle.items())}
        if proc_mem:
            g["process_memory_peak_bytes"] = _int(max(proc_mem.values()))
        g["share"], g["share_rule"] = _gpu_share(proc_sm, proc_mem, other)
        g.setdefault("energy_joules", None)
        g.setdefault("energy_method", None)
        g.setdefault("throttle_seconds", {})
        out.append(g)
    return out
