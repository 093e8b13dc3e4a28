"""Projecting a run to completion from its steps so far (``--total-steps N``).

``total_steps`` is the run's steps; when several processes report steps (data-parallel ranks
each reporting every step) the steps done are the mean per process. Remaining time = remaining
steps × recent step time (the mean of the last ``WINDOW`` steps), with
a range from the 10th to the 90th percentile of those steps. Energy, carbon, cost and FLOPs are
projected in proportion to time: value so far × (elapsed + remaining) / elapsed, their own
ranges widened by the time range.
"""

from __future__ import annotations

from typing import Any

from computewatch.analysis.summary import percentile
from computewatch.records import ESTIMATED, figure
from computewatch.store import RunRow, Store

WINDOW = 200


def step_durations(store: Store, run: RunRow) -> list[float]:
    """Durations between consecutive steps of each reporting process, in time order."""
    out: list[tuple[float, float]] = []
    prev: dict[int, float] = {}
    for s in store.steps(run.key):
        if s.pid in prev:
            out.append((s.mono, s.mono - prev[s.pid]))
        prev[s.pid] = s.mono
    out.sort()
    return [d for _, d in out]


def forecast(
    store: Store,
    run: RunRow,
    summary: dict[str, Any],
    sections: dict[str, Any],
    total_steps: int,
) -> dict[str, Any]:
    steps = summary.get("steps") or {}
    elapsed = float(summary.get("duration_seconds") or 0.0)
    procs = max(int(steps.get("processes") or 1), 1)
    # ``total_steps`` counts the run's steps: in data-parallel training every rank reports
    # each step, so the run has done the steps of one process (the mean over processes).
    done = round(int(steps.get("count") or 0) / procs)
    base: dict[str, Any] = {"total_steps": total_steps, "steps_done": done}
    if done >= total_steps:
        return {**base, "complete": True}
    durations = step_durations(store, run)[-WINDOW:]
    if not durations or elapsed <= 0:
        return {**base, "complete": False, "note": "no step times yet: nothing to project"}
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
    out: dict[str, Any] = {
        **base,
        "complete": False,
        "wall_seconds_at_completion": figure(
            elapsed + rem, "s", ESTIMATED, low=elapsed + rem_lo, high=elapsed + rem_hi,
            assumptions=assumptions,
        ),
    }  # fmt: skip
    for key, path in (
        ("energy_kwh", ("energy", "facility")),
        ("carbon_gco2e", ("carbon", "total")),
        ("cost_usd", ("cost", "total")),
        ("flops", ("flops",)),
    ):
        cur: Any = sections
        for p in path:
            cur = cur.get(p) if isinstance(cur, dict) else None
        if not isinstance(cur, dict) or cur.get("value") is None:
            continue
        out[key] = figure(
            cur["value"] * k,
            cur["unit"],
            ESTIMATED,
            low=cur["low"] * k_lo,
            high=cur["high"] * k_hi,
            assumptions=[f"{cur['value']:.6g} {cur['unit']} so far x {k:.3f}"],
        )
    return out
