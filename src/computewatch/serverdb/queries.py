"""Typed queries over the server database, shared by the API and the web pages.

Every query takes the teams its caller may see (``None``: every team, an admin) and never
returns a run of another team. Times are Unix seconds; figures are in the units their names
say (hours, kWh, USD, kg CO2e; utilization and MFU as 0-1 ratios).
"""

from __future__ import annotations

import base64
import binascii
import datetime
import json
from dataclasses import dataclass, field
from typing import Any, Final, Literal, cast, get_args

from sqlalchemy import (
    ColumnElement,
    Select,
    and_,
    case,
    exists,
    false,
    func,
    or_,
    select,
)
from sqlalchemy.orm import Session

from computewatch.serverdb.errors import ServerDbError
from computewatch.serverdb.governance_models import ModelRun
from computewatch.serverdb.models import Run, RunDoc, RunTag
from computewatch.serverdb.series import read_series

__all__ = [
    "MAX_LIMIT",
    "BadQuery",
    "Bucket",
    "FigureSum",
    "RunDetail",
    "RunFilter",
    "RunPage",
    "RunRow",
    "SeriesRow",
    "SortKey",
    "UsageBy",
    "UsageRow",
    "get_run",
    "list_runs",
    "running_now",
    "usage",
    "visible_teams",
]

MAX_LIMIT: Final = 500
SortKey = Literal["started_at", "duration", "energy", "cost", "gpu_hours", "name"]
UsageBy = Literal["team", "user", "project", "gpu-model"]
Bucket = Literal["day", "week", "month"]
SORT_KEYS: Final[tuple[str, ...]] = get_args(SortKey)
USAGE_BY: Final[tuple[str, ...]] = get_args(UsageBy)
BUCKETS: Final[tuple[str, ...]] = get_args(Bucket)


class BadQuery(ServerDbError):
    """A filter, sort, cursor or limit the queries cannot take (the API answers 400)."""


@dataclass(frozen=True)
class RunFilter:
    """Which runs: ``teams`` is what the caller may see (None: all); the others narrow it."""

    teams: frozenset[str] | None = None
    team: str | None = None
    user: str | None = None
    project: str | None = None
    tags: tuple[tuple[str, str], ...] = ()
    status: str | None = None
    since: float | None = None
    """Runs started at or after (Unix seconds)."""
    until: float | None = None
    """Runs started before."""
    text: str | None = None
    """Case-insensitive substring of the run's name."""


@dataclass(frozen=True)
class RunRow:
    """One run as a list shows it."""

    id: str
    team: str
    user: str
    project: str | None
    host: str
    name: str | None
    status: str
    exit_code: int | None
    started_at: float
    ended_at: float | None
    duration_seconds: float | None
    gpu_model: str | None
    gpu_count: int
    gpu_hours: float
    idle_gpu_hours: float | None
    gpu_utilization: float | None
    mfu: float | None
    cpu_hours: float | None
    kwh: float | None
    cost_usd: float | None
    co2e_kg: float | None
    seq: int
    final: bool
    updated_at: float
    tags: dict[str, str]


@dataclass(frozen=True)
class RunPage:
    runs: list[RunRow]
    next_cursor: str | None
    """Pass it as ``cursor`` for the next page; None on the last page."""


@dataclass(frozen=True)
class SeriesRow:
    name: str
    labels: dict[str, str]
    bucket_seconds: float
    points: list[list[float]]


@dataclass(frozen=True)
class RunDetail:
    run: RunRow
    command: list[str]
    summary: dict[str, Any] | None
    """The run's summary document (``computewatch show --json``), diagnosis included."""
    meta: dict[str, Any]
    """Documents recorded with the run, by kind (``config``, ``environment``, ...)."""
    series: list[SeriesRow] = field(default_factory=list)


@dataclass(frozen=True)
class FigureSum:
    """A summed figure: ``value`` over the runs that had one (``runs_with_value`` of them),
    ``low``/``high`` the sums of their ranges, ``methods`` the methods seen, most runs first."""

    value: float | None
    low: float | None
    high: float | None
    methods: list[str]
    runs_with_value: int


@dataclass(frozen=True)
class UsageRow:
    key: str | None
    """The team, user, project or GPU model (None: runs without a project or GPU)."""
    bucket: str | None
    """The period's first day (YYYY-MM-DD, UTC) when bucketed, else None."""
    runs: int
    gpu_hours: FigureSum
    idle_gpu_hours: FigureSum
    cpu_hours: FigureSum
    kwh: FigureSum
    cost_usd: FigureSum
    co2e_kg: FigureSum
    mean_utilization: float | None
    """GPU-hour-weighted mean GPU utilization (0-1) of the runs that reported it."""
    mean_mfu: float | None
    """GPU-hour-weighted mean MFU (0-1) of the runs whose FLOPs were counted."""


# -- list ------------------------------------------------------------------------------------------


def _row(r: Run) -> RunRow:
    return RunRow(
        id=r.id,
        team=r.team,
        user=r.user,
        project=r.project,
        host=r.host,
        name=r.name,
        status=r.status,
        exit_code=r.exit_code,
        started_at=r.started_at,
        ended_at=r.ended_at,
        duration_seconds=r.duration_seconds,
        gpu_model=r.gpu_model,
        gpu_count=r.gpu_count,
        gpu_hours=r.gpu_hours,
        idle_gpu_hours=r.idle_gpu_hours,
        gpu_utilization=r.gpu_utilization,
        mfu=r.mfu,
        cpu_hours=r.cpu_hours,
        kwh=r.kwh,
        cost_usd=r.cost_usd,
        co2e_kg=r.co2e_kg,
        seq=r.seq,
        final=r.final,
        updated_at=r.updated_at,
        tags=cast(dict[str, str], r.tags),
    )


def _conditions(f: RunFilter) -> list[ColumnElement[bool]]:
    c: list[ColumnElement[bool]] = []
    if f.teams is not None:
        c.append(Run.team.in_(sorted(f.teams)) if f.teams else false())
    if f.team is not None:
        c.append(Run.team == f.team)
    if f.user is not None:
        c.append(Run.user == f.user)
    if f.project is not None:
        c.append(Run.project == f.project)
    if f.status is not None:
        c.append(Run.status == f.status)
    if f.since is not None:
        c.append(Run.started_at >= f.since)
    if f.until is not None:
        c.append(Run.started_at < f.until)
    if f.text:
        pattern = (
            "%" + f.text.lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        )
        c.append(func.lower(Run.name).like(pattern, escape="\\"))
    for key, value in f.tags:
        c.append(exists().where(RunTag.run_id == Run.id, RunTag.key == key, RunTag.value == value))
    return c


_NULL_LOW = -1.0  # nullable numbers sort as this (below any real figure)


def _sort_column(sort: str) -> Any:
    if sort == "started_at":
        return Run.started_at
    if sort == "name":
        return func.coalesce(Run.name, "")
    column = {
        "duration": Run.duration_seconds,
        "energy": Run.kwh,
        "cost": Run.cost_usd,
        "gpu_hours": Run.gpu_hours,
    }[sort]
    return func.coalesce(column, _NULL_LOW)


def _sort_value(r: Run, sort: str) -> Any:
    if sort == "started_at":
        return r.started_at
    if sort == "name":
        return r.name or ""
    v = {
        "duration": r.duration_seconds,
        "energy": r.kwh,
        "cost": r.cost_usd,
        "gpu_hours": r.gpu_hours,
    }[sort]
    return _NULL_LOW if v is None else v


def _encode_cursor(sort: str, order: str, value: Any, run_id: str) -> str:
    raw = json.dumps([sort, order, value, run_id], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_cursor(cursor: str, sort: str, order: str) -> tuple[Any, str]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        s, o, value, run_id = json.loads(raw)
    except (ValueError, TypeError, binascii.Error):
        raise BadQuery("cursor: not a cursor this server gave") from None
    if s != sort or o != order:
        raise BadQuery("cursor: it was given for another sort order")
    if not isinstance(run_id, str):
        raise BadQuery("cursor: not a cursor this server gave")
    want_str = sort == "name"
    if want_str != isinstance(value, str) or (
        not want_str and (isinstance(value, bool) or not isinstance(value, int | float))
    ):
        raise BadQuery("cursor: not a cursor this server gave")
    return value, run_id


def list_runs(
    session: Session,
    flt: RunFilter,
    *,
    sort: str = "started_at",
    order: str = "desc",
    limit: int = 50,
    cursor: str | None = None,
) -> RunPage:
    """One page of runs matching ``flt``, sorted by ``sort`` (then by id), ``limit`` at most
    (1 to :data:`MAX_LIMIT`); ``cursor`` continues where the previous page ended (keyset
    pagination: stable while runs are added)."""
    if sort not in SORT_KEYS:
        raise BadQuery(f"sort: one of {', '.join(SORT_KEYS)}, not {sort!r}")
    if order not in ("asc", "desc"):
        raise BadQuery(f"order: asc or desc, not {order!r}")
    if not 1 <= limit <= MAX_LIMIT:
        raise BadQuery(f"limit: 1 to {MAX_LIMIT}, not {limit}")
    col = _sort_column(sort)
    q: Select[Run] = select(Run).where(*_conditions(flt))
    if cursor:
        value, run_id = _decode_cursor(cursor, sort, order)
        if order == "desc":
            q = q.where(or_(col < value, and_(col == value, Run.id < run_id)))
        else:
            q = q.where(or_(col > value, and_(col == value, Run.id > run_id)))
    if order == "desc":
        q = q.order_by(col.desc(), Run.id.desc())
    else:
        q = q.order_by(col.asc(), Run.id.asc())
    rows = list(session.scalars(q.limit(limit + 1)))
    more = len(rows) > limit
    rows = rows[:limit]
    next_cursor = (
        _encode_cursor(sort, order, _sort_value(rows[-1], sort), rows[-1].id)
        if more and rows
        else None
    )
    return RunPage([_row(r) for r in rows], next_cursor)


def get_run(session: Session, run_id: str, teams: frozenset[str] | None) -> RunDetail | None:
    """The run ``run_id`` with its summary, documents and series; None when there is none the
    caller may see."""
    r = session.get(Run, run_id)
    if r is None or (teams is not None and r.team not in teams):
        return None
    series = [
        SeriesRow(s["name"], dict(s["labels"]), s["bucket_seconds"], s["points"])
        for s in read_series(session, [run_id])[run_id]
    ]
    doc = session.get(RunDoc, run_id)
    summary = doc.summary if doc is not None else None
    meta = dict(doc.meta) if doc is not None else {}
    return RunDetail(_row(r), list(r.command), summary, meta, series)


def running_now(
    session: Session, teams: frozenset[str] | None, *, limit: int = 500
) -> list[RunRow]:
    """Runs whose last upload says ``running`` (not final), newest first."""
    q = select(Run).where(Run.status == "running", Run.final.is_(False))
    if teams is not None:
        q = q.where(Run.team.in_(sorted(teams)) if teams else false())
    q = q.order_by(Run.started_at.desc(), Run.id.desc()).limit(limit)
    return [_row(r) for r in session.scalars(q)]


# -- usage -----------------------------------------------------------------------------------------


def _bucket_start(day: str, bucket: str) -> str:
    d = datetime.date.fromisoformat(day)
    if bucket == "week":
        d -= datetime.timedelta(days=d.weekday())  # ISO weeks start on Monday
    elif bucket == "month":
        d = d.replace(day=1)
    return d.isoformat()


_FIGURES: Final = ("gpu_hours", "idle_gpu_hours", "cpu_hours", "kwh", "cost_usd", "co2e_kg")


@dataclass
class _Acc:
    runs: int = 0
    sums: dict[str, list[float]] = field(default_factory=dict)
    methods: dict[str, dict[str, int]] = field(default_factory=dict)
    util_weighted: float = 0.0
    util_weight: float = 0.0
    mfu_weighted: float = 0.0
    mfu_weight: float = 0.0

    def figure(self, name: str) -> FigureSum:
        value, low, high, n = self.sums.get(name, [0.0, 0.0, 0.0, 0.0])
        methods = self.methods.get(name, {})
        ordered = sorted(methods, key=lambda m: (-methods[m], m))
        if n == 0:
            return FigureSum(None, None, None, ordered, 0)
        return FigureSum(value, low, high, ordered, int(n))


def usage(
    session: Session,
    *,
    by: str,
    teams: frozenset[str] | None,
    since: float | None = None,
    until: float | None = None,
    bucket: str | None = None,
) -> list[UsageRow]:
    """Usage of the runs started in [since, until), grouped by ``by`` (team, user, project,
    gpu-model) and, with ``bucket``, by the day, ISO week or month (UTC) they started in.
    Each figure sums the runs' values and their low/high ranges and lists their methods."""
    if by not in USAGE_BY:
        raise BadQuery(f"by: one of {', '.join(USAGE_BY)}, not {by!r}")
    if bucket is not None and bucket not in BUCKETS:
        raise BadQuery(f"bucket: one of {', '.join(BUCKETS)}, not {bucket!r}")
    key = {
        "team": Run.team,
        "user": Run.user,
        "project": Run.project,
        "gpu-model": Run.gpu_model,
    }[by]
    flt = RunFilter(teams=teams, since=since, until=until)
    groups: list[Any] = [key]
    if bucket is not None:
        groups.append(Run.started_day)

    def count_of(col: Any) -> Any:
        return func.sum(case((col.is_(None), 0), else_=1))

    columns: list[Any] = [*groups, func.count()]
    value_cols = {
        "gpu_hours": (Run.gpu_hours, Run.gpu_hours, Run.gpu_hours),
        "idle_gpu_hours": (Run.idle_gpu_hours, Run.idle_gpu_hours, Run.idle_gpu_hours),
        "cpu_hours": (Run.cpu_hours, Run.cpu_hours, Run.cpu_hours),
        "kwh": (Run.kwh, Run.kwh_low, Run.kwh_high),
        "cost_usd": (Run.cost_usd, Run.cost_low, Run.cost_high),
        "co2e_kg": (Run.co2e_kg, Run.co2e_low, Run.co2e_high),
    }
    for name in _FIGURES:
        v, lo, hi = value_cols[name]
        columns += [
            func.sum(v),
            func.sum(func.coalesce(lo, v)),
            func.sum(func.coalesce(hi, v)),
            count_of(v),
        ]
    util_w = case((Run.gpu_utilization.is_(None), 0.0), else_=Run.gpu_hours)
    mfu_w = case((Run.mfu.is_(None), 0.0), else_=Run.gpu_hours)
    columns += [
        func.sum(Run.gpu_utilization * util_w),
        func.sum(util_w),
        func.sum(Run.mfu * mfu_w),
        func.sum(mfu_w),
    ]
    conds = _conditions(flt)
    q = select(*columns).where(*conds).group_by(*groups)
    accs: dict[tuple[str | None, str | None], _Acc] = {}
    for row in session.execute(q):
        k: str | None = row[0]
        b = _bucket_start(row[1], bucket) if bucket is not None else None
        acc = accs.setdefault((k, b), _Acc())
        i = len(groups)
        acc.runs += int(row[i])
        i += 1
        for name in _FIGURES:
            v, lo, hi, n = row[i : i + 4]
            i += 4
            s = acc.sums.setdefault(name, [0.0, 0.0, 0.0, 0.0])
            s[0] += float(v or 0.0)
            s[1] += float(lo or 0.0)
            s[2] += float(hi or 0.0)
            s[3] += float(n or 0)
        uw, w, mw, mwt = row[i : i + 4]
        acc.util_weighted += float(uw or 0.0)
        acc.util_weight += float(w or 0.0)
        acc.mfu_weighted += float(mw or 0.0)
        acc.mfu_weight += float(mwt or 0.0)
    # The methods of each figure, counted per group: one scan, grouped on the four method
    # columns (a few distinct values each).
    method_cols = {
        "cpu_hours": Run.cpu_method,
        "kwh": Run.kwh_method,
        "cost_usd": Run.cost_method,
        "co2e_kg": Run.co2e_method,
    }
    mcols = list(method_cols.values())
    mq = select(*groups, *mcols, func.count()).where(*conds).group_by(*groups, *mcols)
    for row in session.execute(mq):
        b = _bucket_start(row[1], bucket) if bucket is not None else None
        found = accs.get((row[0], b))
        if found is None:
            continue
        n = int(row[-1])
        for j, name in enumerate(method_cols):
            method = row[len(groups) + j]
            if method is not None:
                m = found.methods.setdefault(name, {})
                m[method] = m.get(method, 0) + n
    for acc in accs.values():
        if acc.sums.get("gpu_hours", [0, 0, 0, 0])[3]:
            acc.methods["gpu_hours"] = {"allocated GPUs x wall time": acc.runs}
        if acc.sums.get("idle_gpu_hours", [0, 0, 0, 0])[3]:
            acc.methods["idle_gpu_hours"] = {"GPU-hours x (1 - mean utilization)": acc.runs}
    rows = [
        UsageRow(
            key=k,
            bucket=b,
            runs=acc.runs,
            gpu_hours=acc.figure("gpu_hours"),
            idle_gpu_hours=acc.figure("idle_gpu_hours"),
            cpu_hours=acc.figure("cpu_hours"),
            kwh=acc.figure("kwh"),
            cost_usd=acc.figure("cost_usd"),
            co2e_kg=acc.figure("co2e_kg"),
            mean_utilization=acc.util_weighted / acc.util_weight if acc.util_weight else None,
            mean_mfu=acc.mfu_weighted / acc.mfu_weight if acc.mfu_weight else None,
        )
        for (k, b), acc in accs.items()
    ]
    rows.sort(key=lambda r: (r.bucket or "", -(r.gpu_hours.value or 0.0), r.key or ""))
    return rows


def visible_teams(session: Session, teams: frozenset[str] | None) -> list[str]:
    """The teams with runs the caller may see, sorted."""
    q = select(Run.team).distinct()
    if teams is not None:
        q = q.where(Run.team.in_(sorted(teams)) if teams else false())
    return sorted(t for (t,) in session.execute(q))


@dataclass(frozen=True)
class LineageRun:
    """One run of a training (a model's declared runs, or a job's), with its figures and the
    summary's ``diagnosis.goodput`` record (None when its upload has none) for goodput."""

    run_id: str
    name: str | None
    status: str
    started_at: float
    ended_at: float | None
    duration_seconds: float | None
    gpu_count: int
    kwh: float | None
    cost_usd: float | None
    goodput: dict[str, Any] | None


def lineage_runs(
    session: Session,
    teams: frozenset[str] | None,
    *,
    model: str | None = None,
    job: str | None = None,
) -> list[LineageRun]:
    """The runs the caller may see that declared ``model`` (``run --model``), or carry the tag
    ``job=JOB``, oldest first. Reads the summaries of those runs only."""
    if model is not None:
        ids = select(ModelRun.run_id).where(ModelRun.model == model)
    elif job is not None:
        ids = select(RunTag.run_id).where(RunTag.key == "job", RunTag.value == job)
    else:
        raise BadQuery("give a model or a job")
    q = select(Run).where(Run.id.in_(ids)).order_by(Run.started_at, Run.id)
    if teams is not None:
        q = q.where(Run.team.in_(teams))
    out = []
    for r in session.scalars(q):
        doc = session.get(RunDoc, r.id)
        summary = doc.summary if doc is not None else None
        diag = summary.get("diagnosis") if isinstance(summary, dict) else None
        record = diag.get("goodput") if isinstance(diag, dict) else None
        out.append(
            LineageRun(
                r.id,
                r.name,
                r.status,
                r.started_at,
                r.ended_at,
                r.duration_seconds,
                r.gpu_count,
                r.kwh,
                r.cost_usd,
                record if isinstance(record, dict) else None,
            )
        )
    return out


def declared_models(session: Session, teams: frozenset[str] | None) -> list[str]:
    """The models declared by the runs the caller may see, by name."""
    q = select(ModelRun.model).distinct().order_by(ModelRun.model)
    if teams is not None:
        q = q.where(ModelRun.team.in_(teams))
    return list(session.scalars(q))
