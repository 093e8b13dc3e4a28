"""The registry of node keys and the check of signed usage reports at ingest.

An operator runs ``computewatch node-key`` on a node and gives its public key to the server's
admin, who registers it for a team (``computewatch server node-key add KEY --team T --name N``).
Registering and revoking append ``node_key`` ledger entries in the same transaction, so the
chain itself carries every key an auditor needs to check the reports it holds.

At ingest (:func:`check_upload`, in the ingest's transaction) each run's ``signed_report`` is
checked: it must bind what arrived (run id, seq, status, times, the SHA-256 of the summary and
documents, and the run's figures as the server computes them from those) and carry a valid
Ed25519 signature by a registered, unrevoked key of the uploading team. Outcomes: ``valid``,
``unsigned``, ``unknown_key`` and ``invalid`` (computewatch.ledger.reports); an invalid report
is refused (:class:`SignatureRefused`, 422), and a server started with ``--require-signed``
also refuses unsigned and unknown-key uploads.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, cast

from sqlalchemy import Table, bindparam, insert, select, update
from sqlalchemy.dialects import postgresql
from sqlalchemy.orm import Session

from computewatch.errors import UsageError
from computewatch.ledger.chain import LedgerError
from computewatch.ledger.keys import decode_public, encode_public, key_id, report_valid
from computewatch.ledger.reports import (
    FIGURES,
    INVALID,
    UNKNOWN_KEY,
    UNSIGNED,
    VALID,
    SignatureStatus,
    binding_problem,
    report_of,
)
from computewatch.serverdb import prepared
from computewatch.serverdb.errors import InvalidUpload, ServerDbError
from computewatch.serverdb.ledger_store import append
from computewatch.serverdb.models import NodeKey, RunSignature
from computewatch.serverdb.tokens import validate_team
from computewatch.upload.protocol import RunUpload
from computewatch.upload.signing import report_figures

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

__all__ = [
    "NODE_KEY_KIND",
    "NodeKeyInfo",
    "SignatureCheck",
    "SignatureRefused",
    "add_node_key",
    "check_upload",
    "list_node_keys",
    "record_signature",
    "refusal",
    "revoke_node_key",
    "run_signature",
]

NODE_KEY_KIND: Final = "node_key"
"""Ledger entries that register (``action: register``) or revoke (``action: revoke``) a key."""

REGISTER_HINT: Final = (
    "run `computewatch node-key` on the node and have an admin register its public key with "
    "`computewatch server node-key add PUBLIC_KEY --team TEAM --name NAME`"
)


class SignatureRefused(InvalidUpload):
    """An upload refused for its signed report (answered 422, nothing of the batch stored)."""


@dataclass(frozen=True, slots=True)
class NodeKeyInfo:
    key_id: str
    public_key: str
    team: str
    name: str
    registered_at: float
    revoked_at: float | None

    def as_dict(self) -> dict[str, object]:
        return {
            "key_id": self.key_id,
            "public_key": self.public_key,
            "team": self.team,
            "name": self.name,
            "registered_at": self.registered_at,
            "revoked_at": self.revoked_at,
        }


@dataclass(frozen=True, slots=True)
class SignatureCheck:
    """What the check of one upload found: ``status``, the signing key's id (None when
    unsigned) and, for ``invalid`` and ``unknown_key``, why."""

    status: SignatureStatus
    key_id: str | None = None
    why: str | None = None


def _info(row: NodeKey) -> NodeKeyInfo:
    return NodeKeyInfo(
        row.key_id, row.public_key, row.team, row.name, row.registered_at, row.revoked_at
    )


def add_node_key(session: Session, public_key: str, *, team: str, name: str) -> NodeKeyInfo:
    """Register ``public_key`` (base64 of 32 bytes, or a PEM block) for ``team`` and append its
    ``node_key`` ledger entry. Commits. :class:`UsageError` for a bad key or name, or a key
    registered already (a revoked key stays revoked: make a new one)."""
    validate_team(team)
    if not name.strip() or len(name) > 200:
        raise UsageError("--name: 1 to 200 characters (the node or client the key is for)")
    try:
        key = decode_public(public_key)
    except LedgerError as e:
        raise UsageError(f"PUBLIC_KEY: {e}") from None
    kid = key_id(key)
    held = session.get(NodeKey, kid)
    if held is not None:
        state = "revoked" if held.revoked_at is not None else "registered"
        raise UsageError(
            f"node key {kid} is {state} already (team {held.team}, {held.name!r})"
            + ("; a revoked key stays revoked: make a new one" if held.revoked_at else "")
        )
    now = time.time()
    row = NodeKey(
        key_id=kid,
        public_key=encode_public(key),
        team=team,
        name=name,
        registered_at=now,
        revoked_at=None,
    )
    session.add(row)
    append(session, NODE_KEY_KIND, {"action": "register", **_info(row).as_dict()})
    session.commit()
    return _info(row)


def list_node_keys(session: Session, *, team: str | None = None) -> list[NodeKeyInfo]:
    q = select(NodeKey).order_by(NodeKey.registered_at, NodeKey.key_id)
    if team is not None:
        q = q.where(NodeKey.team == team)
    return [_info(r) for r in session.scalars(q)]


def revoke_node_key(session: Session, kid: str) -> NodeKeyInfo:
    """Revoke key ``kid`` and append its ``node_key`` ledger entry (revoking twice keeps the
    first time and appends nothing). Commits. :class:`ServerDbError` when there is none."""
    row = session.get(NodeKey, kid.strip().lower())
    if row is None:
        raise ServerDbError(f"no node key {kid!r} (see 'server node-key list')")
    if row.revoked_at is None:
        row.revoked_at = time.time()
        append(session, NODE_KEY_KIND, {"action": "revoke", **_info(row).as_dict()})
        session.commit()
    return _info(row)


_NODE_KEYS = cast(Table, NodeKey.__table__)
# made once with a bound parameter (computewatch.serverdb.ingest says why); read at every
# upload, so a key revoked by another process counts from its next upload on
_KEY_BY_ID = select(_NODE_KEYS.c.team, _NODE_KEYS.c.revoked_at, _NODE_KEYS.c.public_key).where(
    _NODE_KEYS.c.key_id == bindparam("b_key_id")
)


@functools.lru_cache(maxsize=1024)
def _public_key(text: str) -> Ed25519PublicKey:
    """A registered key's object, decoded once per process (a key's text never changes)."""
    return decode_public(text)


def check_upload(session: Session, team: str, run: RunUpload) -> SignatureCheck:
    """Check ``run``'s signed report against what arrived and the keys registered for
    ``team`` (in the caller's transaction; reads only)."""
    report = run.get("signed_report")
    if report is None:
        return SignatureCheck(UNSIGNED)
    doc: Mapping[str, Any] = report
    kid = str(doc.get("signed_by"))
    problem = binding_problem(doc, report_of(run, report_figures(run), with_figures=FIGURES in doc))
    if problem is not None:
        return SignatureCheck(INVALID, kid, f"the upload does not match its signed report: "
                              f"{problem}")  # fmt: skip
    row = prepared.first(session.connection(), _KEY_BY_ID, {"b_key_id": kid})
    if row is None:
        return SignatureCheck(UNKNOWN_KEY, kid, f"key {kid} is not registered")
    key_team, revoked_at, public_key = row
    if key_team != team:
        return SignatureCheck(UNKNOWN_KEY, kid, f"key {kid} is registered for another team")
    if revoked_at is not None:
        return SignatureCheck(UNKNOWN_KEY, kid, f"key {kid} was revoked")
    try:
        key = _public_key(public_key)
    except LedgerError:  # the registry holds only keys that decoded when added
        return SignatureCheck(UNKNOWN_KEY, kid, f"key {kid} cannot be read")
    if not report_valid(doc, key):
        return SignatureCheck(INVALID, kid, f"the signature by key {kid} does not match the "
                              "report (changed after signing)")  # fmt: skip
    return SignatureCheck(VALID, kid)


def refusal(run_id: str, check: SignatureCheck, *, require_signed: bool) -> str | None:
    """Why the upload of ``run_id`` is refused (None: it is stored)."""
    if check.status == INVALID:
        return f"run {run_id}: signed report invalid: {check.why}"
    if require_signed and check.status == UNSIGNED:
        return (
            f"run {run_id}: this server requires signed usage reports and the upload is "
            f"unsigned: {REGISTER_HINT}"
        )
    if require_signed and check.status == UNKNOWN_KEY:
        return (
            f"run {run_id}: this server requires signed usage reports from registered nodes "
            f"({check.why}): {REGISTER_HINT}"
        )
    return None


_SIGNATURES = cast(Table, RunSignature.__table__)
_UPDATE_SIGNATURE = update(_SIGNATURES).where(_SIGNATURES.c.run_id == bindparam("b_run_id"))
_INSERT_SIGNATURE = insert(_SIGNATURES)
_PG_INSERT_SIGNATURE = postgresql.insert(_SIGNATURES)
_UPSERT_SIGNATURE = _PG_INSERT_SIGNATURE.on_conflict_do_update(
    index_elements=[_SIGNATURES.c.run_id],
    set_={c: _PG_INSERT_SIGNATURE.excluded[c] for c in ("status", "key_id", "checked_at")},
)
"""On PostgreSQL one statement that needs no answer (it may be sent in a pipeline)."""


def record_signature(session: Session, run_id: str, check: SignatureCheck) -> None:
    """Keep the outcome for the run's latest stored upload (the caller commits), with no
    object loaded (this runs once per stored upload): on PostgreSQL one upsert, which needs no
    answer (it may be sent in a pipeline: computewatch.serverdb.prepared.pipelined); on SQLite
    an update, then an insert when it changed no row."""
    now = time.time()
    conn = session.connection()
    values = {"status": check.status, "key_id": check.key_id, "checked_at": now}
    if conn.dialect.name == "postgresql":
        prepared.execute(conn, _UPSERT_SIGNATURE, {"run_id": run_id, **values})
    elif prepared.execute(conn, _UPDATE_SIGNATURE, {"b_run_id": run_id, **values}) == 0:
        prepared.execute(conn, _INSERT_SIGNATURE, {"run_id": run_id, **values})


def run_signature(session: Session, run_id: str) -> SignatureCheck:
    """The outcome kept for ``run_id`` (``unsigned`` for a run stored before the check
    existed)."""
    row = session.get(RunSignature, run_id)
    if row is None:
        return SignatureCheck(UNSIGNED)
    kept: dict[str, SignatureStatus] = {VALID: VALID, UNKNOWN_KEY: UNKNOWN_KEY}
    return SignatureCheck(kept.get(row.status, UNSIGNED), row.key_id)
