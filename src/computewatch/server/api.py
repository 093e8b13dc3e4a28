"""The REST API under ``/api/v1`` (docs/server.md lists every field; the OpenAPI description
is served at ``/api/v1/openapi.json``).

``POST /runs`` ingests an upload batch (computewatch.upload.protocol); ``GET /runs`` lists runs
with filters, sorts and cursor pages; ``GET /runs/{id}`` is one run in full; ``GET /usage`` sums
usage by team, user, project or GPU model; ``GET /running`` lists runs in progress; ``GET /me``
says who the token is; ``GET /events`` streams run changes (Server-Sent Events).
"""

from __future__ import annotations

import asyncio
import datetime
import functools
import logging
import re
import time
import zlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Final, TypedDict

from fastapi import APIRouter, Depends, FastAPI, HTTPException, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, StreamingResponse
from sqlalchemy.exc import DataError, IntegrityError
from sqlalchemy.orm import Session

from computewatch.errors import ComputewatchError
from computewatch.governance import service as governance_service
from computewatch.jsonout import dumps as json_dumps
from computewatch.jsonout import finite
from computewatch.lineage.compute import DeclarationRefused
from computewatch.server.admission import DEFAULT_MAX_QUEUED_UPLOADS, Admission, GroupWriter
from computewatch.server.auth import (
    Principal,
    db_session,
    get_database,
    require_ingest,
    require_read,
)
from computewatch.server.events import EventHub
from computewatch.serverdb.changes import Change, changes_after
from computewatch.serverdb.engine import Database, is_locked
from computewatch.serverdb.errors import IngestConflict, InvalidUpload
from computewatch.serverdb.ingest import (
    REFUSALS,
    Outcome,
    Upload,
    parse_batch,
    protocol_mismatch,
    store_batch,
    store_group,
)
from computewatch.serverdb.node_keys import SignatureRefused, run_signature
from computewatch.serverdb.queries import (
    MAX_LIMIT,
    BadQuery,
    RunFilter,
    RunPage,
    RunRow,
    SeriesRow,
    UsageRow,
    get_run,
    list_runs,
    running_now,
    usage,
)
from computewatch.upload.protocol import (
    FEATURE_SERIES_BASE,
    MAX_BODY_BYTES,
    PROTOCOL_HEADER,
    PROTOCOL_VERSION,
    IngestBatch,
    IngestResponse,
)
from computewatch.upload.schema import batch_json_schema

__all__ = ["HEARTBEAT_SECONDS", "api_error", "parse_time", "router"]

log = logging.getLogger("computewatch.server")
router = APIRouter(prefix="/api/v1")

HEARTBEAT_SECONDS: Final = 15.0
INGEST_RETRIES: Final = 3


def api_error(status: int, code: str, detail: str, **extra: Any) -> JSONResponse:
    """The API's error document: ``{"error": CODE, "detail": MESSAGE, ...}``."""
    return JSONResponse({"error": code, "detail": detail, **extra}, status_code=status)


_RELATIVE = re.compile(r"^(\d+(?:\.\d+)?)([smhdw])$")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_time(text: str | None, name: str) -> float | None:
    """A time parameter: Unix seconds, ISO 8601 (``2026-11-01``, ``2026-11-01T12:00:00Z``; UTC
    when no offset) or an age (``30d``, ``12h``, ``2w``: that long before now)."""
    if text is None or text == "":
        return None
    t = text.strip()
    m = _RELATIVE.match(t)
    if m:
        return time.time() - float(m.group(1)) * _UNIT[m.group(2)]
    try:
        v = float(t)
    except ValueError:
        pass
    else:
        if not 0 <= v < 1e11:
            raise HTTPException(400, f"{name}: not a plausible Unix time")
        return v
    try:
        d = datetime.datetime.fromisoformat(t.replace("Z", "+00:00"))
    except ValueError:
        raise HTTPException(
            400, f"{name}: expected Unix seconds, an ISO 8601 date or time, or an age like 30d"
        ) from None
    if d.tzinfo is None:
        d = d.replace(tzinfo=datetime.UTC)
    return d.timestamp()


# -- ingest ----------------------------------------------------------------------------------------

_INGEST_SCHEMA: Final[dict[str, Any]] = batch_json_schema()
"""The body of ``POST /runs`` as the protocol's models say it (computewatch.upload.schema), for
the OpenAPI description: the body is read by hand (gzip, size limit), then validated by them."""


PARSE_ON_LOOP_BYTES: Final = 256 * 1024
"""Bodies up to this size (decompressed; a live upload's continuation is some 34 KB, its first
upload 100 KB) are decoded and validated on the event loop (a millisecond or a few); larger
ones in a worker thread. The work holds the interpreter's lock either way: a hand-over to a
thread and back cost more than it, and under load the loop waited for the lock behind the
threads."""

DRAIN_BYTES = 4 * MAX_BODY_BYTES
"""How much of a body over the limit is read and thrown away before the 413 answer. A reverse
proxy writes the whole request before it reads the answer (nginx buffers it): a server that
answers and closes without reading it makes the proxy's write fail, and the client gets the
proxy's 502 instead of the 413 that says what to do. Past this, the connection is closed."""


async def _read_body(request: Request) -> bytes | None:
    """The body, or None when it is larger than MAX_BODY_BYTES (the rest read and dropped, up
    to DRAIN_BYTES in all)."""
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            if int(declared) > MAX_BODY_BYTES:
                await _drain(request, 0)
                return None
        except ValueError:
            pass
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            await _drain(request, size)
            return None
        chunks.append(chunk)
    body = b"".join(chunks)
    encoding = request.headers.get("content-encoding", "identity").strip().lower()
    if encoding in ("", "identity"):
        return body
    if encoding != "gzip":
        raise _BadEncoding(f"Content-Encoding {encoding!r}: send gzip or no encoding")
    # The limit holds for the decompressed body too (a small bomb must not fill memory).
    inflate = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    try:
        out = inflate.decompress(body, MAX_BODY_BYTES + 1)
    except zlib.error as e:
        raise _BadEncoding(f"body: not valid gzip ({e})") from None
    if len(out) > MAX_BODY_BYTES or inflate.unconsumed_tail:
        return None
    if not inflate.eof:
        raise _BadEncoding("body: gzip stream ends early")
    return out


async def _drain(request: Request, size: int) -> None:
    """Read the rest of a refused body (``size`` bytes read so far) and drop it, up to
    DRAIN_BYTES."""
    if size > DRAIN_BYTES:
        return
    async for chunk in request.stream():
        size += len(chunk)
        if size > DRAIN_BYTES:
            return


class _BadEncoding(ComputewatchError):
    """A request body the server cannot decode (answered 415 or 422)."""


def _mismatch_response(version: object) -> JSONResponse | None:
    m = protocol_mismatch(version)
    if m is None:
        return None
    return api_error(
        400,
        "protocol",
        m.message,
        client_protocol=m.client if isinstance(m.client, int | str | None) else None,
        supported_protocols=list(m.supported),
        upgrade=m.upgrade,
    )


@router.post(
    "/runs",
    summary="Upload runs (a batch; idempotent by run id and seq)",
    response_model=None,
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": _INGEST_SCHEMA}},
        }
    },
    responses={
        200: {"description": "IngestResponse: {protocol, results: [{id, seq, stored}]}"},
        400: {"description": "a protocol version the server does not speak"},
        401: {"description": "no valid token"},
        403: {
            "description": "the token's scope cannot upload, or a run names another team's "
            "model as its own (error: model_team) or as its base without that team's grant "
            "(error: base_model_grant); detail names the run and the team"
        },
        409: {"description": "a run id another team holds"},
        413: {"description": "body larger than MAX_BODY_BYTES (decompressed too)"},
        415: {"description": "a Content-Encoding other than gzip"},
        422: {
            "description": "malformed batch (detail names the field), a run's signed "
            "report refused (error: signature; detail names the run and why), or its base "
            "models forming a cycle (error: lineage; detail names the cycle)"
        },
        503: {"description": "database unavailable"},
    },
)
async def ingest(
    request: Request,
    principal: Annotated[Principal, Depends(require_ingest)],
    db: Annotated[Database, Depends(get_database)],
) -> JSONResponse:
    header = request.headers.get(PROTOCOL_HEADER)
    if header is not None:
        try:
            version: object = int(header)
        except ValueError:
            version = header
        bad = _mismatch_response(version)
        if bad is not None:
            return bad
    try:
        body = await _read_body(request)
    except _BadEncoding as e:
        code = 415 if str(e).startswith("Content-Encoding") else 422
        return api_error(code, "encoding" if code == 415 else "invalid", str(e))
    if body is None:
        return api_error(
            413,
            "too_large",
            f"request body larger than {MAX_BODY_BYTES} bytes: send fewer runs per batch",
            max_bytes=MAX_BODY_BYTES,
        )

    def parse() -> IngestBatch | JSONResponse:
        try:
            batch = parse_batch(body)
        except InvalidUpload as e:
            return api_error(422, "invalid", str(e))
        return _mismatch_response(batch["protocol"]) or batch

    require_signed = bool(getattr(request.app.state, "require_signed", False))
    # The body is decoded and validated before the upload takes its turn, so that the turn (the
    # process's one writer) holds only the database work; uploads wait their turn here, on the
    # event loop, rather than each in a worker thread of the pool that reads and authentication
    # need too; past the queue's bound the server says it is busy at once
    # (computewatch.server.admission). The uploads waiting for the writer are stored together,
    # one transaction for the group; on SQLite on the event loop when nothing has to be waited
    # for (_store_group_now).
    admission = _admission(request, db)
    admission.in_flight += 1  # from its body's arrival to its answer (Admission.crowded)
    try:
        parsed = parse() if len(body) <= PARSE_ON_LOOP_BYTES else await run_in_threadpool(parse)
        if isinstance(parsed, JSONResponse):
            return parsed
        upload = Upload(principal.team, parsed, require_signed)
        outcome = await _group_writer(request, db).submit(request, upload)
        if isinstance(outcome, IntegrityError):  # stored again alone, with its retries
            return await run_in_threadpool(_store_alone, db, upload)
        return _stored_response(outcome)
    finally:
        admission.in_flight -= 1


def _store_alone(db: Database, upload: Upload) -> JSONResponse:
    """``upload`` stored in a transaction of its own (when its group met a constraint), retried
    where another process inserted one of its runs meanwhile (it is then stored as an update,
    or answered stored: false)."""
    for attempt in range(INGEST_RETRIES):
        with db.writing(), db.session() as session:
            try:
                results = store_batch(
                    session,
                    upload.team,
                    upload.batch,
                    require_signed=upload.require_signed,
                    on_run=governance_service.on_run_stored,
                )
            except IntegrityError:
                if attempt + 1 == INGEST_RETRIES:
                    raise
                continue
            except REFUSALS as e:
                return _stored_response(e)
        return _stored_response(results)
    raise AssertionError("unreachable")


def _store_group(db: Database, uploads: Sequence[Upload]) -> list[Outcome]:
    """A group of uploads stored in one transaction (:func:`store_group`); when the group as a
    whole fails (the database locked by another process, a deadlock with another process's
    group on PostgreSQL, or the database gone), each is stored alone, so that one upload's fate
    is what it would have been alone."""
    try:
        with db.writing(), db.session() as session:
            return store_group(session, uploads, on_run=governance_service.on_run_stored)
    except Exception:  # each alone: an upload's own error then answers that upload only
        if len(uploads) == 1:
            raise
    out: list[Outcome] = []
    for upload in uploads:
        try:
            with db.writing(), db.session() as session:
                out.append(
                    store_group(session, [upload], on_run=governance_service.on_run_stored)[0]
                )
        except Exception as e:  # its caller raises it, as it would have alone
            out.append(e)
    return out


def _store_group_now(db: Database, uploads: Sequence[Upload]) -> list[Outcome] | None:
    """A group stored on the event loop, in one transaction, when nothing has to be waited for
    (SQLite): the writer's turn free, an idle connection in the pool and SQLite's write lock
    not held by another process (taken without waiting); else None, nothing written, and the
    group goes to the writer's thread (:func:`_store_group`), which waits for them. On the loop
    the group's work runs at once and without a hand-over of the interpreter's lock per
    statement: in the writer's thread, each SQLite call gave the lock up and waited for it back
    from a loop busy with hundreds of connections (turns of hundreds of milliseconds for 2 ms
    of work). Any failure leaves the group to the thread too, which stores each upload alone if
    need be."""
    if not db.connection_free():
        return None
    with db.writing_now() as mine:
        if not mine:
            return None
        try:
            with db.session() as session:
                return store_group(
                    session, uploads, on_run=governance_service.on_run_stored, wait=False
                )
        except Exception as e:  # the thread's turn: it waits, retries, or stores each alone
            if not is_locked(e):
                log.info("uploads stored in the writer's thread after: %s", e)
            return None


def _stored_response(outcome: Outcome) -> JSONResponse:
    """The answer to one upload: its results, or the refusal that stored none of it (any
    other exception is raised, to the server's handlers)."""
    if isinstance(outcome, IngestConflict):
        return api_error(409, "conflict", str(outcome))
    if isinstance(outcome, SignatureRefused):
        return api_error(422, "signature", str(outcome))
    if isinstance(outcome, DeclarationRefused):
        return api_error(outcome.status, outcome.code, str(outcome))
    if isinstance(outcome, DataError):
        return api_error(422, "invalid", f"the database refused a value: {outcome.orig}")
    if isinstance(outcome, Exception):
        raise outcome
    doc: IngestResponse = {
        "protocol": PROTOCOL_VERSION,
        "results": outcome,
        "features": [FEATURE_SERIES_BASE],
    }
    return JSONResponse(doc, headers={PROTOCOL_HEADER: str(PROTOCOL_VERSION)})


INGEST_CONCURRENCY: Final = 1
"""Groups of uploads stored at once per server process (its one writer, GroupWriter). On
PostgreSQL each upload was stored in a transaction of its own, eight at a time per process: per
upload a worker thread, a connection checked out and pinged, a commit (an fsync), and for a
run's final upload the ledger's lock held from its entry to that commit, so the processes'
uploads ended one at a time; storing each process's waiting uploads together pays these once
per group."""


def _admission(request: Request, db: Database) -> Admission:
    """The app's admission of uploads, made on the event loop that serves it."""
    loop = asyncio.get_running_loop()
    made: tuple[asyncio.AbstractEventLoop, Admission] | None = getattr(
        request.app.state, "admission", None
    )
    if made is None or made[0] is not loop:
        queue = int(getattr(request.app.state, "max_queued_uploads", DEFAULT_MAX_QUEUED_UPLOADS))
        made = (loop, Admission(INGEST_CONCURRENCY, queue))
        request.app.state.admission = made
    return made[1]


def _group_writer(request: Request, db: Database) -> GroupWriter[Upload, Outcome]:
    """The app's group writer (made on the event loop that serves it): one per server process,
    storing the uploads that wait for it together, in one transaction per group; on SQLite on
    the event loop itself when nothing has to be waited for (:func:`_store_group_now`), on
    PostgreSQL always in the writer's thread (a statement there waits on the network and, for
    another process's locks, on it)."""
    loop = asyncio.get_running_loop()
    made: tuple[asyncio.AbstractEventLoop, GroupWriter[Upload, Outcome]] | None = getattr(
        request.app.state, "group_writer", None
    )
    if made is None or made[0] is not loop:

        def store(uploads: Sequence[Upload]) -> list[Outcome]:
            return _store_group(db, uploads)

        def store_now(uploads: Sequence[Upload]) -> list[Outcome] | None:
            return _store_group_now(db, uploads)

        # on PostgreSQL never on the loop: a statement there is a round trip, and a server
        # that stops answering (or another process's lock) would stall every request
        now = store_now if db.dialect == "sqlite" else None
        writer = GroupWriter(_admission(request, db), store, store_now=now)
        made = (loop, writer)
        request.app.state.group_writer = made
    return made[1]


class UploadCounters(TypedDict):
    """How this server process has admitted and stored uploads since it started (``/healthz``):
    in flight now (from its body's arrival to its answer) and waiting for the writer, refused
    (429), dropped (the client left while it waited), stored by the SQLite writer and in how
    many turns (``stored / turns``: the mean group), how many of those on the event loop
    (the rest in the writer's thread), and the pace the queue is bounded by."""

    in_flight: int
    waiting: int
    refused: int
    dropped: int
    stored: int
    turns: int
    stored_on_loop: int
    pace_ms: float


def upload_counters(app: FastAPI) -> UploadCounters:
    admitted: tuple[asyncio.AbstractEventLoop, Admission] | None = getattr(
        app.state, "admission", None
    )
    writer: tuple[asyncio.AbstractEventLoop, GroupWriter[Upload, Outcome]] | None = getattr(
        app.state, "group_writer", None
    )
    adm = admitted[1] if admitted else None
    return {
        "in_flight": adm.in_flight if adm else 0,
        "waiting": adm.waiting if adm else 0,
        "refused": adm.refused if adm else 0,
        "dropped": adm.dropped if adm else 0,
        "stored": writer[1].stored if writer else 0,
        "turns": writer[1].groups if writer else 0,
        "stored_on_loop": writer[1].stored_on_loop if writer else 0,
        "pace_ms": round(adm.pace * 1000, 3) if adm else 0.0,
    }


# -- reading ---------------------------------------------------------------------------------------


def _tag(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise HTTPException(400, f"tag: expected KEY=VALUE, not {text!r}")
    return key, value


def _bad_query(e: BadQuery) -> HTTPException:
    return HTTPException(400, str(e))


@router.get("/runs", response_model=RunPage, summary="List runs (filters, sort, cursor pages)")
def runs(
    principal: Annotated[Principal, Depends(require_read)],
    session: Annotated[Session, Depends(db_session)],
    team: str | None = None,
    user: str | None = None,
    project: str | None = None,
    tag: Annotated[list[str] | None, Query(description="KEY=VALUE, repeatable")] = None,
    status: str | None = None,
    since: Annotated[str | None, Query(description="started at or after")] = None,
    until: Annotated[str | None, Query(description="started before")] = None,
    q: Annotated[str | None, Query(description="text in the run's name")] = None,
    sort: str = "started_at",
    order: str = "desc",
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = 50,
    cursor: str | None = None,
) -> RunPage:
    flt = RunFilter(
        teams=principal.teams,
        team=team,
        user=user,
        project=project,
        tags=tuple(_tag(t) for t in tag or ()),
        status=status,
        since=parse_time(since, "since"),
        until=parse_time(until, "until"),
        text=q or None,
    )
    try:
        return list_runs(session, flt, sort=sort, order=order, limit=limit, cursor=cursor)
    except BadQuery as e:
        raise _bad_query(e) from None


@dataclass(frozen=True)
class SignatureOut:
    """``status``: valid, unsigned or unknown_key (computewatch.ledger.reports); ``key_id``:
    the key that signed it, null when unsigned."""

    status: str
    key_id: str | None


@dataclass(frozen=True)
class RunOut:
    """``GET /runs/{id}``: the run's row, its summary, and the summary's sections by name."""

    run: RunRow
    command: list[str]
    summary: dict[str, Any] | None
    accounting: dict[str, Any] | None
    """The summary's ``energy``, ``carbon``, ``cost``, ``flops``, ``forecast`` (those present)."""
    diagnosis: dict[str, Any] | None
    configuration: dict[str, Any] | None
    """The run's ``config`` document (meta), when it has one."""
    meta: dict[str, Any]
    series: list[SeriesRow]
    signature: SignatureOut
    """What the check of the latest stored upload's signed usage report found."""


@router.get("/runs/{run_id}", response_model=RunOut, summary="One run in full")
def run_detail(
    run_id: str,
    principal: Annotated[Principal, Depends(require_read)],
    session: Annotated[Session, Depends(db_session)],
) -> RunOut:
    d = get_run(session, run_id, principal.teams)
    if d is None:
        raise HTTPException(404, f"no run {run_id!r} visible to this token")
    s = d.summary or {}
    acc = {k: s[k] for k in ("energy", "carbon", "cost", "flops", "forecast") if k in s}
    diag = s.get("diagnosis")
    conf = d.meta.get("config")
    sig = run_signature(session, run_id)
    return RunOut(
        run=d.run,
        command=d.command,
        summary=finite(d.summary),
        accounting=finite(acc) if acc else None,
        diagnosis=finite(diag) if isinstance(diag, dict) else None,
        configuration=conf if isinstance(conf, dict) else None,
        meta=d.meta,
        series=d.series,
        signature=SignatureOut(sig.status, sig.key_id),
    )


@dataclass(frozen=True)
class UsageOut:
    by: str
    since: float | None
    until: float | None
    bucket: str | None
    rows: list[UsageRow]


@router.get("/usage", response_model=UsageOut, summary="Usage by team, user, project or GPU")
def usage_route(
    principal: Annotated[Principal, Depends(require_read)],
    session: Annotated[Session, Depends(db_session)],
    by: str = "team",
    since: str | None = None,
    until: str | None = None,
    bucket: Annotated[str | None, Query(description="day, week or month")] = None,
) -> UsageOut:
    s, u = parse_time(since, "since"), parse_time(until, "until")
    try:
        rows = usage(session, by=by, teams=principal.teams, since=s, until=u, bucket=bucket)
    except BadQuery as e:
        raise _bad_query(e) from None
    return UsageOut(by, s, u, bucket, rows)


@dataclass(frozen=True)
class RunningOut:
    runs: list[RunRow]


@router.get("/running", response_model=RunningOut, summary="Runs in progress now")
def running(
    principal: Annotated[Principal, Depends(require_read)],
    session: Annotated[Session, Depends(db_session)],
) -> RunningOut:
    return RunningOut(running_now(session, principal.teams))


@dataclass(frozen=True)
class MeOut:
    team: str
    scope: str
    token_id: int
    teams: list[str] | None
    """The teams whose runs this token sees; null for every team (admin)."""


@router.get("/me", response_model=MeOut, summary="Who this token is")
def me(principal: Annotated[Principal, Depends(require_read)]) -> MeOut:
    teams = principal.teams
    return MeOut(
        principal.team,
        principal.scope,
        principal.token_id,
        None if teams is None else sorted(teams),
    )


# -- live events -----------------------------------------------------------------------------------


MAX_EVENT_ID: Final = 2**63 - 1


def _last_event_id(text: str | None) -> int | None:
    """``Last-Event-ID``: the id of the last event a reconnecting client saw (a change id);
    400 when it is not one."""
    if text is None or text.strip() == "":
        return None
    t = text.strip()
    if not (t.isascii() and t.isdigit()) or int(t) > MAX_EVENT_ID:
        raise HTTPException(
            400, f"Last-Event-ID: expected the id of an event this server sent, not {t[:40]!r}"
        )
    return int(t)


@functools.lru_cache(maxsize=4096)
def _sse(change: Change) -> bytes:
    """One change as an event; made once for all the streams that send it (cached)."""
    data = json_dumps(
        {
            "id": change.id,
            "team": change.team,
            "seq": change.seq,
            "status": change.status,
            "final": change.final,
        }
    )
    return f"id: {change.change}\nevent: run\ndata: {data}\n\n".encode()


@router.get(
    "/events",
    summary="Server-Sent Events: one 'run' event per stored upload",
    response_class=StreamingResponse,
)
async def events(
    request: Request,
    principal: Annotated[Principal, Depends(require_read)],
    db: Annotated[Database, Depends(get_database)],
) -> StreamingResponse:
    hub: EventHub = request.app.state.events
    after = _last_event_id(request.headers.get("last-event-id"))
    teams = principal.teams

    def read() -> list[Change]:
        assert after is not None
        with db.session() as s:
            return changes_after(s, after, teams)

    async def stream() -> AsyncIterator[bytes]:
        # Subscribed here, inside the stream, so that every way out (the end, a disconnect, a
        # failed replay, a stream cancelled before its first byte) passes the finally below.
        # Holds no database connection: one reader per process feeds every subscription.
        sub = hub.subscribe(teams)
        try:
            yield b": computewatch events\nretry: 2000\n\n"
            sent = set()
            # read after subscribing: a change stored in between comes twice and is sent once
            for c in await run_in_threadpool(read) if after is not None else []:
                sent.add(c.change)
                yield _sse(c)
            while True:
                try:
                    change = await asyncio.wait_for(sub.queue.get(), HEARTBEAT_SECONDS)
                except TimeoutError:
                    if await request.is_disconnected():
                        return
                    yield b": ping\n\n"
                    continue
                # what else is queued goes in the same write: one send a batch, not an event
                ready = [change]
                while ready[-1] is not None and not sub.queue.empty():
                    ready.append(sub.queue.get_nowait())
                out = b"".join(_sse(c) for c in ready if c is not None and c.change not in sent)
                if out:
                    yield out
                if ready[-1] is None or sub.overflowed:
                    return  # the server is stopping, or this reader fell behind: reconnect
        finally:
            hub.unsubscribe(sub)

    return StreamingResponse(
        stream(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )
