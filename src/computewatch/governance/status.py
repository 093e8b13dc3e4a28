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
    MODEL_SEP,
    TRAINING_STAGES,
    Declaration,
    Estimate,
    GovernanceError,
    ModelCompute,
    RunCompute,
    bare_name,
    per_model,
    qualify,
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


def load_models(
    session: Session, teams: frozenset[str] | None = None, *, count_simulated: bool = False
) -> dict[str, ModelCompute]:
    """Every declared model's compute. With ``teams``, only runs of those teams count (a team
    sees its own share; an admin, ``None``, sees whole models); runs on simulated devices only
    with ``count_simulated``."""
    q = select(ModelRun)
    if teams is not None:
        q = q.where(ModelRun.team.in_(sorted(teams)))
    return per_model((run_of(r) for r in session.scalars(q)), count_simulated)


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
    crossed_at: float | None = None
    """When the compute crossed the tier (its deadline counts from then); None for a forecast,
    whose deadline counts from when it was noticed (``opened_at``), and for entries written
    before crossing times were recorded."""

    def days_left(self, now: float) -> float | None:
        """Days to the deadline (negative when overdue); None when done or without one."""
        if self.deadline_at is None or self.state != "open":
            return None
        return (self.deadline_at - now) / 86_400

    def overdue(self, now: float) -> bool:
        left = self.days_left(now)
        return left is not None and left < 0


@dataclass(slots=True)
class ModelStatus:
    compute: ModelCompute
    tiers: list[TierStatus]
    obligations: list[ObligationView] = field(default_factory=list)
    pruned_runs: int = 0
    """Runs whose entries were pruned under the retention policy (their totals are counted)."""
    noticed: dict[str, float] = field(default_factory=dict)
    """Tier name -> when the server first recorded its present state (crossed or forecast)."""
    hidden_runs: int | None = None
    """A team's view: the model's runs it cannot see (other teams', and pruned runs, whose
    teams the log no longer tells); None for a whole view (an admin's)."""
    hidden_base: bool = False
    """A team's view: the base model has runs, none of them the team's (its share unseen)."""


def find_model(names: Iterable[str], name: str, team: str | None = None) -> str:
    """The known model ``name`` means: itself (``team/name``); a bare name is ``team``'s model
    of that name, else the one team's that has it; otherwise an error with close matches (or
    the teams to choose from)."""
    known = sorted(set(names))
    if name in known:
        return name
    if MODEL_SEP not in name:
        if team is not None and qualify(team, name) in known:
            return qualify(team, name)
        teams = [m for m in known if bare_name(m) == name and MODEL_SEP in m]
        if len(teams) == 1:
            return teams[0]
        if teams:
            raise GovernanceError(
                f"{len(teams)} teams have a model named {name!r}: say which ({', '.join(teams)})"
            )
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
    if not close and MODEL_SEP not in name:
        by_name = {bare_name(m): m for m in known}
        close = [by_name[c] for c in difflib.get_close_matches(name, by_name, n=3, cutoff=0.5)]
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
                "simulated_runs": m.simulated_runs,
                "simulated_counted": m.simulated_counted,
                "implausible": [
                    {
                        "run_id": x.run_id,
                        "counted_flop": x.counted_flop,
                        "hardware_bound_flop": x.hardware_bound_flop,
                        "judged_at": "hardware_bound_flop",
                    }
                    for x in m.implausible
                ],
                **_view_json(s),
                "tiers": [_tier_json(s, t, now) for t in s.tiers],
                "obligations": [
                    {
                        "id": o.id,
                        "tier": o.tier,
                        "trigger": o.trigger,
                        "state": o.state,
                        "crossed_at": _maybe_iso(o.crossed_at),
                        "opened_at": _iso(o.opened_at),
                        "noticed_at": _iso(o.opened_at),
                        "deadline": _maybe_iso(o.deadline_at),
                        "days_left": _days(o.days_left(now)),
                        "overdue": o.overdue(now),
                        "reference": o.reference,
                    }
                    for o in _overdue_first(s.obligations, now)
                ],
            }
        )
    return out


def _view_json(s: ModelStatus) -> dict[str, Any]:
    """Whether the figures are the whole model's or only what the caller's team may see."""
    note = view_note(s)
    if s.hidden_runs is None or (not s.hidden_runs and not s.hidden_base):
        return {"view": "whole", "hidden_runs": 0, "view_note": note}
    return {"view": "partial", "hidden_runs": s.hidden_runs, "view_note": note}


def view_note(s: ModelStatus) -> str:
    """Whether the figures are the whole model's or only what the caller's team may see, in
    words ("" for an admin's whole view)."""
    if s.hidden_runs is None:
        return ""
    if not s.hidden_runs and not s.hidden_base:
        return "every run of it is your team's"
    said = []
    if s.hidden_runs:
        said.append(f"{s.hidden_runs} runs of this model are not your team's (or were pruned)")
    if s.hidden_base:
        said.append(f"the base model {s.compute.base_model}'s runs are another team's")
    return (
        "partial view: " + "; ".join(said) + ". Compute and tiers here count your team's runs "
        "only; obligations are the whole model's (an admin token sees the whole status)"
    )


def _overdue_first(obligations: Iterable[ObligationView], now: float) -> list[ObligationView]:
    return sorted(obligations, key=lambda o: not o.overdue(now))


def _days(d: float | None) -> float | None:
    return None if d is None else round(d, 2)


def _maybe_iso(t: float | None) -> str | None:
    return None if t is None else _iso(t)


@dataclass(frozen=True, slots=True)
class TierDates:
    """A tier's dates as of a moment: when the server noticed its state, its deadline, and the
    days left to it (negative when overdue; None when none runs)."""

    noticed_at: float | None
    deadline_at: float | None
    days_left: float | None

    @property
    def overdue(self) -> bool:
        return self.days_left is not None and self.days_left < 0


def tier_dates(s: ModelStatus, t: TierStatus, now: float) -> TierDates:
    """A tier's dates: when the server noticed its state, and its deadline (from the
    obligation it opened, else from the crossing, else from the noticing)."""
    judged = t.state in ("crossed", "forecast")
    o = max((o for o in s.obligations if o.tier == t.tier.name), key=lambda o: o.id, default=None)
    noticed = s.noticed.get(t.tier.name) if judged else None
    if o is not None and judged:
        deadline, left = o.deadline_at, o.days_left(now)
        noticed = o.opened_at if noticed is None else min(noticed, o.opened_at)
    elif judged and t.tier.deadline_days is not None:
        start = t.crossed_at if t.crossed_at is not None else noticed
        deadline = None if start is None else start + t.tier.deadline_days * 86_400
        left = None if deadline is None else (deadline - now) / 86_400
    else:
        deadline, left = None, None
    return TierDates(noticed, deadline, left)


def _tier_json(s: ModelStatus, t: TierStatus, now: float) -> dict[str, Any]:
    """A tier's state with its dates: when it was crossed (event time), when the server
    noticed, and its deadline (:func:`tier_dates`)."""
    dates = tier_dates(s, t, now)
    return {
        "tier": t.tier.name,
        "state": t.state,
        "threshold": t.threshold,
        "judged_flop": t.judged_flop,
        "method": t.method,
        "rule": t.tier.rule,
        "deadline_rule": deadline_rule(t),
        "note": t.note,
        "crossed_at": _maybe_iso(t.crossed_at),
        "noticed_at": _maybe_iso(dates.noticed_at),
        "deadline": _maybe_iso(dates.deadline_at),
        "days_left": _days(dates.days_left),
        "overdue": dates.overdue,
    }


def deadline_rule(t: TierStatus) -> str:
    """How the tier's deadline is counted, in words (the rule text says why)."""
    days = t.tier.deadline_days
    if days is None:
        return "recorded only: this tier opens no obligation"
    return (
        f"{days} days from the crossing (the end of the run that took the compute over the "
        f"threshold), or, for a forecast, from when the server noticed it"
    )


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
            "simulated": r.simulated,
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
