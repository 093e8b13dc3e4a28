"""Goodput on the server: a model's (or a job's) runs as one training, from the summaries they
uploaded (``diagnosis.goodput``, stored at each run's end), served as
``GET /api/v1/goodput?model=M`` (or ``job=KEY``) and shown on the usage page and run pages."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException
from fastapi.responses import JSONResponse
from sqlalchemy.orm import Session

from computewatch.goodput.json import GoodputJson, report_json
from computewatch.goodput.model import RunTime, goodput, run_time_from_json
from computewatch.jsonout import finite
from computewatch.lineage.compute import qualify
from computewatch.server.auth import Principal, db_session, require_read
from computewatch.serverdb.queries import LineageRun, lineage_runs

__all__ = ["router", "server_goodput"]

router = APIRouter(prefix="/api/v1", tags=["goodput"])


def _run_time(r: LineageRun) -> RunTime:
    """The run's record as it uploaded it, with the server's own figures for its end, GPUs,
    energy and cost; a run whose upload has none counts as time without steps."""
    ended = r.ended_at
    if ended is None:
        ended = r.started_at + (r.duration_seconds or 0.0)
    stored = run_time_from_json(r.goodput) if r.goodput is not None else None
    base = stored or RunTime(r.run_id, r.name, r.status, r.started_at, ended)
    return RunTime(
        r.run_id, r.name, r.status, r.started_at, max(ended, base.ended_at if stored else ended),
        r.gpu_count, r.kwh, r.cost_usd, base.initialization_seconds, base.step_seconds,
        base.data_wait_seconds, base.checkpoint_seconds, base.checkpoints, base.steps,
        base.start_step, base.last_step, base.last_checkpoint_step, base.progress,
    )  # fmt: skip


def server_goodput(
    session: Session,
    teams: frozenset[str] | None,
    *,
    model: str | None = None,
    job: str | None = None,
) -> GoodputJson:
    """The goodput of the runs the caller may see of ``model`` (or ``job``)."""
    runs = lineage_runs(session, teams, model=model, job=job)
    key = f"model {model}" if model is not None else f"job {job}"
    return report_json(goodput(key, [_run_time(r) for r in runs]))


@router.get("/goodput", summary="A model's or a job's goodput across its runs")
def goodput_route(
    principal: Annotated[Principal, Depends(require_read)],
    session: Annotated[Session, Depends(db_session)],
    model: str | None = None,
    job: str | None = None,
) -> Any:
    if (model is None) == (job is None):
        raise HTTPException(400, "give model=NAME or job=KEY")
    if model is not None:
        model = qualify(principal.team, model)  # a bare name: the caller's team's model
    result = server_goodput(session, principal.teams, model=model, job=job)
    return JSONResponse(finite(result))
