"""Signed usage reports: what a node signs about a run it uploads, and how a reader checks that
the report binds the numbers that travelled with it.

A report is a small JSON object (:data:`REPORT_FIELDS`): the run's id, upload ``seq``, whether
it is final, its status and exit code, start and end, and the SHA-256 (hex) of the canonical
JSON (:func:`computewatch.ledger.chain.canonical`) of exactly the ``summary`` and the ``meta``
sent in the same upload. The node signs it with its Ed25519 key
(:func:`computewatch.ledger.keys.sign_report`, which adds ``signed_by`` and ``signature``). It
holds hashes and times only: no host name, command line or configuration (docs/governance.md,
"Privacy"), so the ledger can keep it whole.

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
"""Every field of a signed report, as it travels and as the ledger keeps it."""

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
) -> dict[str, Any]:
    """The unsigned report of one upload (``summary`` and ``meta`` exactly as they travel)."""
    return {
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


def _number(v: object) -> bool:
    if not isinstance(v, int | float) or isinstance(v, bool):
        return False
    try:
        return math.isfinite(v) and abs(v) < 1e300
    except OverflowError:  # an int too large for a float
        return False


def shape_problem(report: object) -> str | None:
    """Why ``report`` is not a well-formed signed report (None when it is): exactly the
    fields of :data:`SIGNED_FIELDS`, each of its type."""
    if not isinstance(report, Mapping):
        return "expected an object"
    extra = sorted(set(report) - set(SIGNED_FIELDS))
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
    return None


def report_of(upload: Mapping[str, Any]) -> dict[str, Any]:
    """:func:`usage_report` of an upload document (a ``RunUpload``: ``id``, ``seq``, ``final``,
    ``status``, ``exit_code``, ``started_at``, ``ended_at``, ``summary``, ``meta``), as the
    client signs it and the server recomputes it from what arrived."""
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
    )


_DIFFERS = {
    "summary_sha256": "its summary differs from the one signed (summary_sha256)",
    "meta_sha256": "its documents (meta) differ from those signed (meta_sha256)",
}


def binding_problem(report: Mapping[str, Any], expected: Mapping[str, Any]) -> str | None:
    """What of the upload differs from what ``report`` says was signed (None: it matches).
    ``expected``: :func:`report_of` the upload as received (hashes recomputed from it)."""
    for k, v in expected.items():
        got = report.get(k)
        if got != v or (isinstance(v, bool) != isinstance(got, bool)):
            return _DIFFERS.get(k, f"its {k} differs from the signed report's")
    return None
