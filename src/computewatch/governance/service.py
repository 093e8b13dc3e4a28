"""Governance's unit of work: the one place that appends governance entries to the ledger.

- :func:`on_run_stored` (the ingest's hook, in its transaction): the run's ledger entry and
  model compute (computewatch.serverdb.lineage_ingest), then, for a run that declares a model,
  finished or live, the tiers judged again (:func:`judge`);
- :func:`upkeep` (the server's upkeep, every few minutes): pruning under the retention policy,
  the tiers in force recorded, running runs and forecasts that change a tier's state recorded,
  tiers judged, obligations opened, reminders due;
- :func:`mark_done`: an obligation fulfilled;
- :func:`grant`, :func:`revoke`: a team's leave to name another team's model as its runs' base
  model (a model is ``team/name``: a run names its own team's models only).

Everything else reads: :func:`status` is the replay of the log (computewatch.governance.replay),
so the status an admin sees is what an auditor recomputes from an export; reading it writes
nothing. The ``obligations`` table is a projection of the log kept for the reminders and for
``UNIQUE (model, tier) WHERE state = 'open'``, which two processes judging at once cannot
break; ``model_runs`` is the live view (running runs' figures so far) the service judges from.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, func, select, text
from sqlalchemy.orm import Session

from computewatch.config import ConfigError, load_config
from computewatch.errors import ComputewatchError
from computewatch.governance.replay import (
    DONE,
    GRANT,
    JUDGED,
    OPENED,
    PRUNE,
    REVOKE,
    RUNNING,
    TIER,
    TIERS,
    Replay,
    iso,
    running_json,
    tier_json,
)
from computewatch.governance.status import (
    ModelStatus,
    ObligationView,
    find_model,
    load_models,
    run_of,
    view_of,
)
from computewatch.governance.tiers import DEFAULT_TIERS, Tier, TierStatus, parse_tiers
from computewatch.ledger.jcs import loads as jcs_loads
from computewatch.ledger.log import LogEntry
from computewatch.ledger.reports import SignatureStatus
from computewatch.lineage.compute import (
    MODEL_SEP,
    DeclarationRefused,
    GovernanceError,
    RunCompute,
    lineage_cycle,
    qualify,
    team_of,
)
from computewatch.serverdb.engine import SQLITE_BEGIN
from computewatch.serverdb.governance_models import (
    LedgerEntryRow,
    ModelGrant,
    ModelRun,
    Obligation,
)
from computewatch.serverdb.ledger_store import (
    LEDGER_LOCK,
    append,
    entries,
    prune_before,
    size,
    start,
    thin_heads,
)
from computewatch.serverdb.lineage_ingest import on_stored
from computewatch.serverdb.tokens import validate_team
from computewatch.upload.protocol import RunUpload

__all__ = [
    "Grant",
    "check_declaration",
    "grant",
    "grants",
    "judge",
    "mark_done",
    "on_run_stored",
    "projection_problems",
    "replay_log",
    "revoke",
    "server_tiers",
    "status",
    "upkeep",
]


@functools.cache
def count_simulated() -> bool:
    """``[governance] count_simulated`` of the server's configuration (default false)."""
    try:
        return load_config().governance_count_simulated
    except ConfigError:
        return False


@functools.cache
def server_tiers() -> tuple[Tier, ...]:
    """The server's tiers: its configuration's ``[governance] tiers`` over the defaults."""
    try:
        config = load_config()
    except ConfigError:
        return DEFAULT_TIERS
    if not config.governance_tiers:
        return DEFAULT_TIERS
    return parse_tiers(config.governance_tiers, str(config.path))


def _lock(session: Session) -> None:
    """Judge under the ledger's lock (PostgreSQL; SQLite: the write transaction's), so that two
    processes never judge from the same log and both append."""
    if session.get_bind().dialect.name == "postgresql":
        session.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": LEDGER_LOCK})


def immediate(session: Session) -> None:
    """On SQLite, take the write lock at BEGIN (before reading the log it appends to)."""
    if session.get_bind().dialect.name == "sqlite":
        session.connection(execution_options={SQLITE_BEGIN: "IMMEDIATE"})


# -- the replay of a database's log, cached per database -----------------------------------------


@dataclass
class _Cached:
    replay: Replay
    lock: threading.Lock


_CACHE: dict[str, _Cached] = {}
_CACHE_LOCK = threading.Lock()


def _prune_entry(session: Session, first: int) -> Mapping[str, Any] | None:
    """The prune entry that explains why the log starts at ``first`` (its governance
    snapshot is where a replay of the kept entries starts)."""
    if first <= 1:
        return None
    rows = session.scalars(
        select(LedgerEntryRow.body)
        .where(LedgerEntryRow.kind == PRUNE)
        .order_by(LedgerEntryRow.seq.desc())
    )
    for body in rows:
        doc = jcs_loads(body)
        if isinstance(doc, dict) and doc.get("first_seq") == first:
            return doc if isinstance(doc, dict) else None
    return None


def fresh_replay(first: int, prune: Mapping[str, Any] | None) -> Replay:
    """An empty replay of a log starting at ``first`` (the pruned state loaded first)."""
    r = Replay(first_seq=first, size=first - 1)
    if prune is not None and isinstance(prune.get("governance"), Mapping):
        r.load_snapshot(prune["governance"])
        r.carried_loaded = True
    return r


def replay_log(session: Session, *, upto: int | None = None) -> Replay:
    """The replay of the log as ``session`` sees it (its own appends included): a copy, the
    caller's to feed further. The replay of a database's committed entries is cached between
    calls, per database, and advanced through a read-only session of its own."""
    if upto is not None:
        first = start(session)
        r = fresh_replay(first, _prune_entry(session, first))
        return r.feed_all(entries(session, upto=upto))
    bind = session.get_bind()
    engine = bind if isinstance(bind, Engine) else bind.engine
    key = engine.url.render_as_string(hide_password=False)
    with _CACHE_LOCK:
        cached = _CACHE.get(key)
        if cached is None:
            cached = _CACHE[key] = _Cached(Replay(first_seq=0), threading.Lock())
    with cached.lock, Session(engine) as ro:
        first, n = start(ro), size(ro)
        r = cached.replay
        if r.first_seq != first or r.size > n:
            r = cached.replay = fresh_replay(first, _prune_entry(ro, first))
        r.feed_all(entries(ro, after=r.size))
        mine = r.copy()
    if start(session) != mine.first_seq:  # pruned meanwhile, as this session sees it
        first = start(session)
        mine = fresh_replay(first, _prune_entry(session, first))
    return mine.feed_all(entries(session, after=mine.size))


def status(session: Session, *, teams: frozenset[str] | None = None) -> list[ModelStatus]:
    """Every model's status, a replay of the log: read only. ``teams``: a team's view (its own
    runs' share; an admin, None, sees whole models)."""
    return replay_log(session).statuses(teams)


# -- appending -------------------------------------------------------------------------------------


def on_run_stored(session: Session, team: str, run: RunUpload, signature: SignatureStatus) -> None:
    """The ingest's hook (computewatch.serverdb.ingest.RunHook): the run's ledger entry and
    compute, then, for a run that declares a model, the tiers judged again in the same
    transaction, at every upload: a crossing and its obligation commit with the run that
    caused it, and a live upload whose FLOPs so far or forecast take a tier over opens its
    ``forecast`` obligation while the run goes on (judging appends to the log only when a
    state changes)."""
    check_declaration(session, team, run)
    rc = on_stored(session, team, run, signature=signature)
    if rc is not None:
        judge(session, server_tiers(), time.time())


def check_declaration(session: Session, team: str, run: RunUpload) -> None:
    """Refuse (:class:`DeclarationRefused`) a run of ``team`` that names another team's model
    as its own, or another team's model as its base without that team's grant (403 naming the
    team), or whose base model is the model itself or would close a cycle of base models with
    those already declared (422 naming the cycle): a cycle has no cumulative compute, and one
    team's upload must not break everyone's status."""
    doc = run["meta"].get("governance")
    if not isinstance(doc, Mapping):
        return
    declared, base = doc.get("model"), doc.get("base_model")
    if not isinstance(declared, str) or not declared.strip():
        return
    model = _own_model(team, run["id"], declared.strip())
    if not isinstance(base, str) or not base.strip():
        return
    base = _base_model(session, team, run["id"], base.strip())
    bases: dict[str, set[str]] = {}
    for m, b in session.execute(
        select(ModelRun.model, ModelRun.base_model)
        .where(ModelRun.base_model.is_not(None), ModelRun.run_id != run["id"])
        .distinct()
    ):
        if b is not None:
            bases.setdefault(m, set()).add(b)
    cycle = lineage_cycle(bases, model, base)
    if cycle is not None:
        what = "names itself as its base model" if base == model else "closes a cycle"
        raise DeclarationRefused(
            f"run {run['id']}: model {model!r} {what}: base models form a cycle: {cycle}"
        )


def _checked_name(model: str, run_id: str) -> str:
    """``model`` when it is ``team/name`` with a valid team and a name (422 otherwise)."""
    owner, _, name = model.partition(MODEL_SEP)
    try:
        validate_team(owner)
    except ComputewatchError as e:
        raise DeclarationRefused(f"run {run_id}: model {model!r}: {e}", code="invalid") from None
    if not name.strip():
        raise DeclarationRefused(
            f"run {run_id}: model {model!r} names a team but no model", code="invalid"
        )
    return model


def _own_model(team: str, run_id: str, declared: str) -> str:
    """The model a run of ``team`` trains: ``team/NAME`` (403 when it names another team's)."""
    model = _checked_name(qualify(team, declared), run_id)
    owner = team_of(model)
    if owner != team:
        raise DeclarationRefused(
            f"run {run_id} of team {team} names team {owner}'s model {model!r} as the model it "
            f"trains: a run names its own team's models only (--model NAME means {team}/NAME)",
            status=403,
            code="model_team",
        )
    return model


def _base_model(session: Session, team: str, run_id: str, declared: str) -> str:
    """The base model a run of ``team`` names: its own team's, or another team's that granted
    it (403 otherwise)."""
    base = _checked_name(qualify(team, declared), run_id)
    owner = team_of(base)
    if owner == team or session.get(ModelGrant, (base, team)) is not None:
        return base
    stored = session.get(ModelRun, run_id)
    if stored is None or stored.base_model != base:  # a run accepted before a revoke goes on
        raise DeclarationRefused(
            f"run {run_id} of team {team} names team {owner}'s model {base!r} as its base "
            f"model, which team {owner} has not granted to team {team} (an admin grants it: "
            f"computewatch governance grant {base} --to {team})",
            status=403,
            code="base_model_grant",
        )
    return base


def _append(session: Session, r: Replay, kind: str, body: Mapping[str, Any]) -> LogEntry:
    e = append(session, kind, body)
    r.feed(e)
    return e


def _running_rows(session: Session) -> dict[str, list[ModelRun]]:
    rows = session.scalars(
        select(ModelRun).where(ModelRun.status == "running").order_by(ModelRun.run_id)
    )
    out: dict[str, list[ModelRun]] = {}
    for row in rows:
        out.setdefault(row.model, []).append(row)
    return out


def _states(r: Replay, model: str) -> dict[str, str]:
    return {s.tier.name: s.state for s in r.tier_states(model)}


def judge(session: Session, tiers: Sequence[Tier], now: float) -> Replay:
    """Bring the log up to date with what governance knows (the caller commits): the tiers in
    force, running runs whose figures would change a tier's state (or whose set changed), each
    tier newly crossed or forecast, and an obligation for each such tier with a deadline.
    Returns the replay of the log after it."""
    _lock(session)
    r = replay_log(session)
    simulated = count_simulated()
    if (
        [tier_json(t) for t in tiers] != [tier_json(t) for t in r.tiers]
        or not r.tiers_recorded
        or simulated != r.count_simulated
    ):
        body: dict[str, Any] = {"tiers": [tier_json(t) for t in tiers]}
        if simulated:
            body["count_simulated"] = True
        _append(session, r, TIERS, body)
    live = load_models(session, count_simulated=simulated)
    running = _running_rows(session)
    for model in sorted(set(running) | {m for m, runs in r.running.items() if runs}):
        _record_running(session, r, model, running.get(model, []), live)
    for model in sorted(r.models()):
        for st in r.tier_states(model):
            if st.state not in JUDGED:
                continue
            if r.states.get((model, st.tier.name)) != st.state:
                _append(session, r, TIER, _tier_body(model, st, now))
            opened = any(
                o.model == model and o.tier == st.tier.name for o in r.obligations.values()
            )
            if st.tier.deadline_days is not None and not opened:
                _open(session, r, model, st, now)
    return r


def _record_running(
    session: Session, r: Replay, model: str, rows: list[ModelRun], live: Mapping[str, Any]
) -> None:
    runs = [run_of(row) for row in rows]
    teams = {row.run_id: row.team for row in rows}
    forecast = live[model].forecast_high if model in live else None
    body = {
        "model": model,
        "runs": [running_json(teams[rc.run_id], rc) for rc in runs],
        "forecast_additional_flop_high": forecast,
    }
    recorded = r.running.get(model, {})
    if {rc.run_id for rc in runs} != set(recorded) or (forecast is None) != (
        r.forecasts.get(model) is None
    ):
        _append(session, r, RUNNING, body)
        return
    if not runs:
        return
    candidate = r.copy()
    candidate.feed(LogEntry(r.size + 1, "", RUNNING, body))
    if _states(candidate, model) != _states(r, model):
        _append(session, r, RUNNING, body)


def _tier_body(model: str, st: TierStatus, now: float) -> dict[str, Any]:
    return {
        "model": model,
        "tier": st.tier.name,
        "state": st.state,
        "judged_flop": st.judged_flop,
        "method": st.method,
        "threshold": st.threshold,
        "crossed_at": iso(_crossed(st, now)),
        "noticed_at": iso(float(int(now))),
    }


def _crossed(st: TierStatus, now: float) -> float | None:
    """When a crossed tier was crossed (whole seconds, never after ``now``); None for a
    forecast or when the crossing is among pruned runs."""
    if st.state != "crossed" or st.crossed_at is None:
        return None
    return float(int(min(st.crossed_at, now)))


def _open(session: Session, r: Replay, model: str, st: TierStatus, now: float) -> None:
    days = st.tier.deadline_days
    opened = float(int(now))
    crossed = _crossed(st, opened)
    start = opened if crossed is None else crossed  # deadlines run from the crossing
    o = Obligation(
        model=model,
        tier=st.tier.name,
        trigger=st.state,
        rule=st.tier.rule,
        judged_flop=st.judged_flop,
        method=st.method,
        threshold=st.threshold,
        opened_at=opened,
        deadline_at=None if days is None else start + days * 86_400,
        state="open",
    )
    session.add(o)
    session.flush()  # UNIQUE (model, tier) WHERE state = 'open': a second one fails here
    _append(session, r, OPENED, {**_body(o), "crossed_at": iso(crossed)})


def _body(o: Obligation) -> dict[str, Any]:
    return {
        "obligation": o.id,
        "model": o.model,
        "tier": o.tier,
        "trigger": o.trigger,
        "rule": o.rule,
        "judged_flop": o.judged_flop,
        "method": o.method,
        "threshold": o.threshold,
        "opened_at": iso(o.opened_at),
        "deadline": iso(o.deadline_at),
        "state": o.state,
        "done_at": iso(o.done_at),
        "reference": o.reference,
    }


def mark_done(session: Session, obligation_id: int, reference: str) -> ObligationView:
    """Mark an obligation fulfilled with a reference (a notification's number, a URL); the
    caller commits."""
    if not reference.strip():
        raise GovernanceError("a reference is needed to mark an obligation done")
    immediate(session)
    o = session.get(Obligation, obligation_id)
    if o is None:
        raise GovernanceError(f"no obligation {obligation_id}")
    if o.state != "open":
        raise GovernanceError(f"obligation {obligation_id} was already marked done")
    o.state, o.done_at, o.reference = "done", float(int(time.time())), reference.strip()
    session.flush()
    append(session, DONE, _body(o))
    return view_of(o)


# -- upkeep ----------------------------------------------------------------------------------------


def upkeep(session: Session, tiers: Sequence[Tier], now: float, cutoff: str | None) -> Replay:
    """One round of governance upkeep in the session's transaction (the caller commits):
    entries older than ``cutoff`` (ISO 8601 UTC) pruned, each prune entry carrying what they
    added up to, old heads thinned (computewatch.serverdb.ledger_store.thin_heads), then
    :func:`judge`."""
    immediate(session)
    if cutoff is not None:
        prune_before(session, cutoff, carry=lambda keep: _carried(session, keep))
    thin_heads(session, now)
    return judge(session, tiers, now)


def _carried(session: Session, keep: int) -> dict[str, Any]:
    return replay_log(session, upto=keep - 1).snapshot()


# -- the tables against the log --------------------------------------------------------------------


def projection_problems(session: Session, r: Replay) -> list[str]:
    """Where the governance tables disagree with the replay of the log: an obligation whose
    state or reference differs (marked done by an UPDATE), a finished run whose figures differ
    (moved by an UPDATE of ``model_runs``)."""
    out: list[str] = []
    for row in session.scalars(select(Obligation).order_by(Obligation.id)):
        o = r.obligations.get(row.id)
        if o is None:
            out.append(
                f"obligation {row.id} ({row.model}, {row.tier}) is in the obligations "
                "table but no entry of the log opened it"
            )
        elif (o.state, o.reference, o.model, o.tier) != (
            row.state,
            row.reference,
            row.model,
            row.tier,
        ):
            out.append(
                f"obligation {row.id} is {row.state!r} (reference {row.reference!r}) in "
                f"the obligations table but {o.state!r} (reference {o.reference!r}) in "
                "the log"
            )
    for mr in session.scalars(
        select(ModelRun).where(ModelRun.status != "running").order_by(ModelRun.run_id)
    ):
        held = r.runs.get(mr.run_id)
        if held is None:
            continue  # a run still uploading, or one pruned from the log
        problem = _run_differs(mr, held[1])
        if problem:
            out.append(f"run {mr.run_id} in model_runs {problem} (the log's entry holds otherwise)")
    return out


def _run_differs(row: ModelRun, rc: RunCompute) -> str | None:
    pairs: Iterable[tuple[str, object, object]] = [
        ("model", row.model, rc.declaration.model),
        ("stage", row.stage, rc.declaration.stage),
        ("base_model", row.base_model, rc.declaration.base_model),
        ("gpu_hours", row.gpu_hours, rc.gpu_hours),
        ("counted", row.counted, _v(rc, "counted", "value")),
        ("counted_high", row.counted_high, _v(rc, "counted", "high")),
        ("hardware", row.hardware, _v(rc, "hardware", "value")),
        ("hardware_high", row.hardware_high, _v(rc, "hardware", "high")),
        ("architecture", row.architecture, _v(rc, "architecture", "value")),
    ]
    for name, mine, logged in pairs:
        if mine != logged:
            return f"says {name} = {mine!r}"
    return None


def _v(rc: RunCompute, method: str, which: str) -> float | None:
    e = rc.flops.get(method)
    return None if e is None else float(getattr(e, which))


def count_open(session: Session) -> int:
    return int(
        session.scalar(
            select(func.count()).select_from(Obligation).where(Obligation.state == "open")
        )
        or 0
    )


Hook = Callable[[Session, str, RunUpload, SignatureStatus], None]


# -- grants ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Grant:
    """Team ``team``'s runs may name ``model`` (another team's) as their base model."""

    model: str
    team: str
    granted_at: float
    granted_by: str

    def to_json(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "team": self.team,
            "granted_at": iso(self.granted_at),
            "granted_by": self.granted_by,
        }


def _grant_of(row: ModelGrant) -> Grant:
    return Grant(row.model, row.team, row.granted_at, row.granted_by)


def _granted_model(session: Session, model: str, team: str, default_team: str | None) -> str:
    """The model a grant names (``team/name``; a bare name is ``default_team``'s), checked to
    be a model with runs here and another team's than ``team``."""
    model = model.strip()
    if MODEL_SEP not in model:
        if default_team is None:
            raise GovernanceError(f"name the model with its team: TEAM/{model}")
        model = qualify(default_team, model)
    owner = team_of(model) or ""
    try:
        validate_team(owner)
        validate_team(team)
    except ComputewatchError as e:
        raise GovernanceError(str(e)) from None
    if owner == team:
        raise GovernanceError(
            f"{model} is team {team}'s own model: its runs name it without a grant"
        )
    known = set(session.scalars(select(ModelRun.model).distinct()))
    known |= set(replay_log(session).models())
    return find_model(known, model)


def grant(
    session: Session, model: str, team: str, *, by: str, default_team: str | None = None
) -> Grant:
    """Let ``team``'s runs name ``model`` (``owner/name``) as their base model: recorded in the
    log and in ``model_grants`` (the caller commits; the caller checked that ``by`` may speak
    for the model's team). Granting again changes nothing."""
    immediate(session)
    model = _granted_model(session, model, team, default_team)
    row = session.get(ModelGrant, (model, team))
    if row is not None:
        return _grant_of(row)
    row = ModelGrant(model=model, team=team, granted_at=float(int(time.time())), granted_by=by)
    session.add(row)
    session.flush()
    append(session, GRANT, {"model": model, "team": team, "granted_at": iso(row.granted_at),
                            "granted_by": by})  # fmt: skip
    return _grant_of(row)


def revoke(
    session: Session, model: str, team: str, *, by: str, default_team: str | None = None
) -> Grant:
    """Withdraw a grant (the caller commits): ``team``'s new runs may no longer name ``model``
    as their base; runs stored before keep their lineage (their compute was done)."""
    immediate(session)
    model = model.strip()
    if MODEL_SEP not in model and default_team is not None:
        model = qualify(default_team, model)
    row = session.get(ModelGrant, (model, team))
    if row is None:
        raise GovernanceError(f"team {team} holds no grant of {model!r}")
    held = _grant_of(row)
    session.delete(row)
    session.flush()
    append(session, REVOKE, {"model": model, "team": team, "revoked_at": iso(time.time()),
                             "revoked_by": by})  # fmt: skip
    return held


def grants(session: Session, teams: frozenset[str] | None = None) -> list[Grant]:
    """The grants in force; with ``teams``, those of their models and those given to them."""
    rows = session.scalars(select(ModelGrant).order_by(ModelGrant.model, ModelGrant.team))
    out = [_grant_of(r) for r in rows]
    if teams is None:
        return out
    return [g for g in out if g.team in teams or team_of(g.model) in teams]
