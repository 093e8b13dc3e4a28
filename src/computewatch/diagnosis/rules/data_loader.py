"""Data-loader starvation: the training loop waiting for its next batch (the ``data`` phase that
``run.data(loader)`` records), and the accelerator idle meanwhile."""

from __future__ import annotations

from computewatch.config.thresholds import Thresholds
from computewatch.diagnosis.findings import Evidence, Finding, TimeRange
from computewatch.diagnosis.loader import NotApplicable, RunData, overlap, stretches
from computewatch.diagnosis.rules import build, pct
from computewatch.units import format_seconds

DATA_PHASE = "data"


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
    cores = float((data.summary.get("cpu") or {}).get("allowed_cores") or 1.0)
    workers = max(1, min(8, int(cores / procs) - 1))
    suggestion = (
        f"Feed the loop in the background: DataLoader(num_workers={workers}, pin_memory=True, "
        "prefetch_factor=4, persistent_workers=True) "
        f"({workers} worker(s) per process leaves a core of the {cores:g} allowed for the loop); "
        "keep decoding and augmentation inside the Dataset so the workers do it, copy with "
        ".to(device, non_blocking=True), and cache or pre-tokenize data that is read every epoch."
    )
    return build(
        data,
        th,
        id="data_starvation",
        title="Data-loader starvation: the loop waits for its batches",
        seconds=at_stake,
        evidence=Evidence(tuple(lines), numbers, tuple(TimeRange(a, b) for a, b in ranges)),
        suggestion=suggestion,
    )


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
