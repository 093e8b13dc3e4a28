"""Governance endpoints under ``/api/v1`` (docs/governance.md), and the server's upkeep:

- ``GET /governance/status``: every model's compute, tiers and obligations, a replay of the
  ledger (read only: a team's token sees its own runs' share, an admin whole models);
- ``GET /governance/models/{model}/report``: one model's notification pack (JSON);
- ``POST /governance/obligations/{id}/done`` (admin): ``{"reference": "..."}``;
- ``GET /governance/grants``: the grants in force (a team's token: its models' and its own);
  ``POST /governance/grants`` and ``POST /governance/grants/revoke`` (admin): ``{"model":
  "team/name", "team": "..."}``, a team's leave to name another team's model as a base model.

The ledger's own endpoints (heads, proofs, cosignatures, export) are in
:mod:`computewatch.server.ledger_api`.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import functools
import logging
import time
from pathlib import Path
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Depends, HTTPException, Query, Request
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from computewatch.config import ConfigError, load_config
from computewatch.governance import accounts, service
from computewatch.governance.ledger_ops import check_signer, key_path, server_key, sign_head
from computewatch.governance.reminders import due_reminders, reminder_events
from computewatch.governance.status import find_model, report_doc, status_json
from computewatch.ledger.chain import format_time
from computewatch.lineage.compute import GovernanceError
from computewatch.server import heap
from computewatch.server.auth import (
    Principal,
    db_session,
    require_admin,
    require_read,
)
from computewatch.server.budgets import BudgetNotifier
from computewatch.server.web.pages import parse_targets
from computewatch.serverdb.engine import Database

router = APIRouter(prefix="/api/v1", tags=["governance"])
log = logging.getLogger("computewatch.server")


class CheckRequest(BaseModel):
    """A scheduler's question, typed strictly: ``"8"`` is not a number, NaN and infinity are
    refused with the field named, an unknown field is an error (not ignored)."""

    model_config = ConfigDict(strict=True, extra="forbid")

    gpus: int = Field(ge=1, le=1_000_000)
    hours: float = Field(gt=0, le=8784, allow_inf_nan=False)
    gpu_model: str | None = Field(default=None, max_length=200)
    model: str | None = Field(default=None, max_length=200)


# -- answers (docs/governance.md, docs/accounts.md: the documented JSON, described) --------------


class FlopEstimate(BaseModel):
    """A FLOP figure and its range."""

    value: float
    low: float
    high: float


class TierOut(BaseModel):
    tier: str
    state: str
    """crossed, forecast, approaching, below or unknown."""
    threshold: float
    judged_flop: float | None
    method: str | None
    rule: str
    deadline_rule: str
    """How the deadline shown is counted."""
    note: str
    crossed_at: str | None
    """When the compute crossed the threshold (ISO 8601, UTC): the end of the run that took
    it over; null unless crossed (or when the crossing is among pruned runs)."""
    noticed_at: str | None
    """When the server recorded the state (crossed or forecast)."""
    deadline: str | None
    days_left: float | None
    """Negative when overdue; null when done or without a deadline."""
    overdue: bool


class ObligationOut(BaseModel):
    id: int
    tier: str
    trigger: str
    state: str
    crossed_at: str | None
    """When the tier was crossed: the deadline counts from then (null for a forecast)."""
    opened_at: str
    """ISO 8601, UTC."""
    noticed_at: str
    """When the server noticed (the same as ``opened_at``)."""
    deadline: str | None
    days_left: float | None
    """Negative when overdue."""
    overdue: bool
    reference: str | None


class ImplausibleOut(BaseModel):
    """A run's counted FLOPs above its hardware's bound (devices × peak × duration)."""

    run_id: str
    counted_flop: float
    hardware_bound_flop: float
    judged_at: str
    """Which of the two the tiers judged (the bound)."""


class ModelStatusOut(BaseModel):
    """``GET /governance/status``: one model's compute, tiers and obligations."""

    model: str
    base_model: str | None
    base_known: bool
    runs: int
    gpu_hours: float
    energy_kwh: float
    training_seconds: float
    own_flop: dict[str, FlopEstimate]
    cumulative_flop: dict[str, FlopEstimate]
    judged_flop: float | None
    judged_method: str | None
    forecast_additional_flop_high: float | None
    simulated_runs: int
    """Runs on simulated or replayed devices: listed, counted only with ``[governance]
    count_simulated = true``."""
    simulated_counted: bool
    implausible: list[ImplausibleOut]
    view: Literal["whole", "partial"]
    """``partial`` when the caller's team cannot see every run of the model (or its base's)."""
    hidden_runs: int
    """Runs of the model the caller cannot see: other teams' and pruned ones (0 for an admin)."""
    view_note: str
    tiers: list[TierOut]
    obligations: list[ObligationOut]


class ReportRunOut(BaseModel):
    run_id: str
    stage: str
    counts_as_training: bool
    status: str
    started_at: str
    duration_seconds: float
    gpu_hours: float
    energy_kwh: float | None
    hardware: list[str]
    simulated: bool
    flop: dict[str, FlopEstimate]


class TimelinePoint(BaseModel):
    time: str
    own_flop_high: dict[str, float]


class ModelReportOut(ModelStatusOut):
    """``GET /governance/models/{model}/report``: the status, every run included and the
    timeline of cumulative compute (the notification pack's data)."""

    runs_included: list[ReportRunOut]
    timeline: list[TimelinePoint]
    generated_at: str
    privacy: str


class GrantRequest(BaseModel):
    """A grant to give or withdraw: ``team``'s runs may name ``model`` as their base model."""

    model_config = ConfigDict(strict=True, extra="forbid")

    model: str = Field(min_length=1, max_length=401)
    """``team/name`` (a bare name: the admin token's team's model)."""
    team: str = Field(min_length=1, max_length=200)


class GrantOut(BaseModel):
    model: str
    team: str
    granted_at: str | None
    """ISO 8601, UTC."""
    granted_by: str


class ObligationDoneOut(BaseModel):
    id: int
    model: str
    tier: str
    state: str
    reference: str | None


class MonthUseOut(BaseModel):
    """What an account's caps count this month: every run's GPU-hours; the FLOP of every run
    but evaluation and inference (undeclared ones at their hardware estimate), by method."""

    gpu_hours: float
    flop_high: float
    flop_by_method: dict[str, float]
    runs: int
    undeclared_runs: int
    left_out: dict[str, int]
    """Runs left out of the FLOP cap by reason: eval, inference, simulated."""


class CheckOut(BaseModel):
    """``POST /accounts/{account}/check``: whether the account may start the job, and why."""

    decision: Literal["allow", "deny"]
    account: str
    reasons: list[str]
    request_gpu_hours: float
    request_flop_high: float | None
    used_gpu_hours_this_month: float
    used_flop_high_this_month: float
    used_this_month: MonthUseOut | None
    """How the month's use was counted (null for an unknown account)."""


_AT = Query(ge=0, description="Unix seconds days_left counts from (default now)")


@router.get("/governance/status", response_model=list[ModelStatusOut])
def governance_status(
    principal: Annotated[Principal, Depends(require_read)],
    session: Annotated[Session, Depends(db_session)],
    at: Annotated[float | None, _AT] = None,
) -> list[dict[str, Any]]:
    """A replay of the ledger (docs/governance.md): reading it appends nothing."""
    now = time.time() if at is None else at
    return status_json(service.status(session, teams=principal.teams), now)


@router.get("/governance/models/{model:path}/report", response_model=ModelReportOut)
def governance_report(
    model: str,
    principal: Annotated[Principal, Depends(require_read)],
    session: Annotated[Session, Depends(db_session)],
) -> dict[str, Any]:
    """One model's notification pack: ``team/name`` (a bare name: the caller's team's, or the
    one team's that has it)."""
    now = time.time()
    statuses = {s.compute.model: s for s in service.status(session, teams=principal.teams)}
    try:
        name = find_model(statuses, model, principal.team)
    except GovernanceError as e:
        raise HTTPException(status_code=404, detail=str(e)) from None
    return report_doc(statuses[name], now)


@router.post("/governance/obligations/{obligation}/done", response_model=ObligationDoneOut)
def obligation_done(
    obligation: int,
    reference: Annotated[str, Body(embed=True, min_length=1, max_length=2000)],
    principal: Annotated[Principal, Depends(require_admin)],
    request: Request,
) -> dict[str, Any]:
    db: Database = request.app.state.db
    with db.writing(), db.session() as session:
        try:
            view = service.mark_done(session, obligation, reference)
        except GovernanceError as e:
            raise HTTPException(status_code=409 if "already" in str(e) else 404,
                                detail=str(e)) from None  # fmt: skip
        session.commit()
    return {"id": view.id, "model": view.model, "tier": view.tier, "state": view.state,
            "reference": view.reference}  # fmt: skip


@router.get("/governance/grants", response_model=list[GrantOut])
def governance_grants(
    principal: Annotated[Principal, Depends(require_read)],
    session: Annotated[Session, Depends(db_session)],
) -> list[dict[str, Any]]:
    """The grants in force: an admin sees every one, a team's token its models' and its own."""
    return [g.to_json() for g in service.grants(session, principal.teams)]


def _granting(
    request: Request, principal: Principal, body: GrantRequest, give: bool
) -> dict[str, Any]:
    db: Database = request.app.state.db
    by = f"admin of {principal.team}, token {principal.token_id}"
    act = service.grant if give else service.revoke
    with db.writing(), db.session() as session:
        try:
            g = act(session, body.model, body.team, by=by, default_team=principal.team)
        except GovernanceError as e:
            missing = "no model named" in str(e) or "holds no grant" in str(e)
            raise HTTPException(status_code=404 if missing else 422, detail=str(e)) from None
        session.commit()
    return g.to_json()


@router.post("/governance/grants", response_model=GrantOut)
def governance_grant(
    body: Annotated[GrantRequest, Body()],
    principal: Annotated[Principal, Depends(require_admin)],
    request: Request,
) -> dict[str, Any]:
    """Let ``team``'s runs name ``model`` (another team's) as their base model (admin)."""
    return _granting(request, principal, body, True)


@router.post("/governance/grants/revoke", response_model=GrantOut)
def governance_revoke(
    body: Annotated[GrantRequest, Body()],
    principal: Annotated[Principal, Depends(require_admin)],
    request: Request,
) -> dict[str, Any]:
    """Withdraw a grant (admin): runs stored before keep their lineage."""
    return _granting(request, principal, body, False)


@router.post("/accounts/{account}/check", response_model=CheckOut)
def account_check(
    account: str,
    request: Annotated[CheckRequest, Body()],
    principal: Annotated[Principal, Depends(require_admin)],
    session: Annotated[Session, Depends(db_session)],
) -> dict[str, Any]:
    """Whether ``account`` may start the job, and why (a scheduler's admission check)."""
    try:
        d = accounts.check(
            session, account, gpus=request.gpus, hours=request.hours,
            gpu_model=request.gpu_model, model=request.model, tiers=service.server_tiers(),
            count_simulated=service.count_simulated(),
        )  # fmt: skip
    except GovernanceError as e:
        raise HTTPException(status_code=422, detail=str(e)) from None
    return accounts.decision_json(d)


MAINTAIN_SECONDS = 300.0
"""How often a server prunes the ledger, re-judges the tiers and sends reminders."""
HEAD_SECONDS = 10.0
"""How often a server signs a new head at most (``[governance] head_interval``), when the log
grew: off the ingest path, so an ingest never waits for a signature."""
DEFAULT_RETENTION_YEARS = 10.0


def _config() -> Any:
    try:
        return load_config()
    except ConfigError:
        return None


def maintain_once(db: Database, now: float | None = None) -> None:
    """One round of governance upkeep (computewatch.governance.service.upkeep): pruning past
    the retention (``[governance] retention_years``, default 10), the tiers re-judged so that
    obligations open without anyone asking for the status, reminders due; then a head signed
    over what it appended."""
    now = time.time() if now is None else now
    config = _config()
    years = (config.governance_retention_years if config else None) or DEFAULT_RETENTION_YEARS
    cutoff = dt.datetime.fromtimestamp(now - years * 365.25 * 86_400, dt.UTC)
    # The replay of the log is cached per process: bring it up to date before the write
    # transaction, which then replays only what was appended since. A server's first upkeep
    # replays the whole log (11 s at 1,000,000 entries): inside the transaction, SQLite's write
    # lock was held all that time, past other processes' busy timeout.
    with db.session() as session:
        service.replay_log(session)
    for attempt in range(3):
        with db.writing(), db.session() as session:
            try:
                service.upkeep(session, service.server_tiers(), now, format_time(cutoff))
                reminders = due_reminders(session, now)
                session.commit()
            except IntegrityError:  # another server opened the same obligation first
                session.rollback()
                if attempt == 2:
                    raise
                continue
        break
    sign_heads_once(db, now)
    targets = () if config is None else tuple(config.server_budget_notify)
    if reminders and targets:
        _notifier(targets).send_events(reminder_events(reminders, now))


def sign_heads_once(db: Database, now: float | None = None) -> None:
    """Sign a head over the log when it grew since the last one (and publish it beside the
    key); the server creates its key the first time."""
    config = _config()
    path = key_path(None if config is None else config.governance_ledger_key)
    key = server_key(path, create=True)  # the server is the one that creates its key
    check_signer(db, key, path)  # a stray key (another home, a mistyped path) signs nothing
    sign_head(db, key, path, now=now)


def _key_file() -> Path:
    """The server's signing key file (``[governance] ledger_key`` or the default)."""
    try:
        config = load_config()
    except ConfigError:
        return key_path()
    return key_path(config.governance_ledger_key)


@functools.cache
def _notifier(specs: tuple[str, ...]) -> BudgetNotifier:
    """The server's alert delivery to ``[server] budget_notify`` (one per set of targets)."""
    return BudgetNotifier(parse_targets(specs))


async def maintain(db: Database) -> None:
    """:func:`maintain_once` every :data:`MAINTAIN_SECONDS` for the server's lifetime, and a
    head signed every ``[governance] head_interval`` seconds (default :data:`HEAD_SECONDS`)
    when the log grew."""
    said = ""
    last = -float("inf")
    settled = False
    while True:
        config = _config()
        interval = (config.governance_head_interval if config else None) or HEAD_SECONDS
        due = time.monotonic() - last >= MAINTAIN_SECONDS
        try:
            if due:
                last = time.monotonic()
                await asyncio.to_thread(maintain_once, db)
                if not settled:  # the log's replay is cached now, for the process's lifetime
                    heap.settle()
                    settled = True
            else:
                await asyncio.to_thread(sign_heads_once, db)
        except Exception as e:  # the database away, a bad key file: said once, tried next round
            message = str(e) or type(e).__name__
            if message != said:
                log.warning("ledger upkeep failed (no signed head until it is fixed): %s",
                            message)  # fmt: skip
            said = message
        else:
            if said:
                log.warning("ledger upkeep works again")
            said = ""
        await asyncio.sleep(min(interval, MAINTAIN_SECONDS))
