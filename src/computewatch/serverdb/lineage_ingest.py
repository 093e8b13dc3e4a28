"""What an ingest records for governance, in the ingest's own transaction (repository work; the
governance service, computewatch.governance.service, judges tiers on top): the run's declared
model and compute by method (``model_runs``, the live view: running runs and their forecasts;
models named ``team/name``, a bare name qualified with the run's team),
and, when the upload is the run's final state, a ledger entry with its figures, the node's
signed usage report and what its check found. The ledger keeps totals, methods, hashes and
signatures, never the command line, names or configuration (docs/governance.md, "Privacy")."""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy.orm import Session

from computewatch.ledger.reports import FIGURES, UNSIGNED, SignatureStatus, document_sha256
from computewatch.lineage.compute import RunCompute, qualify
from computewatch.serverdb.governance_models import ModelRun
from computewatch.serverdb.ledger_store import append, record_model_run
from computewatch.upload.protocol import RunUpload
from computewatch.upload.signing import report_figures, run_compute_of

RUN_KIND = "run"


def on_stored(
    session: Session, team: str, run: RunUpload, *, signature: SignatureStatus = UNSIGNED
) -> RunCompute | None:
    """Record ``run`` (just stored by the ingest) for governance; the caller commits.
    ``signature``: what the check of its signed report found. Returns the run's compute (None
    when it declares no model)."""
    rc = run_compute_of(run)
    if rc is not None:
        record_model_run(session, _row(team, rc))
    if run["final"]:
        append(session, RUN_KIND, run_entry(team, run, rc, signature))
    return rc


def _row(team: str, rc: RunCompute) -> ModelRun:
    d, f = rc.declaration, rc.flops
    counted, hw, arch = f.get("counted"), f.get("hardware"), f.get("architecture")
    return ModelRun(
        run_id=rc.run_id, team=team, model=qualify(team, d.model),
        base_model=None if d.base_model is None else qualify(team, d.base_model), stage=d.stage,
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
    """The ledger body of a finished run: its times, status, the summary's SHA-256, its
    ``figures`` (computewatch.ledger.reports.FIGURE_FIELDS: model, stage, FLOP by method with
    ranges, GPU-hours, energy, devices; null when it declared no model), and the node's signed
    usage report (null when unsigned) with ``signature``, what the server's check of it found.
    A report of the second format signed these very figures."""
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
        FIGURES: None if rc is None else report_figures(run),
    }
    if rc is not None and rc.simulated:
        body["simulated"] = True  # its devices were simulated or replayed (the summary says)
    return body
