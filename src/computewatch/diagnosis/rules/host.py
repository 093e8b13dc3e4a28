"""The host: one core saturated while the others idle, memory pressure or swapping, I/O waits."""

from __future__ import annotations

import bisect
import itertools

from computewatch.config.thresholds import Thresholds
from computewatch.diagnosis.findings import Evidence, Finding, Saving, TimeRange
from computewatch.diagnosis.loader import NotApplicable, RunData, Series, rates, stretches
from computewatch.diagnosis.rules import build, pct
from computewatch.diagnosis.stats import median
from computewatch.units import format_bytes, format_seconds

_NOT_BUSY = frozenset({"idle", "iowait"})
SINGLE_CORE_MAX = 1.15  # above this the tree uses more than one core's worth


def _per_interval(series: list[Series]) -> dict[float, tuple[float, float]]:
    """Counter rates summed over ``series``, keyed by interval end: end -> (start, rate)."""
    out: dict[float, tuple[float, float]] = {}
    for s in series:
        for t0, t1, r in rates(s.points):
            prev = out.get(t1)
            out[t1] = (t0, r + (prev[1] if prev else 0.0))
    return out


def _top3(spans: list[tuple[float, float]]) -> tuple[TimeRange, ...]:
    return tuple(TimeRange(a, b) for a, b in sorted(spans, key=lambda r: r[0] - r[1])[:3])


def cpu_bound(data: RunData, th: Thresholds) -> list[Finding]:
    """Fires when, for ``cpu_bound_share`` of the run, the monitored processes used about one
    core (``single_core_busy`` to 1.15 cores) while the other cores stayed below
    ``other_cores_busy_max``: one thread is the limit."""
    allowed = float((data.summary.get("cpu") or {}).get("allowed_cores") or 1.0)
    if allowed < 2:
        raise NotApplicable("the run was allowed one core: no idle cores to spread work to")
    tree = data.of("tree_cpu_seconds_total")
    if not tree:
        raise NotApplicable("no process-tree CPU series stored")
    tree_rate = _per_interval(tree)
    host = [s for s in data.of("host_cpu_seconds_total") if s.labels.get("mode") not in _NOT_BUSY]
    host_busy = _per_interval(host)
    cpus = {s.labels.get("cpu") for s in host}
    per_cpu = {c: _per_interval([s for s in host if s.labels.get("cpu") == c]) for c in cpus}
    n_host = max(len(cpus), 1)
    flags = []
    others_seen: list[float] = []
    hottest: dict[str, float] = {}
    for t1, (t0, r) in sorted(tree_rate.items()):
        on = th.single_core_busy <= r <= SINGLE_CORE_MAX
        if on and t1 in host_busy and n_host > 1:
            others = max(host_busy[t1][1] - r, 0.0) / (n_host - 1)
            on = others <= th.other_cores_busy_max
            if on:
                others_seen.append(others)
                for c, pts in per_cpu.items():
                    if t1 in pts and c is not None:
                        hottest[c] = hottest.get(c, 0.0) + pts[t1][1] * (t1 - t0)
        flags.append((data.rel(t0), data.rel(t1), on))
    spans = stretches(flags)
    bound = sum(b - a for a, b in spans)
    if data.duration <= 0 or bound / data.duration < th.cpu_bound_share:
        return []
    lines = [
        f"for {format_seconds(bound)} ({pct(bound / data.duration)} of the run) the run's "
        "processes used "
        f"one core's worth ({th.single_core_busy:g} to {SINGLE_CORE_MAX:g} cores) of the "
        f"{allowed:g} allowed",
    ]
    numbers: dict[str, float | int | str | None] = {
        "single_core_seconds": bound,
        "single_core_share": bound / data.duration,
        "allowed_cores": allowed,
    }
    if others_seen:
        lines.append(f"the other cores were {pct(median(others_seen))} busy (median) meanwhile")
        numbers["other_cores_busy_median"] = median(others_seen)
    if hottest:
        core = max(hottest, key=lambda c: hottest[c])
        lines.append(
            f"busiest core: cpu {core} ({format_seconds(hottest[core])} busy in those stretches)"
        )
        numbers["busiest_cpu"] = core
    # Amdahl's law: with a share p of the single-threaded work spread over the allowed cores,
    # that stretch takes (1 - p) + p / cores of its time. The data phase is data_starvation's
    # to win (its workers): only the rest of the step counts here.
    # Only the stretches within the steps can be won: before them (imports, the model's set-up;
    # the first steps, timed from track()'s start) and after them the work is serial by nature,
    # and the suggestion is about the loop. Without steps, the whole stretches count.
    loop = _within_steps(data, spans, th.skip_first_steps)
    data_share = _data_share(data)
    rest = (bound if loop is None else loop) * (1.0 - data_share)
    gain = 1.0 - 1.0 / allowed

    def amdahl(p: float) -> float:
        return rest * p * gain

    saving = Saving(
        amdahl(0.5),
        amdahl(0.0),
        amdahl(1.0),
        f"the single-threaded work spread over the {allowed:g} allowed cores",
        "Amdahl's law over the single-core stretches"
        + (
            ""
            if loop is None
            else f" within the steps ({format_seconds(loop)}; start-up and the end of the run "
            "are serial by nature)"
        )
        + (f" less their data wait ({pct(data_share)}, the loader's to win)" if data_share else "")
        + f": a share p of that work made parallel on {allowed:g} cores saves p x "
        f"(1 - 1/{allowed:g}) of it; p is not measured: 0.5, range 0 to 1",
        "cpu",
        bound,
    )
    return build(
        data,
        th,
        id="cpu_bound",
        title="CPU-bound: one core saturated while the others idle",
        seconds=bound,
        evidence=Evidence(tuple(lines), numbers, _top3(spans)),
        suggestion=(
            "One Python thread is the limit: move preprocessing into DataLoader workers "
            "(num_workers > 0), vectorize per-sample Python loops with tensor operations, avoid "
            "per-step .item()/.cpu() synchronisations and logging, and profile the loop "
            "(py-spy top --pid PID) to find the hot function."
        ),
        saving=saving,
    )


def _within_steps(data: RunData, spans: list[tuple[float, float]], skip: int) -> float | None:
    """Seconds of ``spans`` (from the run's start) within the steps of the process that took
    the most, less its first ``skip`` (timed from track()'s start: the set-up); None without
    enough steps."""
    if not data.steps:
        return None
    times = data.step_times()
    lead = max(times, key=lambda p: len(times[p]))
    steps = times[lead][skip:]
    if not steps:
        return None
    t0, t1 = data.rel(steps[0].start), data.rel(steps[-1].end)
    return sum(max(0.0, min(b, t1) - max(a, t0)) for a, b in spans)


def _data_share(data: RunData) -> float:
    """The share of step time spent in the ``data`` phase (0 without steps or the phase)."""
    if not data.steps or not any(p.name == "data" for p in data.phases):
        return 0.0
    times = data.step_times()
    total = sum(t.seconds for ts in times.values() for t in ts)
    waits = sum(sum(w) for w in data.phase_seconds_by_step(["data"]).values())
    return min(waits / total, 1.0) if total > 0 else 0.0


def memory_pressure(data: RunData, th: Thresholds) -> list[Finding]:
    """Fires when host (or cgroup) memory available stays below ``memory_available_low`` for
    ``memory_pressure_share`` of the run, or swap in use grows by ``swap_growth_bytes``."""
    avail = data.of("host_memory_available_bytes")
    total = data.of("host_memory_total_bytes")
    if not avail or not total:
        raise NotApplicable("no host memory series stored")
    total_b = total[0].points[-1][1] if total[0].points else 0.0
    pressure: dict[float, float] = {}  # tick time -> share available
    if total_b > 0:
        for t, v in avail[0].points:
            pressure[t] = v / total_b
    cg_cur, cg_max = data.of("cgroup_memory_current_bytes"), data.of("cgroup_memory_max_bytes")
    cg_limit = cg_max[0].points[-1][1] if cg_max and cg_max[0].points else None
    cg_peak = None
    if cg_cur and cg_limit:
        for t, v in cg_cur[0].points:
            pressure[t] = min(pressure.get(t, 1.0), max(cg_limit - v, 0.0) / cg_limit)
            cg_peak = v if cg_peak is None else max(cg_peak, v)
    swap = data.of("host_swap_used_bytes")
    swap_pts = swap[0].points if swap else []
    swap_growth = 0.0
    swapping: set[float] = set()
    if swap_pts:
        swap_growth = max(v for _, v in swap_pts) - swap_pts[0][1]
        for (_, v0), (t1, v1) in itertools.pairwise(swap_pts):
            if v1 > v0:
                swapping.add(t1)
    times = sorted(pressure)
    flags = [
        (data.rel(t0), data.rel(t1), pressure[t1] < th.memory_available_low or t1 in swapping)
        for t0, t1 in itertools.pairwise(times)
    ]
    spans = stretches(flags)
    under = sum(b - a for a, b in spans)
    swapped = swap_growth >= th.swap_growth_bytes
    if data.duration <= 0:
        return []
    if under / data.duration < th.memory_pressure_share and not swapped:
        return []
    low = min(pressure.values()) if pressure else None
    lines = [
        f"memory was short for {format_seconds(under)} ({pct(under / data.duration)} of the run)"
    ]
    numbers: dict[str, float | int | str | None] = {"pressure_seconds": under}
    if low is not None:
        lines.append(
            f"lowest memory available: {pct(low)} (threshold {pct(th.memory_available_low)})"
        )
        numbers["memory_available_min_share"] = low
    if cg_limit and cg_peak is not None:
        lines.append(
            f"cgroup memory peak {format_bytes(cg_peak)} of its {format_bytes(cg_limit)} limit"
        )
        numbers["cgroup_memory_peak_bytes"] = cg_peak
    if swap_pts:
        lines.append(f"swap in use grew by {format_bytes(max(swap_growth, 0.0))} during the run")
        numbers["swap_growth_bytes"] = swap_growth
    rss = (data.summary.get("memory") or {}).get("peak_rss_bytes")
    if isinstance(rss, int | float):
        lines.append(f"the run's peak resident memory: {format_bytes(rss)}")
    saving = Saving(
        0.25 * under,
        0.0,
        under,
        "the run's host memory kept under the limit (or a larger limit)",
        "how much memory pressure slows the steps is not measured: a quarter of the time under "
        "pressure, range none to all of it",
        "memory",
        under,
    )
    return build(
        data,
        th,
        id="host_memory_pressure",
        title="Host memory pressure" + (" and swapping" if swapped else ""),
        seconds=under,
        severity="high" if swapped else None,
        keep_small=swapped,
        evidence=Evidence(tuple(lines), numbers, _top3(spans)),
        suggestion=(
            "Use less host memory or get more: each DataLoader worker holds its own copy of "
            "Python-object datasets (keep data in numpy arrays, memory-mapped files or Arrow), "
            "lower prefetch_factor or the number of workers, release cached tensors; raise the "
            "job's memory limit; a training node should not swap."
        ),
        saving=saving,
    )


def io_bound(data: RunData, th: Thresholds) -> list[Finding]:
    """Fires when iowait is at least ``iowait_high`` of the busy-or-waiting CPU time for
    ``io_bound_share`` of the run and, with steps, steps then are ``io_step_slowdown`` times
    slower than the others."""
    host = data.of("host_cpu_seconds_total")
    if not host:
        raise NotApplicable("no per-core host CPU series stored")
    wait = _per_interval([s for s in host if s.labels.get("mode") == "iowait"])
    busy = _per_interval([s for s in host if s.labels.get("mode") not in _NOT_BUSY])
    flags = []
    shares = []
    for t1, (t0, w) in sorted(wait.items()):
        b = busy.get(t1, (t0, 0.0))[1]
        share = w / (w + b) if w + b > 0 else 0.0
        on = share >= th.iowait_high and w >= 0.05  # at least 5 % of one core waiting
        if on:
            shares.append(share)
        flags.append((t0, t1, on))
    spans_mono = stretches(flags)
    io_time = sum(b - a for a, b in spans_mono)
    if data.duration <= 0 or io_time / data.duration < th.io_bound_share:
        return []
    lines = [
        f"iowait was {pct(median(shares))} (median) of the busy-or-waiting CPU time for "
        f"{format_seconds(io_time)} ({pct(io_time / data.duration)} of the run)"
    ]
    numbers: dict[str, float | int | str | None] = {
        "iowait_seconds": io_time,
        "iowait_share_median": median(shares),
    }
    reads = _per_interval(data.of("host_disk_read_bytes_total"))
    in_io = [r for t1, (_, r) in reads.items() if _inside(spans_mono, t1)]
    if in_io:
        lines.append(f"disk reads meanwhile: {median(in_io) / 1e6:,.1f} MB/s (median, host)")
        numbers["disk_read_bytes_per_second_median"] = median(in_io)
    at_stake = io_time
    step_list = [t for ts in data.step_times().values() for t in ts]
    if step_list:
        slow = [t.seconds for t in step_list if _inside(spans_mono, t.end)]
        rest = [t.seconds for t in step_list if not _inside(spans_mono, t.end)]
        if slow and rest:
            ratio = median(slow) / median(rest) if median(rest) > 0 else float("inf")
            if ratio < th.io_step_slowdown:
                return []
            lines.append(
                f"steps during high iowait took {format_seconds(median(slow))} (median), "
                f"{ratio:.1f}x the {format_seconds(median(rest))} of the others"
            )
            numbers["step_slowdown"] = ratio
            at_stake = sum(max(d - median(rest), 0.0) for d in slow)
    if step_list and numbers.get("step_slowdown") is not None:
        saving = Saving(
            at_stake,
            0.5 * at_stake,
            at_stake,
            "the data read from local storage or RAM, in larger pieces",
            "the steps during high iowait come back to the median of the others; low: half of "
            "that (reads still wait some)",
            "loop",
            io_time,
        )
    else:
        saving = Saving(
            0.5 * at_stake,
            0.0,
            at_stake,
            "the data read from local storage or RAM, in larger pieces",
            "without steps, how much of the iowait time the run would win is not measured: "
            "half of it, range none to all",
            "loop",
            io_time,
        )
    return build(
        data,
        th,
        id="io_bound",
        title="I/O-bound: processes waiting on storage",
        seconds=at_stake,
        evidence=Evidence(
            tuple(lines), numbers, _top3([(data.rel(a), data.rel(b)) for a, b in spans_mono])
        ),
        suggestion=(
            "Read less and in larger pieces: copy the data set to local NVMe or RAM first, pack "
            "small files into shards (WebDataset tar shards, Arrow/Parquet, TFRecord), keep more "
            "reads in flight (more DataLoader workers, prefetch_factor) and cache decoded "
            "samples that every epoch reads again."
        ),
        saving=saving,
    )


def _inside(spans: list[tuple[float, float]], t: float) -> bool:
    i = bisect.bisect_right(spans, (t, float("inf"))) - 1
    return i >= 0 and spans[i][0] <= t <= spans[i][1] + 1e-9
