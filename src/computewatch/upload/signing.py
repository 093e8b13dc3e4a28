"""Signing what a machine uploads with its node key (``$COMPUTEWATCH_HOME/node-key.pem``).

:class:`ReportSigner` adds a ``signed_report`` (computewatch.ledger.reports) to each run upload:
its times, status and the hashes of its summary and documents, and its ``figures``
(:func:`report_figures`: the model it declared, every FLOP figure by method with its range,
GPU-hours, energy and devices), exactly what the server's ledger entry of the run will list.
The key is read, or created (mode 0600), on the first upload; when that fails, or the
``cryptography`` package is missing, every upload goes unsigned and :meth:`ReportSigner.notice`
says why once. Signing never raises into the caller: the monitor never takes the job down.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from computewatch.lineage.compute import (
    RunCompute,
    declaration_from_json,
    devices_json,
    run_compute,
)
from computewatch.paths import data_home
from computewatch.upload.protocol import RunUpload, SignedReport

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

__all__ = ["NODE_KEY_FILENAME", "ReportSigner", "figures_of", "node_key_path", "report_figures"]

NODE_KEY_FILENAME = "node-key.pem"


def figures_of(rc: RunCompute) -> dict[str, Any]:
    """A run's figures as its signed report and its ledger entry hold them
    (computewatch.ledger.reports.FIGURE_FIELDS)."""
    d = rc.declaration
    return {
        "model": d.model,
        "base_model": d.base_model,
        "stage": d.stage,
        "flops": {
            m: {"value": e.value, "low": e.low, "high": e.high} for m, e in sorted(rc.flops.items())
        },
        "gpu_hours": rc.gpu_hours,
        "energy_kwh": rc.energy_kwh,
        "duration_seconds": rc.duration_seconds,
        "devices": devices_json(rc.hardware),
    }


def run_compute_of(upload: RunUpload) -> RunCompute | None:
    """The run's compute, when its documents declare the model it trains (``meta.governance``)
    and it has a summary; None otherwise."""
    decl = declaration_from_json(upload["meta"].get("governance"))
    summary = upload["summary"]
    if decl is None or summary is None:
        return None
    return run_compute(upload["id"], summary, decl, status=upload["status"],
                       started_at=upload["started_at"])  # fmt: skip


EXACT: int = 2**53
"""Integers up to this every double, and so every JSON reader, holds exactly."""


def report_figures(upload: RunUpload) -> dict[str, Any] | None:
    """The ``figures`` a node signs for ``upload`` and the server recomputes from what arrived
    (None when the run declares no model). A counted FLOP figure the program reported as an
    integer beyond 2**53, which no JSON number carries exactly, is kept exact as a decimal
    string with its unit (``"12345678901234567891 FLOP"``)."""
    rc = run_compute_of(upload)
    if rc is None:
        return None
    figures = figures_of(rc)
    section = (upload["summary"] or {}).get("flops")
    counted = figures["flops"].get("counted")
    if isinstance(section, dict) and section.get("method") == "counted" and counted is not None:
        for k in ("value", "low", "high"):
            raw = section.get(k)
            if isinstance(raw, int) and not isinstance(raw, bool) and abs(raw) > EXACT:
                counted[k] = f"{raw} FLOP"
    return figures


def node_key_path() -> Path:
    """Where this home's node key lives: ``$COMPUTEWATCH_HOME/node-key.pem``."""
    return data_home() / NODE_KEY_FILENAME


class ReportSigner:
    """Signs uploads with the node key at ``path`` (default :func:`node_key_path`);
    ``enabled=False`` (``[server] sign = false``) signs nothing and says nothing."""

    def __init__(self, path: Path | None = None, *, enabled: bool = True) -> None:
        self.path = path
        self.enabled = enabled
        self.problem: str | None = None
        """Why uploads go unsigned (None while signing works)."""
        self._key: Ed25519PrivateKey | None = None
        self._told = False

    def _load(self) -> Ed25519PrivateKey | None:
        if self._key is not None or self.problem is not None:
            return self._key
        try:
            # the ledger's keys need cryptography, the optional `governance` extra
            from computewatch.ledger.keys import load_or_create_private_key
        except ImportError as e:
            self.problem = f"cannot sign: {e.name or 'cryptography'} is not installed"
            return None
        path = self.path if self.path is not None else node_key_path()
        try:
            self._key = load_or_create_private_key(path)
        except Exception as e:  # any failure means unsigned, never a failed job
            self.problem = str(e) or type(e).__name__
        return self._key

    def sign(self, upload: RunUpload) -> RunUpload:
        """``upload`` with its ``signed_report`` added (in place, and returned); unchanged when
        signing is off or fails."""
        if not self.enabled:
            return upload
        key = self._load()
        if key is None:
            return upload
        try:
            from computewatch.ledger.keys import sign_report  # loaded with the key above
            from computewatch.ledger.reports import report_of

            report = report_of(upload, report_figures(upload))
            signed: dict[str, Any] = sign_report(report, key)
        except Exception as e:  # a document canonical JSON cannot hold: unsigned
            self.problem = f"cannot sign run {upload['id']}: {e}"
            return upload
        upload["signed_report"] = cast(SignedReport, signed)
        return upload

    def notice(self) -> str | None:
        """Why uploads go unsigned, the first time it is asked after signing failed (then
        None)."""
        if self.problem is None or self._told:
            return None
        self._told = True
        return f"uploading unsigned ({self.problem}); see `computewatch node-key`"
