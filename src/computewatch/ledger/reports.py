"""Signed usage reports: what a node signs about a run it uploads, and how a reader checks that
the report binds the numbers that travelled with it.

A report is a small JSON object (:data:`REPORT_FIELDS`): the run's id, upload ``seq``, whether
it is final, its status and exit code, start and end, the SHA-256 (hex) of the canonical JSON
(:func:`computewatch.ledger.chain.canonical`) of exactly the ``summary`` and the ``meta`` sent in
the same upload, and (second format, :data:`FIGURES`) the run's ``figures``: the model, base
model and stage it declared, every FLOP figure by method with its range, GPU-hours, energy,
duration and devices (model and count), exactly what the run's ledger entry lists
(:data:`FIGURE_FIELDS`; null when the run declared no model). The node signs it with its Ed25519
key (:func:`computewatch.ledger.keys.sign_report`, which adds ``signed_by`` and ``signature``).
It holds hashes, times and totals only: no host name, command line or configuration
(docs/governance.md, "Privacy"), so the ledger can keep it whole.

Outcomes of a check (the server records one per stored run; docs/server.md): :data:`VALID`,
:data:`UNSIGNED`, :data:`UNKNOWN_KEY` (a well-formed report whose key the server does not hold
registered, unrevoked, for the uploading team) and :data:`INVALID` (changed after signing, or a
hash that does not match what arrived).
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Mapping
from typing import Any, Final, Literal

from computewatch.ledger.chain import canonical

__all__ = [
    "FIGURES",
    "FIGURE_FIELDS",
    "INVALID",
    "REPORT_FIELDS",
    "SIGNATURE_STATUSES",
    "SIGNED_FIELDS",
    "UNKNOWN_KEY",
    "UNSIGNED",
    "VALID",
    "SignatureStatus",
    "binding_problem",
    "document_sha256",
    "figures_problem",
    "report_of",
    "shape_problem",
    "usage_report",
]

SignatureStatus = Literal["valid", "unsigned", "unknown_key", "invalid"]
VALID: Final = "valid"
UNSIGNED: Final = "unsigned"
UNKNOWN_KEY: Final = "unknown_key"
INVALID: Final = "invalid"
SIGNATURE_STATUSES: Final[tuple[SignatureStatus, ...]] = (VALID, UNSIGNED, UNKNOWN_KEY, INVALID)

REPORT_FIELDS: Final = (
    "run_id",
    "seq",
    "final",
    "status",
    "exit_code",
    "started_at",
    "ended_at",
    "summary_sha256",
    "meta_sha256",
)
"""What a node signs, besides ``signed_by`` (its key id)."""
SIGNED_FIELDS: Final = (*REPORT_FIELDS, "signed_by", "signature")
"""Every field of a signed report of the first format, as it travels and as the ledger keeps
it."""
FIGURES: Final = "figures"
"""The second format's extra field: the run's figures (or null), signed with the rest over the
RFC 8785 canonical JSON (computewatch.ledger.keys.sign_report)."""
FIGURE_FIELDS: Final = (
    "model", "base_model", "stage", "flops", "gpu_hours", "energy_kwh", "duration_seconds",
    "devices",
)  # fmt: skip
"""The members of ``figures``: ``flops`` maps a method (``counted``, ``hardware``,
``architecture``) to ``{"value", "low", "high"}``; ``devices`` lists ``{"model", "count"}``."""

_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_KEY_ID = re.compile(r"^[0-9a-f]{16}$")
_BASE64 = re.compile(r"^[A-Za-z0-9+/]{1,200}={0,2}$")


def document_sha256(doc: object) -> str:
    """SHA-256 (hex) of the canonical JSON of ``doc`` (``null`` for None)."""
    return hashlib.sha256(canonical(doc)).hexdigest()


def usage_report(
    *,
    run_id: str,
    seq: int,
    final: bool,
    status: str,
    exit_code: int | None,
    started_at: float,
    ended_at: float | None,
    summary: object,
    meta: object,
    figures: object = None,
    with_figures: bool = True,
) -> dict[str, Any]:
    """The unsigned report of one upload (``summary`` and ``meta`` exactly as they travel); with
    ``figures`` (the second format) unless ``with_figures`` is false (the first)."""
    report = {
        "run_id": run_id,
        "seq": seq,
        "final": final,
        "status": status,
        "exit_code": exit_code,
        "started_at": started_at,
        "ended_at": ended_at,
        "summary_sha256": document_sha256(summary),
        "meta_sha256": document_sha256(meta),
    }
    if with_figures:
        report[FIGURES] = figures
    return report


def _number(v: object) -> bool:
    if not isinstance(v, int | float) or isinstance(v, bool):
        return False
    try:
        return math.isfinite(v) and abs(v) < 1e300
    except OverflowError:  # an int too large for a float
        return False


_EXACT_FLOP = re.compile(r"^-?[0-9]{16,} FLOP$")
"""A FLOP count JSON cannot carry exactly (an integer beyond 2**53), as a decimal string."""


def _figure(v: object) -> bool:
    return (
        isinstance(v, Mapping)
        and set(v) == {"value", "low", "high"}
        and all(
            _number(v[k]) or (isinstance(v[k], str) and bool(_EXACT_FLOP.match(v[k])))
            for k in ("value", "low", "high")
        )
    )


def figures_problem(figures: object) -> str | None:
    """Why ``figures`` is not a run's figures (None when it is, or when it is null)."""
    if figures is None:
        return None
    if not isinstance(figures, Mapping):
        return "figures: expected an object or null"
    if set(figures) != set(FIGURE_FIELDS):
        odd = sorted(set(figures) ^ set(FIGURE_FIELDS))
        return f"figures: unexpected or missing {odd[0]!r}"
    f = figures
    devices = f["devices"]
    flops = f["flops"]
    checks: list[tuple[str, bool]] = [
        ("model", isinstance(f["model"], str) and 0 < len(f["model"]) <= 200),
        ("base_model", f["base_model"] is None
         or (isinstance(f["base_model"], str) and len(f["base_model"]) <= 200)),
        ("stage", isinstance(f["stage"], str) and len(f["stage"]) <= 32),
        ("flops", isinstance(flops, Mapping) and len(flops) <= 8
         and all(isinstance(k, str) and _figure(v) for k, v in flops.items())),
        ("gpu_hours", _number(f["gpu_hours"])),
        ("energy_kwh", f["energy_kwh"] is None or _number(f["energy_kwh"])),
        ("duration_seconds", _number(f["duration_seconds"])),
        ("devices", isinstance(devices, list) and len(devices) <= 64 and all(
            isinstance(d, Mapping) and set(d) == {"model", "count"}
            and isinstance(d["model"], str) and len(d["model"]) <= 200
            and isinstance(d["count"], int) and not isinstance(d["count"], bool)
            and d["count"] >= 0 for d in devices)),
    ]  # fmt: skip
    for name, ok in checks:
        if not ok:
            return f"figures.{name}: not a valid value"
    return None


def shape_problem(report: object) -> str | None:
    """Why ``report`` is not a well-formed signed report (None when it is): exactly the
    fields of :data:`SIGNED_FIELDS` (and, in the second format, ``figures``), each of its
    type."""
    if not isinstance(report, Mapping):
        return "expected an object"
    allowed = {*SIGNED_FIELDS, FIGURES}
    extra = sorted(set(report) - allowed)
    if extra:
        return f"unexpected field {extra[0]!r}"
    missing = [k for k in SIGNED_FIELDS if k not in report]
    if missing:
        return f"missing {missing[0]!r}"
    r = report
    checks: list[tuple[str, bool]] = [
        ("run_id", isinstance(r["run_id"], str) and 0 < len(r["run_id"]) <= 64),
        ("seq", isinstance(r["seq"], int) and not isinstance(r["seq"], bool) and r["seq"] >= 1),
        ("final", isinstance(r["final"], bool)),
        ("status", isinstance(r["status"], str) and len(r["status"]) <= 32),
        (
            "exit_code",
            r["exit_code"] is None
            or (isinstance(r["exit_code"], int) and not isinstance(r["exit_code"], bool)),
        ),
        ("started_at", _number(r["started_at"])),
        ("ended_at", r["ended_at"] is None or _number(r["ended_at"])),
        (
            "summary_sha256",
            isinstance(r["summary_sha256"], str) and bool(_HEX64.match(r["summary_sha256"])),
        ),
        ("meta_sha256", isinstance(r["meta_sha256"], str) and bool(_HEX64.match(r["meta_sha256"]))),
        ("signed_by", isinstance(r["signed_by"], str) and bool(_KEY_ID.match(r["signed_by"]))),
        ("signature", isinstance(r["signature"], str) and bool(_BASE64.match(r["signature"]))),
    ]
    for name, ok in checks:
        if not ok:
            return f"{name}: not a valid value"
    if FIGURES in r:
        return figures_problem(r[FIGURES])
    return None


def report_of(
    upload: Mapping[str, Any], figures: object = None, *, with_figures: bool = True
) -> dict[str, Any]:
    """:func:`usage_report` of an upload document (a ``RunUpload``: ``id``, ``seq``, ``final``,
    ``status``, ``exit_code``, ``started_at``, ``ended_at``, ``summary``, ``meta``) with the
    run's ``figures`` (computewatch.upload.signing.report_figures), as the client signs it and
    the server recomputes it from what arrived."""
    return usage_report(
        run_id=upload["id"],
        seq=upload["seq"],
        final=upload["final"],
        status=upload["status"],
        exit_code=upload["exit_code"],
        started_at=upload["started_at"],
        ended_at=upload["ended_at"],
        summary=upload["summary"],
        meta=upload["meta"],
        figures=figures,
        with_figures=with_figures,
    )


_DIFFERS = {
    "summary_sha256": "its summary differs from the one signed (summary_sha256)",
    "meta_sha256": "its documents (meta) differ from those signed (meta_sha256)",
    FIGURES: "the figures it signed (model, stage, FLOP, GPU-hours, energy, devices) differ "
    "from those its summary and declaration give",
}


def binding_problem(report: Mapping[str, Any], expected: Mapping[str, Any]) -> str | None:
    """What of the upload differs from what ``report`` says was signed (None: it matches).
    ``expected``: :func:`report_of` the upload as received (hashes recomputed from it)."""
    for k, v in expected.items():
        got = report.get(k)
        if got != v or (isinstance(v, bool) != isinstance(got, bool)):
            return _DIFFERS.get(k, f"its {k} differs from the signed report's")
    return None
