"""Per-model status: cumulative compute by method, each tier's state, and the obligations that
crossings open, as documents (``governance status --json``, the notification pack). The status
itself is a replay of the ledger (computewatch.governance.replay); the governance service
(computewatch.governance.service) appends what changes it. :func:`load_models` reads the live
view (``model_runs``: running runs with their figures so far) the service and the accounts'
policy judge from."""

from __future__ import annotations

import datetime as dt
import difflib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from computewatch.governance.tiers import TierStatus
from computewatch.lineage.compute import (
    TRAINING_STAGES,
    Declaration,
    Estimate,
    GovernanceError,
    ModelCompute,
    RunCompute,
    per_model,
)
from computewatch.serverdb.governance_models import ModelRun, Obligation


def _estimate(value: float | None, low: float | None, high: float | None) -> Estimate | None:
    if value is None:
        return None
    return Estimate(value, value if low is None else low, value if high is None else high)


def run_of(row: ModelRun) -> RunCompute:
    flops: dict[str, Estimate] = {}
    for method, est in (
        ("counted", _estimate(row.counted, row.counted_low, row.counted_high)),
        ("hardware", _estimate(row.hardware, row.hardware_low, row.hardware_high)),
        ("architecture", _estimate(row.architecture, None, None)),
    ):
        if est is not None:
            flops[method] = est
    return RunCompute(
        run_id=row.run_id,
        declaration=Declaration(row.model, row.base_model, row.stage, row.parameters),
        status=row.status,
        started_at=row.started_at,
        duration_seconds=row.duration_seconds,
        gpu_hours=row.gpu_hours,
        energy_kwh=row.energy_kwh,
        flops=flops,
        forecast_high=row.forecast_high,
        hardware=tuple(str(d) for d in row.devices or ()),
    )


def load_models(session: Session, teams: frozenset[str] | None = None) -> dict[str, ModelCompute]:
    """Every declared model's compute. With ``teams``, only runs of those teams count (a team
    sees its own share; an admin, ``None``, sees whole models)."""
    q = select(ModelRun)
    if teams is not None:
        q = q.where(ModelRun.team.in_(sorted(teams)))
    return per_model(run_of(r) for r in session.scalars(q))


@dataclass(frozen=True, slots=True)
class ObligationView:
    id: int
    model: str
    tier: str
    trigger: str
    rule: str
    judged_flop: float | None
    method: str | None
    threshold: float
    opened_at: float
    deadline_at: float | None
    state: str
    done_at: float | None
    reference: str | None

    def days_left(self, now: float) -> float | None:
        if self.deadline_at is None or self.state == "done":
            return None
        return (self.deadline_at - now) / 86_400


@dataclass(slots=True)
class ModelStatus:
    compute: ModelCompute
    tiers: list[TierStatus]
    obligations: list[ObligationView] = field(default_factory=list)
    pruned_runs: int = 0
    """Runs whose entries were pruned under the retention policy (their totals are counted)."""


def find_model(names: Iterable[str], name: str) -> str:
    """``name`` when it is a known model; otherwise an error with close matches."""
    known = sorted(set(names))
    if name in known:
        return name
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    listed = "" if close or not known else f" (known: {', '.join(known[:10])})"
    raise GovernanceError(f"no model named {name!r}{hint}{listed}")


def view_of(o: Obligation) -> ObligationView:
    return ObligationView(
        o.id, o.model, o.tier, o.trigger, o.rule, o.judged_flop, o.method, o.threshold,
        o.opened_at, o.deadline_at, o.state, o.done_at, o.reference,
    )  # fmt: skip


def _iso(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def status_json(statuses: Iterable[ModelStatus], now: float) -> list[dict[str, Any]]:
    """The documented JSON of ``governance status`` (docs/governance.md)."""
    out: list[dict[str, Any]] = []
    for s in statuses:
        m = s.compute
        judged = m.judged()
        out.append(
            {
                "model": m.model,
                "base_model": m.base_model,
                "base_known": m.base_known,
                "runs": len(m.runs) + s.pruned_runs,
                "gpu_hours": round(m.gpu_hours, 6),
                "energy_kwh": round(m.energy_kwh, 6),
                "training_seconds": round(m.training_seconds, 3),
                "own_flop": {k: _est(e) for k, e in sorted(m.own.items())},
                "cumulative_flop": {k: _est(e) for k, e in sorted(m.cumulative.items())},
                "judged_flop": None if judged is None else judged[0],
                "judged_method": None if judged is None else judged[1],
                "forecast_additional_flop_high": m.forecast_high,
                "tiers": [
                    {
                        "tier": t.tier.name,
                        "state": t.state,
                        "threshold": t.threshold,
                        "judged_flop": t.judged_flop,
                        "method": t.method,
                        "rule": t.tier.rule,
                        "note": t.note,
                    }
                    for t in s.tiers
                ],
                "obligations": [
                    {
                        "id": o.id,
                        "tier": o.tier,
                        "trigger": o.trigger,
                        "state": o.state,
                        "opened_at": _iso(o.opened_at),
                        "deadline": None if o.deadline_at is None else _iso(o.deadline_at),
                        "days_left": None if (d := o.days_left(now)) is None else round(d, 2),
                        "reference": o.reference,
                    }
                    for o in s.obligations
                ],
            }
        )
    return out


def _est(e: Estimate) -> dict[str, float]:
    return {"value": e.value, "low": e.low, "high": e.high}


def report_doc(status: ModelStatus, now: float) -> dict[str, Any]:
    """The notification pack's data for one model (``governance report``): its status, every
    run included with its compute by method, and the timeline of cumulative compute."""
    doc = status_json([status], now)[0]
    runs = sorted(status.compute.runs, key=lambda r: r.started_at)
    doc["runs_included"] = [
        {
            "run_id": r.run_id,
            "stage": r.declaration.stage,
            "counts_as_training": r.declaration.stage in TRAINING_STAGES,
            "status": r.status,
            "started_at": _iso(r.started_at),
            "duration_seconds": round(r.duration_seconds, 3),
            "gpu_hours": round(r.gpu_hours, 6),
            "energy_kwh": r.energy_kwh,
            "hardware": list(r.hardware),
            "flop": {k: _est(e) for k, e in sorted(r.flops.items())},
        }
        for r in runs
    ]
    timeline: list[dict[str, Any]] = []
    total: dict[str, float] = {}
    for r in runs:
        if r.declaration.stage not in TRAINING_STAGES:
            continue
        for k, e in r.flops.items():
            total[k] = total.get(k, 0.0) + e.high
        timeline.append(
            {"time": _iso(r.started_at + r.duration_seconds), "own_flop_high": dict(total)}
        )
    doc["timeline"] = timeline
    doc["generated_at"] = _iso(now)
    doc["privacy"] = (
        "totals, methods and run ids only: no code, data, command lines or configuration"
    )
    return doc
