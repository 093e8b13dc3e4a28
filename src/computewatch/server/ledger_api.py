"""The ledger's endpoints under ``/api/v1/ledger`` (docs/ledger.md):

- ``GET /ledger/head`` (read): the newest signed tree head, with the witnesses' cosignatures;
- ``GET /ledger/proof/inclusion?seq=N[&size=M]`` (admin: the entry is in it): the audit path of
  entry ``N`` in the tree of the head at size ``M`` (default: the newest);
- ``GET /ledger/proof/consistency?old=M[&new=N]`` (read): the proof that the tree of ``M``
  entries is a prefix of the head at size ``N`` (default: the newest), with that head;
- ``POST /ledger/cosignatures`` (read): a witness's ``cosignature/v1`` of a head
  (``{"size", "cosignature", "public_key"}``), checked and kept;
- ``GET /ledger/export`` (admin): the log as JSON Lines, signed at its size first.

Reading a head or a proof writes nothing: heads are signed by the server's upkeep
(computewatch.server.governance_api), off the ingest path.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, HTTPException, Query
from fastapi.responses import StreamingResponse
from sqlalchemy.orm import Session

from computewatch.config import ConfigError, load_config
from computewatch.governance.ledger_ops import (
    export,
    head_doc,
    key_path,
    newest_head,
    prove_inclusion,
    server_key,
)
from computewatch.ledger.chain import LedgerError
from computewatch.server.auth import (
    Principal,
    db_session,
    get_database,
    require_admin,
    require_read,
)
from computewatch.serverdb.engine import Database
from computewatch.serverdb.ledger_store import add_cosignature, consistency, head_at, size

router = APIRouter(prefix="/api/v1/ledger", tags=["ledger"])


def _key_file() -> Path:
    """The server's signing key file (``[governance] ledger_key`` or the default)."""
    try:
        config = load_config()
    except ConfigError:
        return key_path()
    return key_path(config.governance_ledger_key)


def _no_head(e: LedgerError) -> HTTPException:
    return HTTPException(status_code=404, detail=str(e))


@router.get("/head")
def ledger_head(
    principal: Annotated[Principal, Depends(require_read)],
    session: Annotated[Session, Depends(db_session)],
) -> dict[str, Any]:
    """The newest signed head (a C2SP checkpoint note in ``checkpoint``)."""
    try:
        return head_doc(newest_head(session))
    except LedgerError as e:
        raise _no_head(e) from None


@router.get("/proof/inclusion")
def inclusion_proof(
    principal: Annotated[Principal, Depends(require_admin)],
    session: Annotated[Session, Depends(db_session)],
    seq: Annotated[int, Query(ge=1)],
    size_: Annotated[int | None, Query(alias="size", ge=0)] = None,
) -> dict[str, Any]:
    try:
        head = None
        if size_ is not None:
            held = head_at(session, size_)
            if held is None:
                raise HTTPException(status_code=404, detail=f"no signed head at size {size_}")
            head = held.checkpoint()
        return prove_inclusion(session, seq, head)
    except LedgerError as e:
        raise HTTPException(
            status_code=404 if "no head" in str(e) else 422, detail=str(e)
        ) from None


@router.get("/proof/consistency")
def consistency_proof(
    principal: Annotated[Principal, Depends(require_read)],
    session: Annotated[Session, Depends(db_session)],
    old: Annotated[int, Query(ge=0)],
    new: Annotated[int | None, Query(ge=0)] = None,
) -> dict[str, Any]:
    """The proof from size ``old`` to the head at ``new`` (default: the newest), with that head:
    the caller holds the old head."""
    try:
        head = newest_head(session) if new is None else head_at(session, new)
    except LedgerError as e:
        raise _no_head(e) from None
    if head is None:
        raise HTTPException(status_code=404, detail=f"no signed head at size {new}")
    if old > head.size:
        raise HTTPException(status_code=422, detail=f"size {old} is beyond the head's {head.size}")
    proof = consistency(session, old, head.size)
    return {
        "old_size": old,
        "size": head.size,
        "proof": [h.hex() for h in proof],
        "checkpoint": head.text(),
        "log_size": size(session),
    }


@router.post("/cosignatures")
def post_cosignature(
    principal: Annotated[Principal, Depends(require_read)],
    db: Annotated[Database, Depends(get_database)],
    size_: Annotated[int, Body(alias="size", ge=0)],
    cosignature: Annotated[str, Body(min_length=1, max_length=1000)],
    public_key: Annotated[str, Body(min_length=1, max_length=200)],
) -> dict[str, Any]:
    """Keep a witness's cosignature of the head at ``size`` (refused when it does not verify)."""
    with db.writing(), db.session() as session:
        try:
            stored = add_cosignature(session, size_, cosignature, public_key)
        except LedgerError as e:
            raise HTTPException(status_code=422, detail=str(e)) from None
        session.commit()
    return {"size": size_, "stored": stored}


@router.get("/export")
def ledger_export(
    principal: Annotated[Principal, Depends(require_admin)],
    db: Annotated[Database, Depends(get_database)],
) -> StreamingResponse:
    path = _key_file()
    lines = export(db, server_key(path, create=True), path)  # streamed from one read
    return StreamingResponse(lines, media_type="application/x-ndjson")
