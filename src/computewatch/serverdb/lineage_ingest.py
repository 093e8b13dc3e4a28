"""What an ingest adds for governance, in the ingest's own transaction: the run's declared model
and compute by method (``model_runs``), and, when the upload is the run's final state, a ledger
entry with its totals, the node's signed usage report and what its check found. The ledger keeps
totals, methods, hashes and signatures, never the command line, names or configuration
(docs/governance.md, "Privacy")."""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy.orm import Session

from computewatch.ledger.reports import UNSIGNED, SignatureStatus, document_sha256
from computewatch.lineage.compute import Estimate, RunCompute, declaration_from_json, run_compute
from computewatch.serverdb.governance_models import ModelRun
from computewatch.serverdb.ledger_store import append, record_model_run
from computewatch.upload.protocol import RunUpload

RUN_KIND = "run"


def on_stored(
    session: Session, team: str, run: RunUpload, *, signature: SignatureStatus = UNSIGNED
) -> None:
    """Record ``run`` (just stored by the ingest) for governance; the caller commits.
    ``signature``: what the check of its signed report found."""
    summary = run["summary"]
    decl = declaration_from_json(run["meta"].get("governance"))
    rc: RunCompute | None = None
    if decl is not None and summary is not None:
        rc = run_compute(run["id"], summary, decl, status=run["status"],
                         started_at=run["started_at"])  # fmt: skip
        record_model_run(session, _row(team, rc))
    if run["final"]:
        append(session, RUN_KIND, run_entry(team, run, rc, signature))


def _fig(e: Estimate | None) -> dict[str, float] | None:
    return None if e is None else {"value": e.value, "low": e.low, "high": e.high}


def _row(team: str, rc: RunCompute) -> ModelRun:
    d, f = rc.declaration, rc.flops
    counted, hw, arch = f.get("counted"), f.get("hardware"), f.get("architecture")
    return ModelRun(
        run_id=rc.run_id, team=team, model=d.model, base_model=d.base_model, stage=d.stage,
        parameters=d.parameters, status=rc.status, started_at=rc.started_at,
        duration_seconds=rc.duration_seconds, gpu_hours=rc.gpu_hours, energy_kwh=rc.energy_kwh,
        counted=None if counted is None else counted.value,
        counted_low=None if counted is None else counted.low,
        counted_high=None if counted is None else counted.high,
        hardware=None if hw is None else hw.value,
        hardware_low=None if hw is None else hw.low,
        hardware_high=None if hw is None else hw.high,
        architecture=None if arch is None else arch.value,
        forecast_high=rc.forecast_high, devices=list(rc.hardware), updated_at=time.time(),
    )  # fmt: skip


def run_entry(
    team: str, run: RunUpload, rc: RunCompute | None, signature: SignatureStatus = UNSIGNED
) -> dict[str, Any]:
    """The ledger body of a finished run: totals, methods, the summary's SHA-256, and the
    node's signed usage report (null when unsigned) with ``signature``, what the server's
    check of it found."""
    body: dict[str, Any] = {
        "run_id": run["id"],
        "team": team,
        "status": run["status"],
        "seq": run["seq"],
        "started_at": run["started_at"],
        "ended_at": run["ended_at"],
        "summary_sha256": document_sha256(run["summary"]),
        "signature": signature,
        "signed_report": dict(run["signed_report"]) if "signed_report" in run else None,
    }
    if rc is not None:
        body.update(
            model=rc.declaration.model,
            base_model=rc.declaration.base_model,
            stage=rc.declaration.stage,
            gpu_hours=rc.gpu_hours,
            energy_kwh=rc.energy_kwh,
            duration_seconds=rc.duration_seconds,
            devices=list(rc.hardware),
            flops={m: _fig(e) for m, e in sorted(rc.flops.items())},
        )
    return body
