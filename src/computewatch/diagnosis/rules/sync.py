"""Host-device synchronisation every step: the host and the accelerator take turns instead of
working at once, as when the loop reads a result each step (``loss.item()``, ``.cpu()``,
printing a tensor, ``torch.cuda.synchronize()``): the host waits for the device's queue to
drain, then the device waits while the host prepares and launches the next step."""

from __future__ import annotations

from computewatch.config.thresholds import Thresholds
from computewatch.diagnosis.findings import Evidence, Finding, Saving, TimeRange
from computewatch.diagnosis.loader import NotApplicable, RunData, StepTime
from computewatch.diagnosis.rules import build, pct
from computewatch.diagnosis.rules.data_loader import DATA_PHASE, _tree_cores
from computewatch.diagnosis.stats import median
from computewatch.units import format_seconds

SYNC_EVERY = 10
"""The fix reads the result every this many steps: one drain of the queue per 10 steps."""
DEVICE_BUSY = (0.05, 0.9)
"""The accelerator's share of the steps' time inside which turn-taking can be told: below,
the device does too little to matter; above, it is the bottleneck and the host keeps up."""
OVERLAP_SLACK = 0.15
"""Host busy share + device busy share at most 1 + this: they did not work at once."""


def host_device_sync(data: RunData, th: Thresholds) -> list[Finding]:
    """Fires when, over the steps, the accelerator was busy between 5 % and 90 % of the time
    and the run's processes kept at most the rest of the time busy on the host: the two never
    worked at once, the signature of a synchronisation every step. The fix (reading results
    every ``SYNC_EVERY`` steps) lets them overlap: a step takes the longer of the two parts,
    plus a tenth of the shorter (the drain left every 10th step)."""
    gpus = data.used_gpus()
    if not data.steps:
        raise NotApplicable("no steps reported with step()")
    times = data.step_times()
    lead = max(times, key=lambda p: len(times[p]))
    steps = times[lead][th.skip_first_steps :]
    if len(steps) < 2 * th.min_segment_steps:
        raise NotApplicable(f"fewer than {2 * th.min_segment_steps} timed steps")
    t0, t1 = steps[0].start, steps[-1].end
    busy = _device_busy(data, [g["uuid"] for g in gpus], t0, t1)
    if busy is None:
        raise NotApplicable("no GPU utilization read during the steps")
    device, device_q = busy
    host = _tree_cores(data, t0, t1)
    if host is None:
        raise NotApplicable("no CPU time of the run's processes read during the steps")
    waits = data.phase_seconds_by_step([DATA_PHASE]).get(lead, [])[th.skip_first_steps :]
    span = sum(t.seconds for t in steps)
    data_share = sum(waits) / span if span > 0 else 0.0
    if not DEVICE_BUSY[0] <= device <= DEVICE_BUSY[1]:
        return []
    if host + device > 1 + OVERLAP_SLACK or data_share >= th.data_wait_share:
        return []  # they overlap, or the loop waits for data (that rule's finding)
    secs = [t.seconds for t in steps]
    k = device * median(secs)
    saved, low, high = (_saving(steps, kk) for kk in (k, device_q[0] * median(secs),
                                                      device_q[1] * median(secs)))  # fmt: skip
    lines = [
        f"over {len(steps)} steps the GPU was busy {pct(device)} of the time and the run's "
        f"processes kept {host:.2f} cores busy: {pct(min(host + device, 9.99))} together, "
        "so the host and the device took turns instead of working at once",
        f"each step: about {format_seconds(k)} on the device and "
        f"{format_seconds(max(median(secs) - k, 0.0))} on the host (median step "
        f"{format_seconds(median(secs))})",
    ]
    return build(
        data,
        th,
        id="host_device_sync",
        title="Host-device synchronisation every step: the host and the GPU take turns",
        seconds=sum(min(max(s - k, 0.0), k) for s in secs),
        saving=Saving(
            saved,
            min(low, high, saved),
            max(low, high, saved),
            f"the result read every {SYNC_EVERY} steps, not every step (no .item() or .cpu() "
            "inside the loop)",
            "a step now takes its host part plus its device part; with the synchronisation "
            f"every {SYNC_EVERY} steps it takes the longer of the two plus a tenth of the "
            "shorter; the device part is the GPU's busy share of the median step (range: its "
            "quartiles over the ticks)",
            "loop",
            span,
        ),
        evidence=Evidence(
            tuple(lines),
            {
                "device_busy_share": device,
                "host_cores_busy": host,
                "device_seconds_per_step": k,
                "median_step_seconds": median(secs),
                "steps": len(steps),
            },
            (TimeRange(data.rel(t0), data.rel(t1)),),
        ),
        suggestion=(
            "Take the synchronisation out of the loop: keep the loss on the device "
            "(total += loss.detach()) and read it (.item(), .cpu(), print) every "
            f"{SYNC_EVERY} steps or at the end of the epoch; avoid tensor-valued conditions "
            "(if loss > x), .tolist() and .numpy() in the step; find the others with "
            "torch.cuda.set_sync_debug_mode('warn')."
        ),
    )


def _saving(steps: list[StepTime], k: float) -> float:
    """What the steps would save with the device part ``k`` overlapped with the host part."""
    total = 0.0
    for t in steps:
        h = max(t.seconds - k, 0.0)
        total += t.seconds - (max(h, k) + min(h, k) / SYNC_EVERY)
    return max(total, 0.0)


def _device_busy(
    data: RunData, uuids: list[str], start: float, end: float
) -> tuple[float, tuple[float, float]] | None:
    """The GPUs' mean utilization over the ticks inside ``start``-``end`` and its quartiles
    (the busiest GPU's), or None without two ticks inside."""
    best: tuple[float, tuple[float, float]] | None = None
    for uuid in uuids:
        values = sorted(
            v
            for s in data.of("gpu_utilization_ratio", gpu=uuid)
            for t, v in s.points
            if start < t <= end
        )
        if len(values) < 2:
            continue
        m = sum(values) / len(values)
        q = (values[(len(values) - 1) // 4], values[(3 * (len(values) - 1)) // 4])
        if best is None or m > best[0]:
            best = (m, q)
    return best
