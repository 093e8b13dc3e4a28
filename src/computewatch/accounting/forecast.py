"""Projecting a run to completion from its steps so far (``--total-steps N``).

``total_steps`` is the run's steps; when several processes report steps (data-parallel ranks
each reporting every step) the steps done are the mean per process. Remaining time = remaining
steps × recent step time (the mean of the last ``WINDOW`` steps), with
a range from the 10th to the 90th percentile of those steps. Energy, carbon, cost and FLOPs are
projected in proportion to time: value so far × (elapsed + remaining) / elapsed, their own
ranges widened by the time range.
"""

from __future__ import annotations

from collections.abc import Sequence

from computewatch.accounting.tally import RECENT, StepTally
from computewatch.analysis.common import percentile
from computewatch.analysis.summary_types import (
    CarbonSection,
    CostSection,
    EnergySection,
    FlopsSection,
    Forecast,
    RunSummary,
)
from computewatch.records import ESTIMATED, Figure, figure
from computewatch.store import RunRow, StepRow, Store

WINDOW = RECENT


def step_durations(
    store: Store, run: RunRow, steps: Sequence[StepRow] | None = None
) -> list[float]:
    """Durations between consecutive steps of each reporting process, in time order.
    ``steps``: the run's, when already read (by process, then time, as the store gives them)."""
    out: list[tuple[float, float]] = []
    prev: dict[int, float] = {}
    for s in store.steps(run.key) if steps is None else steps:
        if s.pid in prev:
            out.append((s.mono, s.mono - prev[s.pid]))
        prev[s.pid] = s.mono
    out.sort()
    return [d for _, d in out]


def forecast(
    store: Store,
    run: RunRow,
    summary: RunSummary,
    total_steps: int,
    *,
    flops: FlopsSection | None = None,
    energy: EnergySection | None = None,
    carbon: CarbonSection | None = None,
    cost: CostSection | None = None,
    steps: Sequence[StepRow] | StepTally | None = None,
) -> Forecast:
    """The ``forecast`` section: the run at ``total_steps``, from its steps so far and the
    accounting sections computed for it, each projected when given (a live upload gives
    ``flops`` alone). ``steps``: the run's (or their tally), when already read."""
    stats = summary["steps"]
    elapsed = float(summary.get("duration_seconds") or 0.0)
    procs = max(int(stats.get("processes") or 1), 1)
    # ``total_steps`` counts the run's steps: in data-parallel training every rank reports
    # each step, so the run has done the steps of one process (the mean over processes).
    done = round(int(stats.get("count") or 0) / procs)
    if done >= total_steps:
        return {"total_steps": total_steps, "steps_done": done, "complete": True}
    if isinstance(steps, StepTally):
        durations = steps.recent_durations(WINDOW)
    else:
        durations = step_durations(store, run, steps)[-WINDOW:]
    if not durations or elapsed <= 0:
        return {
            "total_steps": total_steps,
            "steps_done": done,
            "complete": False,
            "note": "no step times yet: nothing to project",
        }
    recent = sorted(durations)
    mean = sum(recent) / len(recent)
    remaining = total_steps - done
    rem = remaining * mean
    rem_lo = remaining * percentile(recent, 0.10)
    rem_hi = remaining * percentile(recent, 0.90)
    k, k_lo, k_hi = ((elapsed + r) / elapsed for r in (rem, rem_lo, rem_hi))
    assumptions = [
        f"{done} of {total_steps} steps done in {elapsed:.1f} s",
        f"recent step time {mean:.4g} s (mean of the last {len(recent)}; range from the 10th "
        "to the 90th percentile)",
        "energy, carbon, cost and FLOPs grow in proportion to time",
    ]
    out: Forecast = {
        "total_steps": total_steps,
        "steps_done": done,
        "complete": False,
        "wall_seconds_at_completion": figure(
            elapsed + rem, "s", ESTIMATED, low=elapsed + rem_lo, high=elapsed + rem_hi,
            assumptions=assumptions,
        ),
    }  # fmt: skip

    def projected(cur: Figure | None) -> Figure | None:
        if cur is None:  # a section not computed
            return None
        value, low, high = cur["value"], cur["low"], cur["high"]
        if value is None or low is None or high is None:
            return None
        return figure(
            value * k,
            cur["unit"],
            ESTIMATED,
            low=low * k_lo,
            high=high * k_hi,
            assumptions=[f"{value:.6g} {cur['unit']} so far x {k:.3f}"],
        )

    if (e := projected(energy["facility"] if energy else None)) is not None:
        out["energy_kwh"] = e
    if (c := projected(carbon["total"] if carbon else None)) is not None:
        out["carbon_gco2e"] = c
    if (usd := projected(cost["total"] if cost else None)) is not None:
        out["cost_usd"] = usd
    if (f := projected(flops)) is not None:
        out["flops"] = f
    return out
