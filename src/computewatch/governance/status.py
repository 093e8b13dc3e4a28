"""Per-model status: cumulative compute by method, each tier's state, and the obligations that
crossings open (kept in the database until marked done, each event in the ledger)."""

from __future__ import annotations

import datetime as dt
import difflib
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from computewatch.governance.tiers import DEFAULT_TIERS, Tier, TierStatus, model_status
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
from computewatch.serverdb.ledger_store import append

OPENED = "obligation-opened"
DONE = "obligation-done"


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


def _view(o: Obligation) -> ObligationView:
    return ObligationView(
        o.id, o.model, o.tier, o.trigger, o.rule, o.judged_flop, o.method, o.threshold,
        o.opened_at, o.deadline_at, o.state, o.done_at, o.reference,
    )  # fmt: skip


def refresh(
    session: Session,
    tiers: Sequence[Tier] = DEFAULT_TIERS,
    *,
    now: float | None = None,
    teams: frozenset[str] | None = None,
) -> list[ModelStatus]:
    """Every model's status; opens an obligation (and appends its ledger entry) for each tier
    newly crossed or forecast to be, with the tier's deadline. Only an unrestricted view
    (``teams=None``) opens obligations: a team's share is not the model's compute. The caller
    commits."""
    now = time.time() if now is None else now
    models = load_models(session, teams)
    existing: dict[tuple[str, str], Obligation] = {
        (o.model, o.tier): o for o in session.scalars(select(Obligation))
    }
    out: list[ModelStatus] = []
    for name in sorted(models):
        m = models[name]
        states = model_status(m, models, tiers)
        for st in states:
            if st.state not in ("crossed", "forecast") or st.tier.deadline_days is None:
                continue
            if teams is not None or (name, st.tier.name) in existing:
                continue
            o = _open(session, name, st, now)
            existing[(name, st.tier.name)] = o
        views = [_view(o) for (model, _), o in sorted(existing.items()) if model == name]
        out.append(ModelStatus(m, states, views))
    return out


def _open(session: Session, model: str, st: TierStatus, now: float) -> Obligation:
    days = st.tier.deadline_days
    o = Obligation(
        model=model, tier=st.tier.name, trigger=st.state, rule=st.tier.rule,
        judged_flop=st.judged_flop, method=st.method, threshold=st.threshold, opened_at=now,
        deadline_at=None if days is None else now + days * 86_400, state="open",
    )  # fmt: skip
    session.add(o)
    session.flush()
    append(session, OPENED, _body(o))
    return o


def _body(o: Obligation) -> dict[str, Any]:
    return {
        "obligation": o.id, "model": o.model, "tier": o.tier, "trigger": o.trigger,
        "judged_flop": o.judged_flop, "method": o.method, "threshold": o.threshold,
        "opened_at": _iso(o.opened_at),
        "deadline": None if o.deadline_at is None else _iso(o.deadline_at),
        "state": o.state, "reference": o.reference,
    }  # fmt: skip


def mark_done(session: Session, obligation_id: int, reference: str) -> ObligationView:
    """Mark an obligation fulfilled with a reference (a notification's number, a URL)."""
    if not reference.strip():
        raise GovernanceError("a reference is needed to mark an obligation done")
    o = session.get(Obligation, obligation_id)
    if o is None:
        raise GovernanceError(f"no obligation {obligation_id}")
    if o.state == "done":
        raise GovernanceError(f"obligation {obligation_id} was already marked done")
    o.state, o.done_at, o.reference = "done", time.time(), reference.strip()
    session.flush()
    append(session, DONE, _body(o))
    return _view(o)


def find_model(names: Iterable[str], name: str) -> str:
    """``name`` when it is a known model; otherwise an error with close matches."""
    known = sorted(set(names))
    if name in known:
        return name
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    listed = "" if close or not known else f" (known: {', '.join(known[:10])})"
    raise GovernanceError(f"no model named {name!r}{hint}{listed}")


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
                "runs": len(m.runs),
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
