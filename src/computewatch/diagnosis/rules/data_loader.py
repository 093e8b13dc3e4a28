"""Data-loader starvation: the training loop waiting for its next batch (the ``data`` phase that
``run.data(loader)`` records), and the accelerator idle meanwhile."""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from computewatch.config.thresholds import Thresholds
from computewatch.diagnosis.findings import Evidence, Finding, Saving, TimeRange
from computewatch.diagnosis.loader import NotApplicable, RunData, StepTime, overlap, stretches
from computewatch.diagnosis.rules import build, pct
from computewatch.units import format_seconds

DATA_PHASE = "data"
IDLE_CORES = 0.25
"""A host with at least this many cores idle over the steps had no run queue to speak of."""
EFFICIENCY_LOW = 0.75
"""The low end's workers: 25% less efficient than the loop at loading (start-up, transfers)."""


class Machine(msgspec.Struct, frozen=True):
    """What the run recorded of the machine over its steps, for the loader's model: the cores
    the run was allowed, the cores its process tree kept busy (``tree``), the cores other
    processes kept busy (``others``: the host's busy time less the run's), the mean 1-minute
    load average (``load``) and the host's CPUs (``host_cores``); None where not recorded."""

    cores: float
    tree: float | None = None
    others: float | None = None
    load: float | None = None
    host_cores: float | None = None

    @property
    def idle(self) -> float | None:
        """Cores nobody used over the steps (of the host's), None without the host's CPU."""
        if self.others is None or self.tree is None:
            return None
        return max((self.host_cores or self.cores) - self.tree - self.others, 0.0)

    def other_threads(self, procs: int) -> tuple[float | None, str]:
        """Runnable threads of other processes competing for the run's cores, on average over
        the steps, and where the figure comes from. A host with idle cores had no queue: each
        busy core of other work is one thread (the load average, a minute's memory, may still
        count work that has ended). A saturated host hides its queue from CPU time: the load
        average counts it (runnable threads, the run's own among them: each of those got the
        fair share ``H / load`` and the run's busy cores say how many there were). None where
        the host is saturated and its load average not recorded."""
        host = self.host_cores or self.cores
        scale = min(self.cores / host, 1.0) if host > 0 else 1.0  # others spread over the host
        idle = self.idle
        if self.others is not None and (idle is None or idle >= IDLE_CORES):
            where = "" if idle is None else f" ({idle:.2f} cores idle)"
            return self.others * scale, f"the host's CPU use{where}"
        if self.load is None:
            if self.others is None:
                return 0.0, "not measured: taken as none"
            return None, "not measured: the host's cores all busy, its load average not read"
        fair = min(1.0, host / max(self.load, 1e-9))
        own = self.tree / fair if self.tree is not None else float(procs)
        queue = max(self.load - own, self.others or 0.0, 0.0)
        return queue * scale, f"the load average {self.load:.2f}, the host's cores all busy"


def data_starvation(data: RunData, th: Thresholds) -> list[Finding]:
    """Fires when the ``data`` phase takes at least ``data_wait_share`` of step time."""
    if not data.steps:
        raise NotApplicable("no steps reported with step()")
    if not any(p.name == DATA_PHASE for p in data.phases):
        raise NotApplicable("no `data` phase recorded (iterate with run.data(loader))")
    times = data.step_times()
    waits = data.phase_seconds_by_step([DATA_PHASE])
    step_total = sum(t.seconds for ts in times.values() for t in ts)
    wait_total = sum(sum(w) for w in waits.values())
    if step_total <= 0:
        raise NotApplicable("no timed steps")
    share = wait_total / step_total
    if share < th.data_wait_share:
        return []
    procs = max(len([p for p, ts in times.items() if ts]), 1)
    n_steps = sum(len(ts) for ts in times.values())
    at_stake = wait_total / procs  # the processes wait side by side: wall time per process
    # Where it happened: the steps of the most-waiting process whose wait share was high.
    worst = max(waits, key=lambda p: sum(waits[p]))
    flags = [
        (data.rel(t.start), data.rel(t.end), t.seconds > 0 and w / t.seconds >= th.data_wait_share)
        for t, w in zip(times[worst], waits[worst], strict=True)
    ]
    ranges = sorted(stretches(flags), key=lambda r: r[1] - r[0], reverse=True)[:3]
    lines = [
        f"{pct(share)} of step time was spent waiting for data: {format_seconds(wait_total)} of "
        f"{format_seconds(step_total)} over {n_steps} steps"
        + (f" in {procs} processes" if procs > 1 else ""),
        f"mean wait per step {format_seconds(wait_total / n_steps)} "
        f"(threshold {pct(th.data_wait_share)})",
    ]
    numbers: dict[str, float | int | str | None] = {
        "data_wait_share": share,
        "data_wait_seconds": wait_total,
        "step_seconds": step_total,
        "steps": n_steps,
        "mean_wait_per_step_seconds": wait_total / n_steps,
    }
    busy = _gpu_busy_during_waits(data, [(p.start, p.end) for p in data.phases
                                         if p.name == DATA_PHASE])  # fmt: skip
    if busy is not None:
        during, otherwise = busy
        lines.append(
            f"GPU utilization {pct(during)} while waiting for data, {pct(otherwise)} otherwise "
            "(tick-weighted)"
        )
        numbers["gpu_utilization_waiting"] = during
        numbers["gpu_utilization_otherwise"] = otherwise
    cores = data.allowed_cores
    all_times = [t for ts in times.values() for t in ts]
    t0, t1 = min(t.start for t in all_times), max(t.end for t in all_times)
    cores_busy = _tree_cores(data, t0, t1)
    if cores_busy is not None:
        lines.append(f"the run's processes kept {cores_busy:.2f} cores busy over the steps")
        numbers["cores_busy"] = cores_busy
    others = _others_cores(data, t0, t1, cores_busy)
    if others is not None:
        lines.append(f"other processes kept {others:.2f} cores busy meanwhile")
        numbers["others_cores_busy"] = others
    load = _mean_gauge(data, "host_load1", t0, t1)
    if load is not None:
        lines.append(f"the host's 1-minute load average was {load:.2f} over the steps")
        numbers["load_average"] = load
    machine = Machine(cores, cores_busy, others, load, _host_cores(data))
    saving, workers = loader_saving(times, waits, machine)
    suggestion = (
        f"Feed the loop in the background: DataLoader(num_workers={workers}, pin_memory=True, "
        "prefetch_factor=4, persistent_workers=True) "
        f"({workers} worker(s) per process"
        + (
            f" leaves a core of the {cores:g} allowed for the loop); "
            if saving.part != "loop-io"
            else f": the loading waits on I/O, not on a core, so more workers than the {cores:g} "
            "cores allowed still overlap it); "
        )
        + "keep decoding and augmentation inside the Dataset so the workers do it, copy with "
        ".to(device, non_blocking=True), and cache or pre-tokenize data that is read every epoch."
    )
    saving = Saving(
        saving.seconds, saving.low_seconds, saving.high_seconds, saving.fix, saving.assumes,
        "loop", step_total / procs,
    )  # fmt: skip
    return build(
        data,
        th,
        id="data_starvation",
        title="Data-loader starvation: the loop waits for its batches",
        seconds=at_stake,
        evidence=Evidence(tuple(lines), numbers, tuple(TimeRange(a, b) for a, b in ranges)),
        suggestion=suggestion,
        saving=saving,
    )


def loader_saving(
    times: dict[int, list[StepTime]], waits: dict[int, list[float]], machine: Machine
) -> tuple[Saving, int]:
    """What ``w`` background loader workers would save, and ``w``. Each step ``i`` now takes
    its compute ``c_i`` plus its wait ``d_i``. The wait is the loading's own time: CPU work
    (the share ``phi``: ``W = phi s0 d`` CPU-seconds a batch, the loop's process running at
    its share ``s0`` of a core) and waiting (I/O, sleeps: ``(1 - phi) d``). Moved to workers,
    the waiting overlaps with the loop's compute whatever the load (it needs no core), and the
    CPU work runs at a new thread's share. With a fair scheduler a runnable thread gets
    ``sigma(k) = min(1, C / (N + P (1 + k)))`` of a core: ``C`` cores, ``N`` runnable threads
    of other processes, ``P`` processes each with its loop and ``k`` busy workers; so
    ``s0 = sigma(0)``. A step then takes ``max(c s0 / sigma, ((1 - phi) d + W / sigma) / w)``
    (the loop's compute at its new share; each worker's batch takes its wait and its CPU
    work, ``w`` of them in turn), never more than now. ``k``, the workers busy on a core on
    average, is their CPU work over the step at their share (solved by iteration).

    ``phi`` comes from the cores the process tree kept busy (``T``): a step's CPU-seconds
    ``T (c + d) / P = s0 (c + phi d)``. Above a core per process the loading already runs in
    parallel (``phi`` above 1: ``W = T (c + d) / P - s0 c``). Without ``T`` the wait is taken
    as CPU work (the smaller saving); on a saturated host without a load average, ``s0`` is
    not known and the wait is taken as CPU work at the share the run got. ``N`` comes from
    :meth:`Machine.other_threads`, unless the share it gives the loop is less than the CPU the
    loop used (a load average counts threads that a group scheduler, Linux's autogroup or a
    cgroup, weighs by group): the loop's share then lies between ``T (c + d) / (P (c + d))``
    (all of the wait CPU work) and ``T (c + d) / (P c)`` (all of it waiting), ``s0`` is their
    geometric mean, ``N = C / s0 - P``, and the range takes the two ends. A run that used less
    CPU than its compute alone needs at ``s0`` (a compute that waits on a device) has its wait
    taken as CPU work.

    Low: the run's processes form one scheduling group (Linux autogroup, a container's or a
    job's cgroup) that gets no more CPU than before, ``s0`` per process plus the idle cores,
    shared by the loop and the workers; workers 25% less efficient; ``phi`` + 0.25. High: the
    machine otherwise quiet when the fix runs (``N = 0``: the load is the run's variation as
    much as its own), ``phi`` - 0.25. Processes run side by side: the saving is per process."""
    procs = max(len([p for p, ts in times.items() if ts]), 1)
    cores = max(machine.cores, 1e-9)
    per_proc = max(cores / procs, 1.0)
    c_all = [
        max(t.seconds - w, 0.0)
        for p, ts in times.items()
        for t, w in zip(ts, waits[p], strict=True)
    ]
    d_all = [w for p in times for w in waits[p]]
    c_mean = sum(c_all) / len(c_all) if c_all else 0.0
    d_mean = sum(d_all) / len(d_all) if d_all else 0.0
    others, source = machine.other_threads(procs)
    tree = machine.tree

    def sigma(k: float, n: float) -> float:
        return min(1.0, cores / (n + procs * (1.0 + k)))

    # The loop's share before, and the loading's CPU share of the wait.
    cpu_step = tree / procs * (c_mean + d_mean) if tree is not None else None
    s0 = sigma(0.0, others) if others is not None else None
    parallel = False
    s_lo = s_hi = None  # the loop's share where the load average cannot tell it: its bounds
    if cpu_step is None or d_mean <= 0:
        phi, s0 = 1.0, s0 if s0 is not None else 1.0
        how = "its CPU share not measured: taken as CPU work"
    elif s0 is None:  # a saturated host without its queue: the share the run got
        s0 = min(max(cpu_step / (c_mean + d_mean), 1e-3), 1.0)
        phi, how = 1.0, f"its CPU share unknown ({source}): taken as CPU work"
        others = max(cores / s0 - procs, 0.0)  # the queue that gives the loop that share
    else:
        if cpu_step > c_mean + d_mean:  # more than a core per process: loading in parallel
            s0 = 1.0
        elif s0 < cpu_step / (c_mean + d_mean):
            # The loop used more CPU than the share the load average gives it (a group
            # scheduler, Linux's autogroup or a cgroup, weighs the loop's competitors by group,
            # not by thread): its share lies between the CPU it used (all of the wait CPU work)
            # and what its compute alone explains (all of it waiting); their geometric mean,
            # the range from the two.
            s_lo = min(cpu_step / (c_mean + d_mean), 1.0)
            s_hi = min(cpu_step / c_mean, 1.0) if c_mean > 0 else 1.0
            est, s0 = others, (s_lo * s_hi) ** 0.5
            others = max(cores / s0 - procs, 0.0)
            source = (
                f"from the loop's CPU over the steps, {s_lo:.2f}-{s_hi:.2f} of a core when "
                f"runnable; {source} gives {est:.1f}"
            )
        phi_raw = max((cpu_step - s0 * c_mean) / (s0 * d_mean), 0.0)
        if cpu_step < 0.8 * s0 * c_mean:
            # Less CPU than the compute alone needs at that share: the compute waits too (on a
            # device) or the loop got less: the wait's nature cannot be told.
            phi_raw, how = 1.0, "less CPU than its compute needs: the wait taken as CPU work"
        else:
            phi = min(phi_raw, 1.0)
            how = (
                "all of it CPU work"
                if phi > 0.995
                else f"{phi:.0%} of it CPU work, the rest waiting (I/O, sleeps)"
            )
        parallel = phi_raw > 1.15
        phi = min(phi_raw, 1.0)
    n = others if others is not None else 0.0
    # A worker per core beside the loop for the CPU work, and one more for each compute step
    # the waiting lasts, so that a batch is ready every step.
    workers = max(1, int(per_proc) - 1)
    if c_mean > 0 and not parallel:
        workers += int((1.0 - phi) * d_mean / c_mean)
    workers = min(workers, 8)
    idle = machine.idle
    if idle is None:
        idle = max(cores - procs * s0 - n, 0.0)
    cpu_parallel = max((cpu_step or 0.0) - s0 * c_mean, 0.0)

    def after(p: float, s: float, share: Callable[[float], float], eff: float) -> float:
        """The steps' total with ``workers`` workers, ``p`` of the wait CPU work, the loop's
        share ``s`` of a core before, a thread's share ``share(k)`` with ``k`` workers busy
        after, workers ``eff`` as efficient."""
        w_cpu = cpu_parallel if parallel else p * s * d_mean  # CPU-seconds per mean batch
        wait_io = 0.0 if parallel else (1.0 - p) * d_mean
        k = 0.0
        sig = share(k)
        for _ in range(20):  # the busy workers and their share, by iteration
            sig = share(k)
            step = max(c_mean * s / sig, (wait_io + w_cpu / (sig * eff)) / workers)
            busy = min(float(workers), w_cpu / (sig * eff) / step) if step > 0 else 0.0
            k = (k + busy) / 2
        total = 0.0
        for c, d in zip(c_all, d_all, strict=True):
            r = d / d_mean if d_mean > 0 else 0.0  # this step's loading against the mean
            io_i, cpu_i = wait_io * r, w_cpu * r
            step_i = max(c * s / sig, (io_i + cpu_i / (sig * eff)) / workers)
            total += min(c + d, step_i)
        return total

    def phi_at(s: float) -> float:  # the CPU share of the wait if the loop had ``s``
        return min(max(((cpu_step or 0.0) - s * c_mean) / (s * d_mean), 0.0), 1.0)

    now = sum(c_all) + sum(d_all)
    mid = (now - after(phi, s0, lambda k: sigma(k, n), 1.0)) / procs
    s_low = s_lo if s_lo is not None else s0
    n_low = max(cores / s_low - procs, 0.0) if s_lo is not None else n
    group = s_low + idle / procs  # the run's CPU per process under group scheduling
    p_low = min(max(phi + 0.25, phi_at(s_low) if s_lo is not None else 0.0), 1.0)
    low = (now - after(p_low, s_low, lambda k: min(sigma(k, n_low), group / (1.0 + k)),
                       EFFICIENCY_LOW)) / procs  # fmt: skip
    s_high = s_hi if s_hi is not None else s0
    p_high = max(min(phi - 0.25, phi_at(s_high) if s_hi is not None else 1.0), 0.0)
    high = (now - after(p_high, s_high, lambda k: sigma(k, 0.0), 1.0)) / procs
    share_now, share_after = s0, sigma(1.0, n)
    if parallel:
        what = (
            f"the loading already runs in parallel ({tree or 0.0:.2f} cores busy over the "
            f"steps, {cpu_parallel:.3g} CPU-seconds a batch beside the loop's compute): more "
            "workers help only with more CPU"
        )
    else:
        what = f"the wait is the loading's own time ({how})"
    assumes = (
        f"{what}; waiting overlaps with the loop's compute in the workers whatever the load, "
        f"CPU work runs at a worker's share of a core: a fair scheduler gives each runnable "
        f"thread cores / (runnable threads + 1), {n:.1f} other runnable thread(s) on the "
        f"{cores:g} cores ({source}), so the loop had {share_now:.2f} of a core and "
        f"with {workers} worker(s) a busy worker gets about {share_after:.2f}, the loop as much; "
        "a step takes "
        "max(compute at the loop's new share, (wait + CPU work / a worker's share) / workers)"
        f"; low: the run's processes share one scheduling group (autogroup, a cgroup) that "
        f"gets no more CPU than before ({group:.2f} cores per process with the idle ones), "
        "workers 25% less efficient, "
        + (
            f"the wait {p_low:.0%} CPU work at the {s_low:.2f} of a core the loop used; high: "
            f"the machine otherwise quiet when the fix runs, the wait {p_high:.0%} CPU work "
            f"at {s_high:.2f} of a core"
            if s_lo is not None
            else "25 points more CPU work; high: the machine otherwise quiet when the fix "
            "runs, 25 points less"
        )
    )
    part = "loop-io" if phi < 0.5 and not parallel else "loop"
    fix = f"{workers} loader worker(s) per process (DataLoader(num_workers={workers}))"
    return Saving(mid, low, high, fix, assumes, part), workers


def _others_cores(data: RunData, start: float, end: float, tree: float | None) -> float | None:
    """Cores the rest of the machine kept busy from ``start`` to ``end``: the host's busy
    cores (every mode but idle and iowait, summed over its CPUs) less the run's own."""
    if tree is None:
        return None
    host = [
        s
        for s in data.of("host_cpu_seconds_total")
        if s.labels.get("mode") not in ("idle", "iowait")
    ]
    total = 0.0
    span = None
    for s in host:
        pts = [(t, v) for t, v in s.points if start <= t <= end]
        if len(pts) < 2 or pts[-1][0] <= pts[0][0]:
            continue
        total += max(pts[-1][1] - pts[0][1], 0.0) / (pts[-1][0] - pts[0][0])
        span = pts[-1][0] - pts[0][0]
    if span is None:
        return None
    return max(total - tree, 0.0)


def _mean_gauge(data: RunData, name: str, start: float, end: float) -> float | None:
    """The mean of a gauge's points from ``start`` to ``end`` (the last point before
    ``start`` when none falls inside); None without the series."""
    vals: list[float] = []
    for s in data.of(name):
        inside = [v for t, v in s.points if start <= t <= end]
        before = [v for t, v in s.points if t < start]
        vals.extend(inside or before[-1:])
    return sum(vals) / len(vals) if vals else None


def _host_cores(data: RunData) -> float | None:
    """The host's CPUs: the CPUs its busy-time counters name; None without them."""
    cpus = {s.labels.get("cpu") for s in data.of("host_cpu_seconds_total")} - {None}
    return float(len(cpus)) if cpus else None


def _tree_cores(data: RunData, start: float, end: float) -> float | None:
    """Mean cores the run's process tree kept busy from ``start`` to ``end`` (monotonic): its
    CPU-seconds counter's growth over the ticks inside, over their span. None without the
    series or with fewer than two ticks inside."""
    total = 0.0
    span = None
    for s in data.of("tree_cpu_seconds_total"):
        pts = [(t, v) for t, v in s.points if start <= t <= end]
        if len(pts) < 2 or pts[-1][0] <= pts[0][0]:
            continue
        total += max(pts[-1][1] - pts[0][1], 0.0)
        span = pts[-1][0] - pts[0][0] if span is None else max(span, pts[-1][0] - pts[0][0])
    if span is None or span <= 0:
        return None
    return total / span


def _gpu_busy_during_waits(
    data: RunData, waits: list[tuple[float, float]]
) -> tuple[float, float] | None:
    """Mean GPU utilization over the ticks, weighted by how much of each tick interval was
    spent waiting for data, and by how much was not. None without GPU series."""
    uuids = {g["uuid"] for g in data.gpus()}
    series = [s for s in data.of("gpu_utilization_ratio") if s.labels.get("gpu") in uuids]
    if not series or not waits:
        return None
    waits.sort()
    w_in = u_in = w_out = u_out = 0.0
    for s in series:
        j = 0
        for (t0, _), (t1, u) in zip(s.points, s.points[1:], strict=False):
            if t1 <= t0:
                continue
            while j < len(waits) and waits[j][1] < t0:
                j += 1
            covered = 0.0
            k = j
            while k < len(waits) and waits[k][0] < t1:
                covered += overlap(t0, t1, *waits[k])
                k += 1
            c = min(covered / (t1 - t0), 1.0)
            w_in += c
            u_in += c * u
            w_out += 1 - c
            u_out += (1 - c) * u
    if w_in <= 0 or w_out <= 0:
        return None
    return u_in / w_in, u_out / w_out
