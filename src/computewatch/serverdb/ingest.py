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

import datetime
import json
import math
import re
import time
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, cast

from sqlalchemy import delete, select, text, update
from sqlalchemy.orm import Session

from computewatch.jsonout import dumps as json_dumps
from computewatch.ledger.reports import shape_problem
from computewatch.redact import redact_argv, redact_mapping
from computewatch.serverdb.engine import SQLITE_BEGIN
from computewatch.serverdb.errors import IngestConflict, InvalidUpload
from computewatch.serverdb.lineage_ingest import on_stored
from computewatch.serverdb.models import Run, RunChange, RunDoc, RunSeries, RunTag
from computewatch.serverdb.node_keys import (
    SignatureRefused,
    check_upload,
    record_signature,
    refusal,
)
from computewatch.upload.protocol import (
    MAX_POINTS,
    MAX_RUNS_PER_BATCH,
    PROTOCOL_VERSION,
    IngestBatch,
    IngestResult,
    RunUpload,
    SeriesUpload,
)

__all__ = [
    "NOTIFY_CHANNEL",
    "SUPPORTED_PROTOCOLS",
    "ProtocolMismatch",
    "denormalize",
    "parse_batch",
    "protocol_mismatch",
    "store_batch",
]

SUPPORTED_PROTOCOLS: Final = (PROTOCOL_VERSION,)
NOTIFY_CHANNEL: Final = "computewatch_runs"
"""PostgreSQL channel a NOTIFY is sent on for each stored upload (payload: the change as JSON)."""

MAX_DEPTH: Final = 64
MAX_SERIES_PER_RUN: Final = 500
_RUN_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")
_MAX_INT: Final = 2**63 - 1


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


def _check_doc(value: Any, where: str, depth: int = 0) -> None:
    """A JSON document a database can hold: no NUL character, no lone surrogate, bounded depth."""
    if depth > MAX_DEPTH:
        raise InvalidUpload(f"{where}: nested deeper than {MAX_DEPTH} levels")
    if isinstance(value, str):
        _check_str(value, where)
    elif isinstance(value, dict):
        for k, v in value.items():
            _check_str(k, where)
            _check_doc(v, f"{where}.{k}" if len(where) < 200 else where, depth + 1)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _check_doc(v, f"{where}[{i}]" if len(where) < 200 else where, depth + 1)


def _check_str(value: str, where: str) -> None:
    if "\x00" in value:
        raise InvalidUpload(f"{where}: a string holds a NUL character")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidUpload(f"{where}: a string holds a lone surrogate (not UTF-8)") from None


def _str(doc: Mapping[str, Any], key: str, where: str, *, max_len: int, null: bool = False) -> Any:
    if key not in doc:
        raise InvalidUpload(f"{where}.{key}: missing")
    v = doc[key]
    if v is None and null:
        return None
    if not isinstance(v, str):
        raise InvalidUpload(f"{where}.{key}: expected a string{' or null' if null else ''}")
    if len(v) > max_len:
        raise InvalidUpload(f"{where}.{key}: longer than {max_len} characters")
    _check_str(v, f"{where}.{key}")
    return v


def _int(doc: Mapping[str, Any], key: str, where: str, *, low: int, null: bool = False) -> Any:
    if key not in doc:
        raise InvalidUpload(f"{where}.{key}: missing")
    v = doc[key]
    if v is None and null:
        return None
    if not isinstance(v, int) or isinstance(v, bool):
        raise InvalidUpload(f"{where}.{key}: expected a whole number{' or null' if null else ''}")
    if not low <= v <= _MAX_INT:
        raise InvalidUpload(f"{where}.{key}: out of range ({low} to {_MAX_INT})")
    return v


def _time(doc: Mapping[str, Any], key: str, where: str, *, null: bool = False) -> Any:
    if key not in doc:
        raise InvalidUpload(f"{where}.{key}: missing")
    v = doc[key]
    if v is None and null:
        return None
    if not isinstance(v, int | float) or isinstance(v, bool):
        raise InvalidUpload(f"{where}.{key}: expected Unix seconds{' or null' if null else ''}")
    if not 0 <= v < 1e11:
        raise InvalidUpload(f"{where}.{key}: not a plausible Unix time ({v})")
    return float(v)


def _str_map(doc: Mapping[str, Any], key: str, where: str) -> dict[str, str]:
    v = doc.get(key)
    if not isinstance(v, dict):
        raise InvalidUpload(f"{where}.{key}: expected an object of strings")
    if len(v) > 200:
        raise InvalidUpload(f"{where}.{key}: more than 200 entries")
    for k, x in v.items():
        if not isinstance(x, str):
            raise InvalidUpload(f"{where}.{key}.{k}: expected a string")
        if not k or len(k) > 200 or len(x) > 1000:
            raise InvalidUpload(f"{where}.{key}.{k}: keys 1 to 200 characters, values 1000 at most")
        _check_str(k, f"{where}.{key}")
        _check_str(x, f"{where}.{key}.{k}")
    return cast(dict[str, str], v)


def _series(v: Any, where: str) -> SeriesUpload:
    if not isinstance(v, dict):
        raise InvalidUpload(f"{where}: expected an object")
    name = _str(v, "name", where, max_len=200)
    labels = _str_map(v, "labels", where)
    bucket = v.get("bucket_seconds")
    if not isinstance(bucket, int | float) or isinstance(bucket, bool) or not 0 <= bucket < 1e9:
        raise InvalidUpload(f"{where}.bucket_seconds: expected a number of seconds >= 0")
    points = v.get("points")
    if not isinstance(points, list):
        raise InvalidUpload(f"{where}.points: expected a list of [t, min, mean, max]")
    if len(points) > MAX_POINTS:
        raise InvalidUpload(f"{where}.points: more than {MAX_POINTS} points")
    for i, p in enumerate(points):
        if (
            not isinstance(p, list)
            or len(p) != 4
            or not all(
                isinstance(x, int | float) and not isinstance(x, bool) and abs(x) < 1e300 for x in p
            )
        ):
            raise InvalidUpload(f"{where}.points[{i}]: expected [t, min, mean, max] numbers")
    return {
        "name": name,
        "labels": labels,
        "bucket_seconds": float(bucket),
        "points": cast(list[list[float]], points),
    }


def _run(v: Any, where: str) -> RunUpload:
    if not isinstance(v, dict):
        raise InvalidUpload(f"{where}: expected an object")
    run_id = _str(v, "id", where, max_len=64)
    if not _RUN_ID.match(run_id):
        raise InvalidUpload(f"{where}.id: letters, digits, '_', '-', '.', ':' only")
    seq = _int(v, "seq", where, low=1)
    final = v.get("final")
    if not isinstance(final, bool):
        raise InvalidUpload(f"{where}.final: expected true or false")
    status = _str(v, "status", where, max_len=32)
    if not status:
        raise InvalidUpload(f"{where}.status: empty")
    command = v.get("command")
    if not isinstance(command, list) or not all(isinstance(a, str) for a in command):
        raise InvalidUpload(f"{where}.command: expected a list of strings")
    for a in command:
        _check_str(a, f"{where}.command")
    summary = v.get("summary", ...)
    if summary is ...:
        raise InvalidUpload(f"{where}.summary: missing")
    if summary is not None and not isinstance(summary, dict):
        raise InvalidUpload(f"{where}.summary: expected an object or null")
    _check_doc(summary, f"{where}.summary")
    meta = v.get("meta")
    if not isinstance(meta, dict):
        raise InvalidUpload(f"{where}.meta: expected an object")
    _check_doc(meta, f"{where}.meta")
    series = v.get("series")
    if not isinstance(series, list):
        raise InvalidUpload(f"{where}.series: expected a list")
    if len(series) > MAX_SERIES_PER_RUN:
        raise InvalidUpload(f"{where}.series: more than {MAX_SERIES_PER_RUN} series")
    exit_code = _int(v, "exit_code", where, low=-(2**31), null=True)
    if exit_code is not None and exit_code > 2**31:
        raise InvalidUpload(f"{where}.exit_code: out of range")
    started = _time(v, "started_at", where)
    ended = _time(v, "ended_at", where, null=True)
    signed = v.get("signed_report")
    if signed is not None:
        _check_doc(signed, f"{where}.signed_report")
        bad = shape_problem(signed)
        if bad is not None:
            raise InvalidUpload(f"{where}.signed_report: {bad}")
    upload: RunUpload = {
        "id": run_id,
        "seq": seq,
        "final": final,
        "name": _str(v, "name", where, max_len=500, null=True),
        "status": status,
        "exit_code": exit_code,
        "started_at": started,
        "ended_at": ended,
        "host": _str(v, "host", where, max_len=255),
        "user": _str(v, "user", where, max_len=200),
        "project": _str(v, "project", where, max_len=200, null=True),
        "tags": _str_map(v, "tags", where),
        "command": cast(list[str], command),
        "summary": summary,
        "meta": meta,
        "series": [_series(s, f"{where}.series[{i}]") for i, s in enumerate(series)],
    }
    if signed is not None:
        upload["signed_report"] = signed
    return upload


def parse_batch(body: bytes | str) -> IngestBatch:
    """The request body as a batch. Raises :class:`InvalidUpload` (malformed JSON, a field of
    the wrong type or out of range) or, for a protocol the server does not speak, returns the
    batch with its ``protocol`` as sent: check it with :func:`protocol_mismatch` first."""
    try:
        doc = json.loads(body, parse_constant=_reject_constant)
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
    runs = doc.get("runs")
    if not isinstance(runs, list):
        raise InvalidUpload("runs: expected a list")
    if len(runs) > MAX_RUNS_PER_BATCH:
        raise InvalidUpload(f"runs: more than {MAX_RUNS_PER_BATCH} runs in one batch")
    return {
        "protocol": doc["protocol"],
        "runs": [_run(r, f"runs[{i}]") for i, r in enumerate(runs)],
    }


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


def _apply(row: Run, team: str, run: RunUpload, now: float) -> dict[str, Any] | None:
    """Fill ``row`` from ``run``; the summary to keep (its command redacted again)."""
    d = denormalize(run, now)
    row.team = team
    row.user = run["user"]
    row.project = run["project"]
    row.host = run["host"]
    row.name = run["name"]
    row.status = run["status"]
    row.exit_code = run["exit_code"]
    row.started_at = run["started_at"]
    row.started_day = _day(run["started_at"])
    row.ended_at = run["ended_at"]
    row.duration_seconds = d.duration_seconds
    row.gpu_model = d.gpu_model
    row.gpu_count = d.gpu_count
    row.gpu_hours = d.gpu_hours
    row.idle_gpu_hours = d.idle_gpu_hours
    row.gpu_utilization = d.gpu_utilization
    row.mfu = d.mfu
    row.cpu_hours = d.cpu_hours
    row.cpu_method = d.cpu_method
    row.kwh, row.kwh_low, row.kwh_high, row.kwh_method = d.kwh
    row.cost_usd, row.cost_low, row.cost_high, row.cost_method = d.cost
    row.co2e_kg, row.co2e_low, row.co2e_high, row.co2e_method = d.co2e_kg
    row.seq = run["seq"]
    row.final = run["final"]
    row.updated_at = now
    row.command = redact_argv(run["command"])
    row.tags = redact_mapping(run["tags"])
    summary = run["summary"]
    if summary is not None and isinstance(summary.get("command"), list):
        summary = {
            **summary,
            "command": redact_argv([str(a) for a in summary["command"]]),
        }
    return summary


RUN_LOCK_CLASS: Final = 7261
"""First key of the transaction-scoped advisory locks an ingest takes on its run ids."""


def _lock_run_ids(session: Session, ids: list[str]) -> None:
    """Take, before anything else and in one global order, a lock per run id of the batch
    (PostgreSQL advisory locks, held until commit). Two batches sharing runs then wait for each
    other instead of deadlocking, whether a run is new (an insert) or not, and whatever the
    transaction locks later (the ledger's lock)."""
    keys = sorted({zlib.crc32(i.encode()) - 2**31 for i in ids})  # int4 range
    session.execute(
        text("SELECT pg_advisory_xact_lock(:cls, k) FROM unnest(CAST(:keys AS integer[])) AS k"),
        {"cls": RUN_LOCK_CLASS, "keys": keys},
    )


def store_batch(
    session: Session, team: str, batch: IngestBatch, *, require_signed: bool = False
) -> list[IngestResult]:
    """Store every run of ``batch`` for ``team`` in one transaction (all or nothing) and
    commit. Raises :class:`IngestConflict` when a run id belongs to another team, and
    :class:`SignatureRefused` for a run whose signed report is invalid (or, with
    ``require_signed``, that is unsigned or signed by a key not registered for ``team``);
    nothing is stored then."""
    now = time.time()
    results: list[IngestResult] = []
    postgres = session.get_bind().dialect.name == "postgresql"
    if not postgres:
        # SQLite: take the write lock before reading, so that another process cannot store the
        # same run between our read of its seq and our write (engine.py: BEGIN IMMEDIATE).
        session.connection(execution_options={SQLITE_BEGIN: "IMMEDIATE"})
    try:
        if postgres and batch["runs"]:
            _lock_run_ids(session, [r["id"] for r in batch["runs"]])
        for run in batch["runs"]:
            q = select(Run).where(Run.id == run["id"])
            if postgres:
                q = q.with_for_update()
            row = session.scalars(q).first()
            if row is not None and row.team != team:
                raise IngestConflict(f"run {run['id']} belongs to another team")
            signature = check_upload(session, team, run)
            refused = refusal(run["id"], signature, require_signed=require_signed)
            if refused is not None:
                raise SignatureRefused(refused)
            if row is not None and row.seq >= run["seq"]:
                results.append({"id": run["id"], "seq": run["seq"], "stored": False})
                continue
            if row is None:
                row = Run(id=run["id"])
                summary = _apply(row, team, run, now)
                session.add(row)
                session.flush()
                session.add(RunDoc(run_id=run["id"], summary=summary, meta=run["meta"]))
            else:
                summary = _apply(row, team, run, now)
                session.execute(
                    update(RunDoc)
                    .where(RunDoc.run_id == run["id"])
                    .values(summary=summary, meta=run["meta"])
                )
                session.execute(delete(RunTag).where(RunTag.run_id == run["id"]))
                session.execute(delete(RunSeries).where(RunSeries.run_id == run["id"]))
            session.flush()
            tags = cast(dict[str, str], row.tags)
            session.add_all(RunTag(run_id=run["id"], key=k, value=v) for k, v in tags.items())
            session.add_all(
                RunSeries(
                    run_id=run["id"],
                    name=s["name"],
                    labels=dict(s["labels"]),
                    bucket_seconds=s["bucket_seconds"],
                    points=s["points"],
                )
                for s in run["series"]
            )
            change = RunChange(
                run_id=run["id"],
                team=team,
                seq=run["seq"],
                status=run["status"],
                final=run["final"],
                at=now,
            )
            session.add(change)
            record_signature(session, run["id"], signature)
            session.flush()
            # governance: model compute, ledger (same transaction)
            on_stored(session, team, run, signature=signature.status)
            if postgres:
                payload = json_dumps(
                    {
                        "change": change.id,
                        "id": run["id"],
                        "team": team,
                        "seq": run["seq"],
                        "status": run["status"],
                        "final": run["final"],
                    }
                )
                session.execute(
                    text("SELECT pg_notify(:channel, :payload)"),
                    {"channel": NOTIFY_CHANNEL, "payload": payload},
                )
            results.append({"id": run["id"], "seq": run["seq"], "stored": True})
        session.commit()
    except BaseException:
        session.rollback()
        raise
    return results
