"""Step time over the run: a lasting change (regression or drift) and outlier steps."""

from __future__ import annotations

import itertools

import msgspec

from computewatch.config.thresholds import Thresholds
from computewatch.diagnosis.findings import Evidence, Finding, Saving, TimeRange
from computewatch.diagnosis.loader import NotApplicable, RunData, Series, StepTime
from computewatch.diagnosis.rules import build
from computewatch.diagnosis.stats import (
    MAD_TO_SIGMA,
    best_split,
    linear_sse,
    mad,
    mann_whitney_p,
    mean,
    median,
)
from computewatch.units import format_seconds


class Change(msgspec.Struct, frozen=True):
    """A lasting slowdown of one process's steps, found at ``at`` (index into its steps)."""

    pid: int
    at: int
    kind: str  # "regression" (a jump) or "drift" (a gradual rise)
    before: float
    after: float
    p_value: float
    lost: float  # seconds: the extra time of the slower steps
    lost_low: float = 0.0  # the same against the upper quartile of the steps before
    lost_high: float = 0.0  # ... against their lower quartile
    spent: float = 0.0  # seconds of the steps counted (what a fix can shorten)


SHARED_CORES = 0.5
"""Cores other processes keep busy, on a machine with no CPU to spare, past which the run's
stalls are taken to be the machine's sharing (:func:`sharing`)."""


class Sharing(msgspec.Struct, frozen=True):
    """The machine while some steps ran: the cores the run's processes kept busy (``tree``),
    those other processes kept busy (``others``: the host's busy time less the run's) and the
    host's CPUs."""

    tree: float
    others: float
    cpus: float

    @property
    def shared(self) -> bool:
        """Other processes took at least :data:`SHARED_CORES` of a machine left no CPU idle:
        the run's processes waited for a CPU, whatever they were doing."""
        return self.others >= SHARED_CORES and self.tree + self.others >= self.cpus - 0.25


def _growth(series: list[Series], start: float, end: float) -> tuple[float, float] | None:
    """The counters' summed growth and its span from the last tick at or before ``start`` to the
    first at or after ``end`` (the ticks around a stretch shorter than a tick); None without
    two such ticks."""
    total, span = 0.0, None
    for s in series:
        before = [p for p in s.points if p[0] <= start]
        after = [p for p in s.points if p[0] >= end]
        a = before[-1] if before else (s.points[0] if s.points else None)
        b = after[0] if after else (s.points[-1] if s.points else None)
        if a is None or b is None or b[0] <= a[0]:
            continue
        total += max(b[1] - a[1], 0.0)
        span = b[0] - a[0]
    return None if span is None else (total, span)


def sharing(data: RunData, start: float, end: float) -> Sharing | None:
    """How the run shared the machine from ``start`` to ``end`` (monotonic), from the run's and
    the host's CPU-seconds counters; None without them."""
    host = [
        s
        for s in data.of("host_cpu_seconds_total")
        if s.labels.get("mode") not in ("idle", "iowait")
    ]
    cpus = {s.labels.get("cpu") for s in data.of("host_cpu_seconds_total")} - {None}
    busy, own = _growth(host, start, end), _growth(data.of("tree_cpu_seconds_total"), start, end)
    if busy is None or own is None or not cpus:
        return None
    tree = own[0] / own[1]
    return Sharing(tree, max(busy[0] / busy[1] - tree, 0.0), float(len(cpus)))


LOST_SHARE = 0.15
"""The share of its cores a run must lose, as other processes take more of a full machine, for
a regression to be taken as their doing (:func:`_arrival`)."""


def _arrival(data: RunData, times: list[StepTime], c: Change) -> tuple[Sharing, Sharing] | None:
    """How the machine was shared before and after a regression, when it is what slowed the
    steps: the machine full after the change, other processes keeping at least half of
    :data:`SHARED_CORES` more busy than before, and the run's processes getting at least
    :data:`LOST_SHARE` fewer cores. A loop whose threads wait for one another slows by more
    than its lost share, so the size of the slowdown is not held against the lost share. None
    otherwise, or without the CPU counters."""
    before = sharing(data, times[0].start, times[c.at - 1].end) if c.at > 0 else None
    after = sharing(data, times[c.at].start, times[-1].end)
    if before is None or after is None or not after.shared:
        return None
    if after.others - before.others < SHARED_CORES / 2:
        return None
    if after.tree > (1 - LOST_SHARE) * before.tree:
        return None
    return before, after


def _series(data: RunData, th: Thresholds) -> dict[int, list[StepTime]]:
    out = {}
    for pid, ts in data.step_times().items():
        # The first step is timed from track() start (imports, model setup): warm-up.
        skip = max(th.skip_first_steps - (ts[0].index - 1 if ts else 0), 0)
        if len(ts) - skip >= th.regression_min_steps:
            out[pid] = ts[skip:]
    return out


def find_change(times: list[StepTime], th: Thresholds) -> Change | None:
    """The main lasting slowdown in one process's step times, if significant and large."""
    d = [t.seconds for t in times]
    if len(d) < max(th.regression_min_steps, 2 * th.min_segment_steps):
        return None
    # Fit on values clipped at median + 5 robust sigmas, so a few spikes cannot place the split.
    cap = median(d) + 5 * MAD_TO_SIGMA * mad(d)
    clipped = [min(v, cap) if cap > 0 else v for v in d]
    split = best_split(clipped, th.min_segment_steps)
    if split is None:
        return None
    slope, sse_line = linear_sse(clipped)
    if slope > 0 and sse_line < split.sse_split:  # a ramp fits better than a jump: drift
        n = len(d)
        tenth = max(n // 10, th.min_segment_steps)
        before, after = mean(d[:tenth]), mean(d[-tenth:])
        p = mann_whitney_p(d[: n // 2], d[n // 2 :])
        base = before
        lost = sum(max(v - base, 0.0) for v in d)
        q_lo, q_hi = _quartiles(d[:tenth])
        lost_low = sum(max(v - q_hi, 0.0) for v in d)
        lost_high = sum(max(v - q_lo, 0.0) for v in d)
        spent = sum(d)
        at, kind = 0, "drift"
    else:
        at, kind = split.index, "regression"
        before, after = median(d[: split.index]), median(d[split.index :])
        p = mann_whitney_p(d[: split.index], d[split.index :])
        lost = sum(max(v - before, 0.0) for v in d[split.index :])
        q_lo, q_hi = _quartiles(d[: split.index])
        lost_low = sum(max(v - q_hi, 0.0) for v in d[split.index :])
        lost_high = sum(max(v - q_lo, 0.0) for v in d[split.index :])
        spent = sum(d[split.index :])
    if before <= 0 or after <= before:
        return None
    if (after - before) / before < th.regression_min_change or p > th.regression_p_value:
        return None
    return Change(
        times[0].pid, at, kind, before, after, p, lost, lost_low, lost_high, spent
    )  # fmt: skip


def _quartiles(values: list[float]) -> tuple[float, float]:
    """The lower and upper quartiles (nearest rank)."""
    s = sorted(values)
    if not s:
        return 0.0, 0.0
    return s[(len(s) - 1) // 4], s[(3 * (len(s) - 1)) // 4]


def step_regression(data: RunData, th: Thresholds) -> list[Finding]:
    """Fires when one process's step time rises for good, by ``regression_min_change`` or more,
    significant at ``regression_p_value`` (Mann-Whitney U between the two segments)."""
    if not data.steps:
        raise NotApplicable("no steps reported with step()")
    series = _series(data, th)
    if not series:
        raise NotApplicable(f"fewer than {th.regression_min_steps} timed steps per process")
    changes = [c for pid, ts in series.items() if (c := find_change(ts, th)) is not None]
    if not changes:
        return []
    c = max(changes, key=lambda c: c.lost)
    times = series[c.pid]
    first = times[c.at]
    rank = data.rank_of(c.pid)
    who = f"rank {rank}" if rank is not None else f"process {c.pid}"
    multi = (
        f" ({who}; {len(changes)} of {len(series)} processes changed)" if len(series) > 1 else ""
    )
    if c.kind == "regression":
        title = f"Step time regression from step {first.index}"
        lines = [
            f"step time rose from {format_seconds(c.before)} to {format_seconds(c.after)} "
            "(medians, "
            f"{c.after / c.before:.2f}x) at step {first.index}, {data.rel(first.end):,.1f} s "
            f"into the run{multi}",
        ]
        span = TimeRange(data.rel(first.start), data.rel(times[-1].end))
    else:
        title = "Step time drift: steps slow down over the run"
        lines = [
            f"step time drifted from {format_seconds(c.before)} (first tenth) to "
            f"{format_seconds(c.after)} "
            f"(last tenth), {c.after / c.before:.2f}x{multi}",
        ]
        span = TimeRange(data.rel(times[0].start), data.rel(times[-1].end))
    lines.append(
        f"Mann-Whitney U p = {c.p_value:.2g}; {format_seconds(c.lost)} lost to the slower steps"
    )
    fix = "the cause of the slowdown removed (steps back to their earlier time)"
    assumes = (
        "the slower steps go back to the median of those before the change; range: back to "
        "their upper or lower quartile"
    )
    saving = Saving(c.lost, c.lost_low, c.lost_high, fix, assumes, "steps", c.spent)
    arrived = _arrival(data, times, c) if c.kind == "regression" else None
    if arrived is not None:
        before, after = arrived
        lines.append(
            f"other processes kept {before.others:.2f} cores busy before the change and "
            f"{after.others:.2f} after, on a machine then full ({after.cpus:g} CPUs), and the "
            f"run's processes {before.tree:.2f} then {after.tree:.2f}: another job arrived"
        )
        saving = Saving(
            0.0, 0.0, c.lost_high,
            "none in the job: the machine's other work (run it elsewhere, or pin each job to "
            "cores of its own)",
            f"other processes took {after.others - before.others:.2f} more cores of a full "
            "machine from the change on, and the run's processes got fewer, so the slower steps "
            "are counted as waits for a CPU "
            f"(nothing the job can change); the range counts them as the job's own: {assumes}",
            "steps", c.spent,
        )  # fmt: skip
    return build(
        data,
        th,
        id="step_regression",
        title=title,
        seconds=c.lost,
        evidence=Evidence(
            tuple(lines),
            {
                "kind": c.kind,
                "step": first.index,
                "at_seconds": data.rel(first.end),
                "before_seconds": c.before,
                "after_seconds": c.after,
                "ratio": c.after / c.before,
                "p_value": c.p_value,
                "pid": c.pid,
                "rank": rank,
            },
            (span,),
        ),
        suggestion=(
            "Look at what changed at that point: a growing data structure or Python list kept "
            "across steps (memory growth), longer sequences later in the data, a learning-rate "
            "or curriculum phase, thermal throttling or another job arriving on the machine, "
            "torch.compile recompiling (TORCH_LOGS=recompiles); compare the report's charts "
            "around that time."
        ),
        saving=saving,
    )


def outlier_steps(data: RunData, th: Thresholds) -> list[Finding]:
    """Fires when steps take longer than median + ``outlier_mad_k`` robust sigmas and at least
    ``outlier_min_ratio`` x the median (per segment, when the step time changed)."""
    if not data.steps:
        raise NotApplicable("no steps reported with step()")
    series = _series(data, th)
    if not series:
        raise NotApplicable(f"fewer than {th.regression_min_steps} timed steps per process")
    outliers: list[tuple[StepTime, float]] = []  # (step, its segment's median)
    quartiles: dict[int, tuple[float, float]] = {}  # id(step) -> its segment's quartiles
    for ts in series.values():
        change = find_change(ts, th)
        cut = change.at if change is not None and change.kind == "regression" else 0
        for seg in (ts[:cut], ts[cut:]):
            if not seg:
                continue
            d = [t.seconds for t in seg]
            m, spread = median(d), MAD_TO_SIGMA * mad(d)
            limit = max(m + th.outlier_mad_k * spread, th.outlier_min_ratio * m)
            q = _quartiles(d)
            for t in seg:
                if t.seconds > limit:
                    outliers.append((t, m))
                    quartiles[id(t)] = q
    if not outliers:
        return []
    excess = sum(t.seconds - m for t, m in outliers) / len(series)
    worst = sorted(outliers, key=lambda x: x[0].seconds - x[1], reverse=True)[:5]
    total = sum(len(ts) for ts in series.values())
    lines = [
        f"{len(outliers)} of {total} steps were outliers, {format_seconds(excess)} above the "
        "median in all" + (" (per process)" if len(series) > 1 else ""),
        "worst: "
        + "; ".join(
            f"step {t.index} at {data.rel(t.end):,.1f} s took {format_seconds(t.seconds)} "
            f"({t.seconds / m:.1f}x the median)"
            if m > 0
            else f"step {t.index}"
            for t, m in worst
        ),
    ]
    # Regular spacing of outliers points at periodic work (checkpoints, evaluation).
    idx = sorted(t.index for t, _ in outliers)
    gaps = [b - a for a, b in itertools.pairwise(idx)]
    if len(gaps) >= 2 and max(gaps) - min(gaps) <= 1:
        lines.append(f"they recur every {median(gaps):.0f} steps: periodic work")
    n_proc = len(series)
    excess_low = sum(max(t.seconds - quartiles[id(t)][1], 0.0) for t, _ in outliers) / n_proc
    excess_high = sum(max(t.seconds - quartiles[id(t)][0], 0.0) for t, _ in outliers) / n_proc
    fix = (
        "the work of the stalled steps taken off the loop (asynchronous saves, evaluation "
        "elsewhere)"
    )
    assumes = "the outlier steps take their segment's median; range: its upper or lower quartile"
    spent = sum(t.seconds for t, _ in outliers) / n_proc
    machine = sharing(data, min(t.start for t, _ in outliers), max(t.end for t, _ in outliers))
    if machine is not None and machine.shared:
        # Stalls on a machine other processes kept full: the loop may have waited for a CPU,
        # which no change to the loop wins back, or for its own work; per-tick CPU time cannot
        # tell which. The saving counts none of them, the range all.
        lines.append(
            f"other processes kept {machine.others:.2f} cores busy while they ran, the run's "
            f"processes {machine.tree:.2f}, of {machine.cpus:g} CPUs: the machine was full"
        )
        saving = Saving(
            0.0, 0.0, excess_high,
            "none while the machine is shared: rerun with the machine to itself to tell the "
            "loop's own stalls from waiting for a CPU",
            f"other processes kept {machine.others:.2f} cores of a full machine busy while the "
            "outlier steps ran, so the stalls may be waits for a CPU (counted as nothing to "
            f"win); the range counts them as the loop's own: {assumes}",
            "steps", spent,
        )  # fmt: skip
    else:
        saving = Saving(excess, excess_low, excess_high, fix, assumes, "steps", spent)
    return build(
        data,
        th,
        id="outlier_steps",
        title="Outlier steps: stalls far above the usual step time",
        seconds=excess,
        evidence=Evidence(
            tuple(lines),
            {
                "outliers": len(outliers),
                "steps": total,
                "excess_seconds": excess,
                "threshold_ratio": th.outlier_min_ratio,
                "worst_step": worst[0][0].index,
                "worst_seconds": worst[0][0].seconds,
            },
            tuple(TimeRange(data.rel(t.start), data.rel(t.end)) for t, _ in worst),
        ),
        suggestion=(
            "Find what runs on those steps: synchronous checkpoints (save asynchronously, e.g. "
            "torch.distributed.checkpoint.async_save), evaluation inside the loop, Python garbage "
            "collection (gc.freeze() after setup), DataLoader workers restarting each epoch "
            "(persistent_workers=True), torch.compile recompiles, or logging that forces a sync."
        ),
        saving=saving,
    )
