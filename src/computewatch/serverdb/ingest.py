"""Ingest: an upload batch checked against the protocol, then stored in one transaction.

:func:`parse_batch` turns the request body into an ``IngestBatch`` (computewatch.upload.protocol)
or raises :class:`InvalidUpload` naming the first bad field (``runs[2].seq: ...``): nothing is
stored for a batch with one bad run. :func:`store_batch` keeps, per run id, the upload with the
highest ``seq``; an upload of a ``seq`` already held (or older) is answered ``stored: false``.
The team comes from the caller's token, never from the body. Command lines and tags are redacted
again here (``computewatch.redact``), whatever the client did. A run's ``signed_report`` is
checked in the same transaction (computewatch.serverdb.node_keys): an invalid one refuses the
whole batch (:class:`~computewatch.serverdb.node_keys.SignatureRefused`), as do unsigned and
unknown-key uploads with ``require_signed``; the outcome is kept per run and goes into its ledger
entry.
"""

from __future__ import annotations

import contextlib
import datetime
import math
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, cast

from sqlalchemy import Table, bindparam, delete, insert, select, text, update
from sqlalchemy.exc import DataError, IntegrityError
from sqlalchemy.orm import Session

from computewatch.errors import ComputewatchError
from computewatch.jsonout import loads as json_loads
from computewatch.ledger.reports import SignatureStatus
from computewatch.redact import redact_argv, redact_mapping
from computewatch.serverdb import prepared
from computewatch.serverdb.engine import SQLITE_BEGIN
from computewatch.serverdb.errors import IngestConflict, InvalidUpload
from computewatch.serverdb.lineage_ingest import on_stored
from computewatch.serverdb.models import Run, RunChange, RunDoc, RunTag
from computewatch.serverdb.node_keys import (
    SignatureRefused,
    check_upload,
    record_signature,
    refusal,
)
from computewatch.serverdb.series import (
    COMPACT_AFTER,
    append_series,
    parts_held,
    replace_series,
)
from computewatch.upload.protocol import (
    PROTOCOL_VERSION,
    IngestBatch,
    IngestResult,
    RunUpload,
)
from computewatch.upload.schema import InvalidBatch, validate_batch, validate_batch_json

__all__ = [
    "NOTIFY_CHANNEL",
    "REFUSALS",
    "SUPPORTED_PROTOCOLS",
    "Outcome",
    "ProtocolMismatch",
    "RunHook",
    "Upload",
    "denormalize",
    "parse_batch",
    "protocol_mismatch",
    "store_batch",
    "store_group",
]

SUPPORTED_PROTOCOLS: Final = (PROTOCOL_VERSION,)
NOTIFY_CHANNEL: Final = "computewatch_runs"
"""PostgreSQL channel a NOTIFY is sent on for each stored upload (payload: the change as JSON)."""


@dataclass(frozen=True)
class ProtocolMismatch:
    """Why the server cannot read a client's protocol version, and which side to upgrade."""

    client: object
    supported: tuple[int, ...]
    upgrade: str
    """``client``, ``server`` or ``client`` (unreadable version)."""
    message: str


def protocol_mismatch(version: object) -> ProtocolMismatch | None:
    """None when ``version`` is one the server speaks."""
    supported = SUPPORTED_PROTOCOLS
    speaks = ", ".join(map(str, supported))
    if isinstance(version, int) and not isinstance(version, bool) and version in supported:
        return None
    if isinstance(version, int) and not isinstance(version, bool) and version > max(supported):
        return ProtocolMismatch(
            version,
            supported,
            "server",
            f"upload protocol {version} is newer than this server's ({speaks}): "
            "upgrade the server (or use an older client)",
        )
    if isinstance(version, int) and not isinstance(version, bool):
        return ProtocolMismatch(
            version,
            supported,
            "client",
            f"upload protocol {version} is older than this server's ({speaks}): "
            "upgrade the client (pip install -U computewatch)",
        )
    return ProtocolMismatch(
        version,
        supported,
        "client",
        f"no readable upload protocol version ({version!r}); this server speaks {speaks}",
    )


# -- parsing --------------------------------------------------------------------------------------


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def parse_batch(body: bytes | str) -> IngestBatch:
    """The request body as a batch, validated against the protocol's models
    (computewatch.upload.schema). Raises :class:`InvalidUpload` (malformed JSON, a field of the
    wrong type or out of range, named) or, for a protocol the server does not speak, returns the
    batch with its ``protocol`` as sent: check it with :func:`protocol_mismatch` first.
    A valid batch is decoded and validated in one pass (``validate_batch_json``); a body that
    fails it is read again the long way, which names what is wrong."""
    fast = validate_batch_json(
        body.encode("utf-8", "surrogatepass") if isinstance(body, str) else body
    )
    if fast is not None:
        return fast
    try:
        doc = json_loads(body, parse_constant=_reject_constant)
    except RecursionError:
        raise InvalidUpload("body: JSON nested too deeply") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise InvalidUpload(f"body: not valid JSON ({e})") from None
    if not isinstance(doc, dict):
        raise InvalidUpload("body: expected a JSON object {protocol, runs}")
    if "protocol" not in doc:
        raise InvalidUpload("protocol: missing")
    if protocol_mismatch(doc["protocol"]) is not None:
        return cast(IngestBatch, {"protocol": doc["protocol"], "runs": []})
    try:
        return validate_batch(doc)
    except InvalidBatch as e:
        raise InvalidUpload(str(e)) from None


# -- denormalization ------------------------------------------------------------------------------


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    try:
        f = float(v)
    except OverflowError:
        return None
    return f if math.isfinite(f) and abs(f) < 1e300 else None


def _figure(doc: Any) -> tuple[float | None, float | None, float | None, str | None]:
    """(value, low, high, method) of a summary figure, all None when absent."""
    if not isinstance(doc, dict):
        return None, None, None, None
    method = doc.get("method")
    return (
        _num(doc.get("value")),
        _num(doc.get("low")),
        _num(doc.get("high")),
        method[:64] if isinstance(method, str) else None,
    )


def _scaled(
    fig: tuple[float | None, float | None, float | None, str | None], factor: float
) -> tuple[float | None, float | None, float | None, str | None]:
    v, lo, hi, m = fig
    return (
        None if v is None else v * factor,
        None if lo is None else lo * factor,
        None if hi is None else hi * factor,
        m,
    )


@dataclass(frozen=True)
class Denormalized:
    """The figures a run's row holds in columns, taken from its summary."""

    duration_seconds: float | None
    gpu_model: str | None
    gpu_count: int
    gpu_hours: float
    idle_gpu_hours: float | None
    gpu_utilization: float | None
    mfu: float | None
    cpu_hours: float | None
    cpu_method: str | None
    kwh: tuple[float | None, float | None, float | None, str | None]
    cost: tuple[float | None, float | None, float | None, str | None]
    co2e_kg: tuple[float | None, float | None, float | None, str | None]


def denormalize(run: RunUpload, now: float) -> Denormalized:
    """GPU-hours are the run's GPUs (each at its ``share``) times its wall time; idle GPU-hours
    the part of those at which the GPU was not busy (1 - mean utilization); the energy is the
    facility energy (kWh), the carbon the total (gCO2e, kept in kg), the cost the total (USD),
    each with the method and range the summary gives."""
    s: dict[str, Any] = run["summary"] or {}
    duration = _num(s.get("duration_seconds"))
    if duration is None:
        end = run["ended_at"] if run["ended_at"] is not None else (None if run["final"] else now)
        duration = max(0.0, end - run["started_at"]) if end is not None else None
    gpus_raw = s.get("gpus")
    gpus = [g for g in gpus_raw if isinstance(g, dict)] if isinstance(gpus_raw, list) else []
    used = [g for g in gpus if g.get("scope") != "device"] or gpus
    models = [str(g.get("model") or g.get("name") or "unknown")[:200] for g in used]
    gpu_model = max(set(models), key=models.count) if models else None
    hours = (duration or 0.0) / 3600.0
    gpu_hours = 0.0
    idle: float | None = None
    utils: list[float] = []
    for g in used:
        share = _num(g.get("share"))
        share = 1.0 if share is None or not 0 <= share <= 1 else share
        gpu_hours += share * hours
        u = _num(g.get("utilization_mean"))
        if u is not None:
            u = min(1.0, max(0.0, u))
            utils.append(u)
            idle = (idle or 0.0) + share * hours * (1.0 - u)
    cpu = s.get("cpu") if isinstance(s.get("cpu"), dict) else {}
    cpu_seconds = _num(cpu.get("seconds_total")) if isinstance(cpu, dict) else None
    cpu_method = cpu.get("method") if isinstance(cpu, dict) else None
    if cpu_seconds is not None and not isinstance(cpu_method, str):
        cpu_method = "process tree"
    flops = s.get("flops")
    mfu = _figure(flops.get("mfu"))[0] if isinstance(flops, dict) else None
    energy = s.get("energy")
    carbon = s.get("carbon")
    cost = s.get("cost")
    return Denormalized(
        duration_seconds=duration,
        gpu_model=gpu_model,
        gpu_count=len(used),
        gpu_hours=gpu_hours,
        idle_gpu_hours=idle,
        gpu_utilization=sum(utils) / len(utils) if utils else None,
        mfu=mfu,
        cpu_hours=None if cpu_seconds is None else cpu_seconds / 3600.0,
        cpu_method=cpu_method[:64] if isinstance(cpu_method, str) else None,
        kwh=_figure(energy.get("facility")) if isinstance(energy, dict) else _figure(None),
        cost=_figure(cost.get("total")) if isinstance(cost, dict) else _figure(None),
        co2e_kg=_scaled(_figure(carbon.get("total")), 1e-3)
        if isinstance(carbon, dict)
        else _figure(None),
    )


def _day(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.UTC).strftime("%Y-%m-%d")


# -- storing --------------------------------------------------------------------------------------


def _values(team: str, run: RunUpload, now: float) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The run row's columns from ``run`` (id aside), and the summary to keep (its command
    redacted again)."""
    d = denormalize(run, now)
    kwh, kwh_low, kwh_high, kwh_method = d.kwh
    cost, cost_low, cost_high, cost_method = d.cost
    co2e, co2e_low, co2e_high, co2e_method = d.co2e_kg
    values: dict[str, Any] = {
        "team": team,
        "user": run["user"],
        "project": run["project"],
        "host": run["host"],
        "name": run["name"],
        "status": run["status"],
        "exit_code": run["exit_code"],
        "started_at": run["started_at"],
        "started_day": _day(run["started_at"]),
        "ended_at": run["ended_at"],
        "duration_seconds": d.duration_seconds,
        "gpu_model": d.gpu_model,
        "gpu_count": d.gpu_count,
        "gpu_hours": d.gpu_hours,
        "idle_gpu_hours": d.idle_gpu_hours,
        "gpu_utilization": d.gpu_utilization,
        "mfu": d.mfu,
        "cpu_hours": d.cpu_hours,
        "cpu_method": d.cpu_method,
        "kwh": kwh,
        "kwh_low": kwh_low,
        "kwh_high": kwh_high,
        "kwh_method": kwh_method,
        "cost_usd": cost,
        "cost_low": cost_low,
        "cost_high": cost_high,
        "cost_method": cost_method,
        "co2e_kg": co2e,
        "co2e_low": co2e_low,
        "co2e_high": co2e_high,
        "co2e_method": co2e_method,
        "seq": run["seq"],
        "final": run["final"],
        "updated_at": now,
        "command": redact_argv(run["command"]),
        "tags": redact_mapping(run["tags"]),
    }
    summary = run["summary"]
    if summary is not None and isinstance(summary.get("command"), list):
        summary = {
            **summary,
            "command": redact_argv([str(a) for a in summary["command"]]),
        }
    return values, summary


RUN_LOCK_CLASS: Final = 7261
"""First key of the transaction-scoped advisory locks an ingest takes on its run ids."""


def _lock_run_ids(session: Session, ids: list[str]) -> None:
    """Take, before anything else and in one global order, a lock per run id of the batch
    (PostgreSQL advisory locks, held until commit). Two batches sharing runs then wait for each
    other instead of deadlocking, whether a run is new (an insert) or not, and whatever the
    transaction locks later (the ledger's lock)."""
    keys = sorted({zlib.crc32(i.encode()) - 2**31 for i in ids})  # int4 range
    session.execute(_LOCK_RUNS, {"cls": RUN_LOCK_CLASS, "keys": keys})


_LOCK_RUNS = text(
    "SELECT pg_advisory_xact_lock(:cls, k) FROM unnest(CAST(:keys AS integer[])) AS k"
)


RunHook = Callable[[Session, str, RunUpload, SignatureStatus], object]
"""What records a stored run for governance, in the ingest's transaction: ``(session, team,
run, signature)``. The server passes the governance service's
(computewatch.governance.service.on_run_stored: the ledger entry, then tier crossings and
obligations); by default :func:`~computewatch.serverdb.lineage_ingest.on_stored` (the ledger
entry and the model's compute only)."""


def _record(session: Session, team: str, run: RunUpload, signature: SignatureStatus) -> object:
    return on_stored(session, team, run, signature=signature)


_RUNS = cast(Table, Run.__table__)
_DOCS = cast(Table, RunDoc.__table__)
_TAGS = cast(Table, RunTag.__table__)
_CHANGES = cast(Table, RunChange.__table__)
"""The tables an upload is written to, with Core statements: the ORM's unit of work (an object
per row, flushed and loaded back) was most of an upload's cost."""

# The statements an upload runs, made once with bound parameters: SQLAlchemy then finds each
# one's compiled form by a cache key computed once, where a statement built per upload (values
# inlined) cost its construction and its key every time (a third of the database work).
_HELD = select(_RUNS.c.team, _RUNS.c.seq).where(_RUNS.c.id == bindparam("b_id"))
_HELD_LOCKED = _HELD.with_for_update()
_INSERT_RUN = insert(_RUNS)
_UPDATE_RUN = update(_RUNS).where(_RUNS.c.id == bindparam("b_id"))
_INSERT_DOC = insert(_DOCS)
_UPDATE_DOC = update(_DOCS).where(_DOCS.c.run_id == bindparam("b_run_id"))
_DELETE_TAGS = delete(_TAGS).where(_TAGS.c.run_id == bindparam("b_run_id"))
_INSERT_TAGS = insert(_TAGS)
_INSERT_CHANGE = insert(_CHANGES)
_INSERT_CHANGE_NOTIFY = text(
    "WITH c AS (INSERT INTO run_changes (run_id, team, seq, status, final, at) "
    "VALUES (:run_id, :team, :seq, :status, :final, :at) "
    "RETURNING id, run_id, team, seq, status, final) "
    f"SELECT pg_notify('{NOTIFY_CHANNEL}', CAST(json_build_object('change', c.id, "
    "'id', c.run_id, 'team', c.team, 'seq', c.seq, 'status', c.status, 'final', c.final) "
    "AS text)) FROM c"
)
"""On PostgreSQL the change row and its NOTIFY (the row as JSON: computewatch.server.events)
in one statement, one round trip. A NOTIFY is sent at commit, and not at all when the upload's
savepoint is rolled back."""


def store_batch(
    session: Session,
    team: str,
    batch: IngestBatch,
    *,
    require_signed: bool = False,
    on_run: RunHook | None = None,
) -> list[IngestResult]:
    """Store every run of ``batch`` for ``team`` in one transaction (all or nothing) and
    commit; ``on_run`` records each stored run for governance (:data:`RunHook`). Raises
    :class:`IngestConflict` when a run id belongs to another team, and
    :class:`SignatureRefused` for a run whose signed report is invalid (or, with
    ``require_signed``, that is unsigned or signed by a key not registered for ``team``);
    nothing is stored then."""
    postgres = session.get_bind().dialect.name == "postgresql"
    if not postgres:
        # SQLite: take the write lock before reading, so that another process cannot store the
        # same run between our read of its seq and our write (engine.py: BEGIN IMMEDIATE).
        session.connection(execution_options={SQLITE_BEGIN: "IMMEDIATE"})
    try:
        results = _store_runs(session, team, batch, require_signed, on_run, postgres)
        session.commit()
    except BaseException:
        session.rollback()
        raise
    return results


@dataclass(frozen=True)
class Upload:
    """One upload of a group stored together (:func:`store_group`): its batch, the team of its
    token and whether the server requires signed reports."""

    team: str
    batch: IngestBatch
    require_signed: bool = False


Outcome = list[IngestResult] | Exception
"""What became of one upload of a group: its results, or why it was refused (the exception
:func:`store_batch` would have raised for it alone)."""

REFUSALS: Final = (ComputewatchError, DataError, IntegrityError)
"""What refuses one upload of a group and none of the others: a conflict, a signature or a
declaration refused, a value the database refuses, a constraint."""


def store_group(
    session: Session,
    uploads: Sequence[Upload],
    *,
    on_run: RunHook | None = None,
    wait: bool = True,
) -> list[Outcome]:
    """Store ``uploads`` in one transaction, each as :func:`store_batch` would store it alone:
    each in a savepoint of its own, so that one refused (an exception of :data:`REFUSALS`,
    returned in its place) leaves the others stored, and one commit for all. The outcomes come
    in the order of ``uploads``. Uploads that wait for the server's writer are so stored
    together: the commit, the BEGIN and the hand-over to the writer's thread are paid once per
    group, not per upload. Any other exception (the database locked or gone, on PostgreSQL a
    deadlock with another process) rolls everything back and is raised: the caller then stores
    each alone, as before.

    On SQLite, ``wait=False`` takes the write lock without waiting for another process that
    holds it (``database is locked`` at once, nothing written). On PostgreSQL the group first
    takes the lock of every run it holds, in one global order (as :func:`store_batch` does for
    one batch), so that two processes' groups wait for each other instead of deadlocking; the
    uploads that end a run are stored last, so that the ledger's lock (taken by a run's final
    upload, to append its entry) is held from the end of the group's work to its commit rather
    than from its start: the other processes' groups wait for it that much less."""
    postgres = session.get_bind().dialect.name == "postgresql"
    if postgres:
        conn = session.connection()
        ids = [r["id"] for u in uploads for r in u.batch["runs"]]
        if ids:
            _lock_run_ids(session, ids)
        order = sorted(range(len(uploads)), key=lambda i: _ends_a_run(uploads[i]))
    else:
        conn = session.connection(
            execution_options={SQLITE_BEGIN: "IMMEDIATE" if wait else "IMMEDIATE_NOWAIT"}
        )
        order = list(range(len(uploads)))
    out: list[Outcome | None] = [None] * len(uploads)
    alone = len(uploads) == 1  # its transaction is its savepoint
    try:
        for i in order:
            upload = uploads[i]
            if not alone:
                session.flush()  # what earlier uploads left pending, before the savepoint
                prepared.savepoint(conn, "begin")
            try:
                stored = _store_runs(
                    session,
                    upload.team,
                    upload.batch,
                    upload.require_signed,
                    on_run,
                    postgres=postgres,
                    locked=True,
                )
            except REFUSALS as e:
                if alone:
                    session.rollback()
                    return [e]
                prepared.savepoint(conn, "rollback")
                prepared.savepoint(conn, "release")
                # its objects are gone from the database: out of the session too (the earlier
                # uploads' were flushed before its savepoint, so nothing of theirs is lost)
                session.expunge_all()
                out[i] = e
                continue
            if not alone:
                prepared.savepoint(conn, "release")
            out[i] = stored
        session.commit()
    except BaseException:
        session.rollback()
        raise
    return cast(list[Outcome], out)  # every upload has its outcome


def _ends_a_run(upload: Upload) -> bool:
    return any(r["final"] for r in upload.batch["runs"])


def _store_runs(
    session: Session,
    team: str,
    batch: IngestBatch,
    require_signed: bool,
    on_run: RunHook | None,
    postgres: bool,
    locked: bool = False,
) -> list[IngestResult]:
    """The runs of ``batch`` written in the session's transaction (not committed); ``locked``:
    on PostgreSQL the caller holds its runs' locks already (:func:`store_group`)."""
    now = time.time()
    results: list[IngestResult] = []
    if postgres and not locked and batch["runs"]:
        _lock_run_ids(session, [r["id"] for r in batch["runs"]])
    conn = session.connection()
    for run in batch["runs"]:
        rid = run["id"]
        held = prepared.first(conn, _HELD_LOCKED if postgres else _HELD, {"b_id": rid})
        if held is not None and held[0] != team:
            raise IngestConflict(f"run {rid} belongs to another team")
        signature = check_upload(session, team, run)
        refused = refusal(rid, signature, require_signed=require_signed)
        if refused is not None:
            raise SignatureRefused(refused)
        if held is not None and held[1] >= run["seq"]:
            results.append({"id": rid, "seq": run["seq"], "stored": False})
            continue
        base = run.get("series_base")
        if base is not None and (held is None or held[1] != base):
            # the points continue an upload this server does not hold as the run's latest
            results.append({"id": rid, "seq": run["seq"], "stored": False, "needs_full": True})
            continue
        values, summary = _values(team, run, now)
        parts = parts_held(conn, rid) if base is not None and run["series"] else None
        # The writes below need no answer: on PostgreSQL they go in one round trip (a run's
        # series merged from many parts is read by SQLAlchemy, which cannot be in the pipeline).
        together = parts is None or parts < COMPACT_AFTER
        with prepared.pipelined(conn) if together else contextlib.nullcontext():
            if held is None:
                prepared.execute(conn, _INSERT_RUN, {"id": rid, **values})
                prepared.execute(
                    conn, _INSERT_DOC, {"run_id": rid, "summary": summary, "meta": run["meta"]}
                )
            else:
                prepared.execute(conn, _UPDATE_RUN, {"b_id": rid, **values})
                prepared.execute(
                    conn, _UPDATE_DOC, {"b_run_id": rid, "summary": summary, "meta": run["meta"]}
                )
                prepared.execute(conn, _DELETE_TAGS, {"b_run_id": rid})
            tags = cast(dict[str, str], values["tags"])
            if tags:
                prepared.execute(
                    conn,
                    _INSERT_TAGS,
                    [{"run_id": rid, "key": k, "value": v} for k, v in tags.items()],
                )
            if base is None:
                replace_series(conn, rid, run["seq"], run["series"])
            else:
                append_series(conn, rid, run["seq"], run["series"], held=parts)
            record_signature(session, rid, signature)
        session.expire_all()  # objects loaded before these Core writes read them again
        # governance: model compute, ledger, tiers (same transaction)
        (on_run or _record)(session, team, run, signature.status)
        change = {
            "run_id": rid,
            "team": team,
            "seq": run["seq"],
            "status": run["status"],
            "final": run["final"],
            "at": now,
        }
        prepared.execute(conn, _INSERT_CHANGE_NOTIFY if postgres else _INSERT_CHANGE, change)
        results.append({"id": run["id"], "seq": run["seq"], "stored": True})
    return results
