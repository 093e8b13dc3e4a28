"""Distributed runs: a straggler rank, and time spent in collective communication (the
phases a rank records around its collectives: ``comm``, or any name ``is_comm_phase``
accepts, such as ``allreduce`` or ``nccl:all_gather``)."""

from __future__ import annotations

import msgspec

from computewatch.analysis.steps import is_comm_phase
from computewatch.config.thresholds import Thresholds
from computewatch.diagnosis.findings import Evidence, Finding, Saving, TimeRange
from computewatch.diagnosis.loader import NotApplicable, RunData
from computewatch.diagnosis.rules import build, pct
from computewatch.diagnosis.stats import median
from computewatch.units import format_seconds


class RankTimes(msgspec.Struct, frozen=True):
    rank: int
    pid: int
    steps: int
    step_seconds: float  # summed over its timed steps
    comm_seconds: float

    @property
    def compute_per_step(self) -> float:
        return (self.step_seconds - self.comm_seconds) / self.steps if self.steps else 0.0

    @property
    def comm_share(self) -> float:
        return self.comm_seconds / self.step_seconds if self.step_seconds > 0 else 0.0


def rank_times(data: RunData, th: Thresholds) -> list[RankTimes]:
    """Per rank (from the writers' ``rank``), step and ``comm`` time over the steps every rank
    has, warm-up steps left out. Raises NotApplicable for fewer than two ranks."""
    times = data.step_times()
    comm = data.phase_seconds_by_step(is_comm_phase)
    ranked: dict[int, int] = {}
    for pid, ts in times.items():
        r = data.rank_of(pid)
        if r is not None and ts:
            ranked.setdefault(r, pid)  # one process per rank (its DataLoader workers aside)
    if len(ranked) < 2:
        raise NotApplicable("not a distributed run: fewer than two ranks reported steps")
    skip = th.skip_first_steps
    common = min(len(times[pid]) for pid in ranked.values()) - skip
    if common < 1:
        raise NotApplicable("too few steps on some rank")
    out = []
    for r, pid in sorted(ranked.items()):
        ts = times[pid][skip : skip + common]
        cs = comm[pid][skip : skip + common]
        out.append(RankTimes(r, pid, common, sum(t.seconds for t in ts), sum(cs)))
    return out


def stragglers(data: RunData, th: Thresholds) -> list[Finding]:
    """Fires when the slowest rank's compute time per step (step time minus ``comm`` time) is
    ``straggler_min_excess`` or more above the median of the other ranks': they wait for it."""
    ranks = rank_times(data, th)
    slow = max(ranks, key=lambda r: r.compute_per_step)
    med = median([r.compute_per_step for r in ranks if r is not slow])  # the other ranks
    if med <= 0 or (slow.compute_per_step - med) / med < th.straggler_min_excess:
        return []
    excess = (slow.compute_per_step - med) / med
    lost = (slow.compute_per_step - med) * slow.steps
    has_comm = any(is_comm_phase(p.name) for p in data.phases)
    lines = [
        f"rank {slow.rank} is {pct(excess)} slower than the other ranks (median): "
        f"{format_seconds(slow.compute_per_step)} of compute per step against "
        f"{format_seconds(med)}, over "
        f"{slow.steps} steps",
        "compute per step by rank: "
        + ", ".join(f"{r.rank}: {format_seconds(r.compute_per_step)}" for r in ranks[:16])
        + (" ..." if len(ranks) > 16 else ""),
    ]
    if has_comm:
        fast = min(ranks, key=lambda r: r.compute_per_step)
        lines.append(
            f"rank {fast.rank} spends {pct(fast.comm_share)} of its steps in comm (waiting), "
            f"rank {slow.rank} {pct(slow.comm_share)}"
        )
    else:
        lines.append("no `comm` phases recorded: compute time is the whole step time")
    first = data.step_times()[slow.pid]
    span = (TimeRange(data.rel(first[0].start), data.rel(first[-1].end)),) if first else ()
    per_step = _per_step_compute(data, slow.pid, th)
    q_lo, q_hi = _quartile_pair(per_step)
    return build(
        data,
        th,
        id="stragglers",
        title=f"Straggler: rank {slow.rank} holds the others back",
        seconds=lost,
        saving=Saving(
            lost,
            max(min(q_lo, slow.compute_per_step) - med, 0.0) * slow.steps,
            max(max(q_hi, slow.compute_per_step) - med, 0.0) * slow.steps,
            f"rank {slow.rank} made as fast as the others (its node, its share of the work)",
            "every rank waits for the slowest at each collective: its extra compute per step "
            "is the whole job's; range from its steps' lower and upper quartile",
            "ranks",
            slow.step_seconds,
        ),
        evidence=Evidence(
            tuple(lines),
            {
                "slowest_rank": slow.rank,
                "slowest_pid": slow.pid,
                "excess": excess,
                "slowest_compute_per_step_seconds": slow.compute_per_step,
                "others_median_compute_per_step_seconds": med,
                "ranks": len(ranks),
            },
            span,
        ),
        suggestion=(
            f"Find why rank {slow.rank} is slower: its GPU or node throttling or shared with "
            "another job (computewatch top on that node), uneven work per rank (bucket "
            "samples by sequence length, equal shard sizes), CPU affinity or NUMA binding "
            "(torchrun --local-ranks-filter / numactl), or a slower interconnect link."
        ),
    )


def collective_communication(data: RunData, th: Thresholds) -> list[Finding]:
    """Fires when ``comm`` phases take ``comm_share_high`` or more of the ranks' step time."""
    if not any(is_comm_phase(p.name) for p in data.phases):
        raise NotApplicable("no `comm` phases recorded")
    ranks = rank_times(data, th)
    step = sum(r.step_seconds for r in ranks)
    comm = sum(r.comm_seconds for r in ranks)
    share = comm / step if step > 0 else 0.0
    if share < th.comm_share_high:
        return []
    lo = min(ranks, key=lambda r: r.comm_share)
    hi = max(ranks, key=lambda r: r.comm_share)
    lines = [
        f"{pct(share)} of step time was in collective communication: "
        f"{format_seconds(comm / len(ranks))} "
        f"per rank over {ranks[0].steps} steps",
        f"comm share by rank from {pct(lo.comm_share)} (rank {lo.rank}) to "
        f"{pct(hi.comm_share)} (rank {hi.rank})",
    ]
    if hi.comm_share - lo.comm_share > th.straggler_min_excess:
        lines.append(
            f"the spread means waiting, not transfer: ranks wait in comm for rank {lo.rank}"
        )
    return build(
        data,
        th,
        id="collective_communication",
        title="Time in collective communication",
        seconds=comm / len(ranks),
        saving=Saving(
            0.5 * comm / len(ranks),
            0.0,
            comm / len(ranks),
            "communication overlapped with the backward pass (DDP buckets) or made rarer "
            "(gradient accumulation)",
            "how much of the communication can hide behind compute is not measured: half, "
            "range none to all",
            "comm",
            comm / len(ranks),
        ),
        evidence=Evidence(
            tuple(lines),
            {
                "comm_share": share,
                "comm_seconds_per_rank": comm / len(ranks),
                "min_rank_share": lo.comm_share,
                "max_rank_share": hi.comm_share,
            },
        ),
        suggestion=(
            "Overlap and shrink communication: let DDP overlap gradient all-reduce with backward "
            "(default buckets; tune bucket_cap_mb, gradient_as_bucket_view=True), accumulate "
            "gradients over several micro-batches under model.no_sync(), use a larger batch "
            "per rank, compress gradients (DDP comm hooks: bf16 or PowerSGD), and check the "
            "interconnect (NCCL over NVLink/InfiniBand, not TCP)."
        ),
    )


def _per_step_compute(data: RunData, pid: int, th: Thresholds) -> list[float]:
    """One process's compute time (step minus ``comm``) of each step after the warm-up."""
    times = data.step_times().get(pid, [])
    comm = data.phase_seconds_by_step(is_comm_phase).get(pid, [0.0] * len(times))
    skip = th.skip_first_steps
    return [t.seconds - c for t, c in zip(times[skip:], comm[skip:], strict=False)]


def _quartile_pair(values: list[float]) -> tuple[float, float]:
    s = sorted(values)
    if not s:
        return 0.0, 0.0
    return s[(len(s) - 1) // 4], s[(3 * (len(s) - 1)) // 4]
