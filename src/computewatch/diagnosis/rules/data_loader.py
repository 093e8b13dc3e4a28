"""Data-loader starvation: the training loop waiting for its next batch (the ``data`` phase that
``run.data(loader)`` records), and the accelerator idle meanwhile."""

from __future__ import annotations

from computewatch.config.thresholds import Thresholds
from computewatch.diagnosis.findings import Evidence, Finding, Saving, TimeRange
from computewatch.diagnosis.loader import NotApplicable, RunData, StepTime, overlap, stretches
from computewatch.diagnosis.rules import build, pct
from computewatch.units import format_seconds

DATA_PHASE = "data"
SHARED_CORES = 0.5
"""Other processes keeping more cores than this busy over the steps make the machine shared."""


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
    # Other work busy on the machine takes cores from the run when it can run and gives them
    # back when it waits: its CPU share then says nothing of its waits (taken as CPU work).
    contended = others is not None and others > SHARED_CORES
    saving, workers = loader_saving(
        times,
        waits,
        cores,
        None if contended else cores_busy,
        others if contended else None,
        cores_busy if contended else None,
    )
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
    times: dict[int, list[StepTime]],
    waits: dict[int, list[float]],
    cores: float,
    busy: float | None,
    others: float | None = None,
    tree: float | None = None,
) -> tuple[Saving, int]:
    """What ``w`` background loader workers would save, and ``w``. Each step ``i`` now takes
    its compute ``c_i`` plus its wait ``d_i``; with the loading overlapped it takes
    ``max(c_i, d_i / w, phi d_i / free)``: the workers produce a batch every ``d_i / w``
    seconds, but their CPU work (the share ``phi`` of the wait during which a core was busy)
    cannot go faster than the ``free`` cores beside the loop allow. ``phi`` comes from the cores
    the process tree kept busy over the steps (``busy``), the loop's compute taken as one busy
    core: ``phi = (busy (c + d) - c) / d``. A loader waiting on I/O (``phi`` near 0) gains from
    more workers than cores; one already in parallel (``phi`` above 1: its CPU work per batch is
    ``busy (c + d) - c``) gains only where cores are free. Processes run side by side: the
    saving is per process.

    On a shared machine (``others``: the cores other processes kept busy meanwhile) the run's
    CPU share says nothing of its waits, but the CPU it used (``tree`` cores) still bounds the
    loading's: ``phi <= tree (c + d) / d``. The workers then get the cores nobody used (``C -
    tree - others``) and the loop's own loading time, which moves to them (at least a tenth of
    a core); the high end of the range takes every core beside the loop free."""
    procs = max(len([p for p, ts in times.items() if ts]), 1)
    per_proc = max(cores / procs, 1.0)
    free_all = max(per_proc - 1.0, 1.0) if per_proc >= 2 else 0.5
    free = free_all
    c_all = [
        max(t.seconds - w, 0.0)
        for p, ts in times.items()
        for t, w in zip(ts, waits[p], strict=True)
    ]
    d_all = [w for p in times for w in waits[p]]
    c_mean = sum(c_all) / len(c_all) if c_all else 0.0
    d_mean = sum(d_all) / len(d_all) if d_all else 0.0
    # The processes got less CPU than their compute alone needs (a machine shared with other
    # work): the wait's nature cannot be told, and it is taken as CPU work (the smaller saving).
    # When the processes got less CPU than their compute alone needs (a machine shared with
    # other work), the wait's nature cannot be told: it is taken as CPU work (the smaller
    # saving, and one worker per free core).
    measured = busy is not None and d_mean > 0 and busy / procs * (c_mean + d_mean) >= 0.8 * c_mean
    phi = 1.0
    if measured and busy is not None:
        phi = max((busy / procs * (c_mean + d_mean) - c_mean) / d_mean, 0.0)
    if not measured and tree is not None and d_mean > 0:  # the CPU it used bounds the loading
        phi = min(tree / procs * (c_mean + d_mean) / d_mean, 1.0)
    parallel = phi > 1.15
    phi = min(phi, 1.0)
    if others is not None:  # without the run's own CPU, the loop is taken as one busy core
        used = tree / procs if tree is not None else 1.0
        moved = used * phi * d_mean / (c_mean + d_mean) if tree is not None and d_mean else 0.0
        free = min(max(per_proc - used - others / procs + moved, 0.1), free_all)
    if phi >= 0.5 or c_mean <= 0:
        workers = max(1, min(8, int(per_proc) - 1))
    else:  # waiting on I/O: enough workers that a batch is ready every compute step
        workers = max(2, min(8, int(d_mean / c_mean) + 2))
    cpu_batch = (busy or 0.0) / procs * (c_mean + d_mean) - c_mean  # parallel loader only

    def after(eff: float, cpu_share: float, cores_free: float) -> float:
        total = 0.0
        for c, d in zip(c_all, d_all, strict=True):
            if parallel:
                total += max(c, min(c + d, cpu_batch / (cores_free * eff)))
            else:
                total += max(c, min(c + d, max(d / (workers * eff),
                                               cpu_share * d / (cores_free * eff))))  # fmt: skip
        return total

    now = sum(c_all) + sum(d_all)
    mid = (now - after(1.0, phi, free)) / procs
    low = (now - after(0.75, min(phi + 0.25, 1.0), free)) / procs
    high = (now - after(1.0, max(phi - 0.25, 0.0), free_all)) / procs
    if parallel:
        assumes = (
            f"the loading already runs in parallel ({busy:.2f} cores busy over the steps); "
            "more workers help only on free cores: a step takes max(compute, loading CPU work "
            f"per batch / the {free:g} free core(s)); low: workers 25% less efficient"
        )
    else:
        how = "waits on I/O" if phi < 0.5 else "keeps a core busy"
        assumes = (
            f"the wait is the loading's own time, which {how} ("
            + (
                f"{phi:.0%} of it on a core"
                if measured
                else f"at most {phi:.0%} of it on a core: the CPU the run's processes used, "
                "the machine shared with other work"
                if tree is not None
                else "its CPU share unknown: not measured, the machine shared with other work, "
                "or the processes got less CPU than their compute needs; taken as 100%"
            )
            + f"); {workers} worker(s) overlap it with the loop's compute on the {free:.2g} "
            "core(s) beside the loop"
            + (
                f" that nobody used plus the loop's own loading time ({others:.2f} cores busy "
                "with other work)"
                if others is not None
                else ""
            )
            + ": a step takes max(compute, wait / workers, CPU work / free cores); low: workers "
            "25% less efficient"
            + ("; high: every core beside the loop free" if free < free_all else "")
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
