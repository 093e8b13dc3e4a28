"""Know-your-customer accounts and the policy a scheduler asks before it starts a job.

An account is a customer or an internal team; its name is the team its tokens carry, so its
usage is the team's runs. Personal data (legal name, beneficial owners, contacts, payment
reference, intended use) is encrypted at rest with Fernet (AES-128-CBC + HMAC-SHA256, from
``cryptography``) under a key kept in a file outside the database; it appears in no metric, log
or default export, only in ``accounts show --pii`` (an admin's request). The ledger records
account events with a SHA-256 of the personal data, never the data.

Policy (``accounts check``): deny an unknown or suspended account; deny a request that would
take the account past its monthly GPU-hour or FLOP cap (every run of the team counts, declared
or not, at the highest upper bound it has; evaluation and inference runs are left out of the
FLOP cap); deny an unverified or expired account a request whose compute (hardware estimate,
upper bound) would take a model past a tier that opens an obligation (1e25, 1e26 FLOP by
default). Runs on simulated devices count only with ``[governance] count_simulated``.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import difflib
import hashlib
import json
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final

from cryptography.fernet import Fernet, InvalidToken
from sqlalchemy import select
from sqlalchemy.orm import Session

from computewatch.catalog import load_accelerators
from computewatch.errors import UsageError
from computewatch.governance.status import load_models, run_of
from computewatch.governance.tiers import CUMULATIVE, DEFAULT_TIERS, Tier
from computewatch.lineage.compute import (
    STAGES,
    TRAINING_STAGES,
    Declaration,
    GovernanceError,
    RunCompute,
    judged_flops,
    qualify,
    run_compute,
)
from computewatch.paths import check_private_file, create_private_file, data_home
from computewatch.serverdb.accounts_models import AccessLogRow, AccountRow
from computewatch.serverdb.governance_models import ModelRun
from computewatch.serverdb.ledger_store import append
from computewatch.serverdb.models import Run, RunDoc
from computewatch.serverdb.tokens import validate_team

KEY_FILENAME: Final = "accounts.key"
ENV_KEY: Final = "COMPUTEWATCH_ACCOUNTS_KEY"
UTILIZATION_HIGH: Final = 0.40  # Epoch AI's upper utilization, as the accounting's estimate
CAP_KEYS: Final = ("gpu_hours_per_month", "flop_per_month")
STATUSES: Final = ("unverified", "verified", "suspended")
LEFT_OUT_STAGES: Final = frozenset(STAGES) - TRAINING_STAGES - {"synthetic-data"}
"""Declared stages a FLOP cap leaves out: evaluation and inference (docs/accounts.md)."""
GPU_HOURS_BOUND: Final = "gpu-hours bound"
"""The method of an undeclared run without a FLOP figure: GPU-hours × peak × 40 %."""


@dataclass(frozen=True, slots=True)
class PersonalData:
    legal_name: str
    beneficial_owners: tuple[str, ...] = ()
    email: str | None = None
    phone: str | None = None
    contacts_verified: bool = False
    payment_reference: str | None = None
    intended_use: str | None = None
    verification_evidence: str | None = None
    """What the last verification rested on (``accounts verify --evidence``)."""
    verified_by: str | None = None
    """Who verified it (``accounts verify --by``)."""

    def to_json(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["beneficial_owners"] = list(self.beneficial_owners)
        return doc


@dataclass(frozen=True, slots=True)
class Account:
    name: str
    country: str | None
    status: str
    """As stored: unverified, verified or suspended."""
    state: str
    """As it applies now: ``expired`` when re-verification is overdue."""
    verified_at: float | None
    reverify_due: float | None
    caps: Mapping[str, float]
    pii: PersonalData | None
    """Only when asked for (an admin's request); None otherwise."""
    pii_sha256: str


@dataclass(slots=True)
class Decision:
    allow: bool
    account: str
    reasons: list[str] = field(default_factory=list)
    request_gpu_hours: float = 0.0
    request_flop_high: float | None = None
    used_gpu_hours: float = 0.0
    used_flop_high: float = 0.0
    used: MonthUse | None = None
    """How the month's use was counted (None for an unknown account)."""


@dataclass(slots=True)
class MonthUse:
    """An account's use since the first of the month: what the caps count, and how."""

    gpu_hours: float = 0.0
    flop_high: float = 0.0
    flop_by_method: dict[str, float] = field(default_factory=dict)
    """The FLOP counted, by the method that gave each run's figure (``counted``, ``hardware``,
    ``architecture``, or ``gpu-hours bound`` for a run without a figure)."""
    runs: int = 0
    """Runs counted against the FLOP cap."""
    undeclared_runs: int = 0
    """Of those, runs that declared no model (counted at their hardware estimate)."""
    left_out: dict[str, int] = field(default_factory=dict)
    """Runs left out of the FLOP cap, by reason (``eval``, ``inference``, ``simulated``)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "gpu_hours": self.gpu_hours,
            "flop_high": self.flop_high,
            "flop_by_method": dict(sorted(self.flop_by_method.items())),
            "runs": self.runs,
            "undeclared_runs": self.undeclared_runs,
            "left_out": dict(sorted(self.left_out.items())),
        }


def decision_json(d: Decision) -> dict[str, Any]:
    """The documented JSON of a check (docs/accounts.md), for the CLI and the API."""
    return {
        "decision": "allow" if d.allow else "deny",
        "account": d.account,
        "reasons": d.reasons,
        "request_gpu_hours": d.request_gpu_hours,
        "request_flop_high": d.request_flop_high,
        "used_gpu_hours_this_month": d.used_gpu_hours,
        "used_flop_high_this_month": d.used_flop_high,
        "used_this_month": None if d.used is None else d.used.to_json(),
    }


def key_path() -> Path:
    env = os.environ.get(ENV_KEY)
    return Path(env).expanduser() if env else data_home() / KEY_FILENAME


def cipher(path: Path | None = None) -> Fernet:
    """The key that encrypts personal data: made (mode 0600) on first use."""
    p = path or key_path()
    try:
        data = p.read_bytes().strip()
    except FileNotFoundError:
        p.parent.mkdir(parents=True, exist_ok=True)
        if create_private_file(p):
            p.write_bytes(Fernet.generate_key())
        data = p.read_bytes().strip()
    except OSError as e:
        raise GovernanceError(f"cannot read the accounts key {p}: {e.strerror or e}") from None
    check_private_file(p, "accounts key", GovernanceError)  # it unlocks personal data
    try:
        return Fernet(data)
    except ValueError:
        raise GovernanceError(f"{p} is not a Fernet key (32 url-safe base64 bytes)") from None


def _pii_bytes(pii: PersonalData) -> bytes:
    return json.dumps(pii.to_json(), sort_keys=True, separators=(",", ":")).encode()


def _decrypt(f: Fernet, token: bytes) -> PersonalData:
    try:
        doc = json.loads(f.decrypt(token))
    except InvalidToken:
        raise GovernanceError("the personal data cannot be decrypted with this key") from None
    doc["beneficial_owners"] = tuple(doc.get("beneficial_owners") or ())
    return PersonalData(**doc)


def _event(session: Session, kind: str, row: AccountRow) -> None:
    append(session, kind, {
        "account": row.name, "country": row.country, "status": row.status,
        "reverify_due": row.reverify_due, "caps": dict(row.caps), "pii_sha256": row.pii_sha256,
    })  # fmt: skip


def check_caps(caps: Mapping[str, object]) -> dict[str, float]:
    out: dict[str, float] = {}
    for k, v in caps.items():
        if k not in CAP_KEYS:
            raise GovernanceError(f"unknown cap {k!r}; known: {', '.join(CAP_KEYS)}")
        if v is None:
            continue
        if not isinstance(v, int | float) or isinstance(v, bool) or not v >= 0:
            raise GovernanceError(f"cap {k} must be a number of at least 0, not {v!r}")
        out[k] = float(v)
    return out


def add_account(
    session: Session, name: str, pii: PersonalData, *, country: str | None = None,
    caps: Mapping[str, object] | None = None, key: Fernet | None = None,
) -> Account:  # fmt: skip
    try:
        validate_team(name)  # the account is the team its tokens carry: the same rule
    except UsageError as e:
        raise GovernanceError(f"account name: {e}") from None
    if not pii.legal_name.strip():
        raise GovernanceError("an account needs a legal name")
    if country is not None and not (len(country) == 2 and country.isalpha()):
        raise GovernanceError(f"country must be an ISO 3166 two-letter code, not {country!r}")
    if session.get(AccountRow, name) is not None:
        raise GovernanceError(f"account {name!r} exists already")
    f = key or cipher()
    now = time.time()
    raw = _pii_bytes(pii)
    row = AccountRow(
        name=name, country=None if country is None else country.upper(), status="unverified",
        verified_at=None, reverify_due=None, caps=check_caps(caps or {}), pii=f.encrypt(raw),
        pii_sha256=hashlib.sha256(raw).hexdigest(), created_at=now, updated_at=now,
    )  # fmt: skip
    session.add(row)
    session.flush()
    _event(session, "account-added", row)
    return _account(row, now, None)


def _row(session: Session, name: str) -> AccountRow:
    row = session.get(AccountRow, name)
    if row is None:
        known = sorted(session.scalars(select(AccountRow.name)))
        close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise GovernanceError(f"no account named {name!r}{hint}")
    return row


def verify_account(
    session: Session, name: str, *, evidence: str, by: str, valid_days: int = 365,
    key: Fernet | None = None,
) -> Account:  # fmt: skip
    """Record that the account's identity was verified now, on ``evidence`` (what was checked:
    kept encrypted with the personal data) by ``by``, due again in ``valid_days``."""
    if not 1 <= valid_days <= 3650:
        raise GovernanceError("--valid-days must be 1 to 3650")
    if not evidence.strip():
        raise GovernanceError("verification needs --evidence: what was checked (a document, a "
                              "reference)")  # fmt: skip
    if not by.strip():
        raise GovernanceError("verification needs --by: who checked it")
    row = _row(session, name)
    f = key or cipher()
    pii = dataclasses.replace(
        _decrypt(f, row.pii), verification_evidence=evidence.strip(), verified_by=by.strip()
    )
    raw = _pii_bytes(pii)
    row.pii, row.pii_sha256 = f.encrypt(raw), hashlib.sha256(raw).hexdigest()
    now = time.time()
    row.status, row.verified_at = "verified", now
    row.reverify_due, row.updated_at = now + valid_days * 86_400, now
    _event(session, "account-verified", row)
    return _account(row, now, None)


def update_account(
    session: Session, name: str, *, status: str | None = None,
    caps: Mapping[str, object] | None = None,
) -> Account:  # fmt: skip
    row = _row(session, name)
    if status is not None:
        if status not in STATUSES:
            raise GovernanceError(f"status must be one of {', '.join(STATUSES)}")
        if status == "verified" and row.status != "verified":
            raise GovernanceError(
                f"an account is verified on evidence: computewatch accounts verify {name} "
                "--evidence TEXT --by WHO (this records when, on what and by whom)"
            )
        row.status = status
    if caps is not None:
        row.caps = {**dict(row.caps), **check_caps(caps)}
        row.caps = {k: v for k, v in row.caps.items() if caps.get(k, v) is not None}
    row.updated_at = time.time()
    _event(session, "account-changed", row)
    return _account(row, row.updated_at, None)


def _account(row: AccountRow, now: float, pii: PersonalData | None) -> Account:
    state = row.status
    if state == "verified" and row.reverify_due is not None and row.reverify_due < now:
        state = "expired"
    return Account(row.name, row.country, row.status, state, row.verified_at, row.reverify_due,
                   dict(row.caps), pii, row.pii_sha256)  # fmt: skip


def get_account(session: Session, name: str, *, with_pii: bool = False,
                key: Fernet | None = None, now: float | None = None) -> Account:  # fmt: skip
    row = _row(session, name)
    pii = _decrypt(key or cipher(), row.pii) if with_pii else None
    return _account(row, time.time() if now is None else now, pii)


def list_accounts(session: Session, now: float | None = None) -> list[Account]:
    t = time.time() if now is None else now
    rows = session.scalars(select(AccountRow).order_by(AccountRow.name))
    return [_account(r, t, None) for r in rows]


def month_start(now: float) -> float:
    d = dt.datetime.fromtimestamp(now, dt.UTC)
    return dt.datetime(d.year, d.month, 1, tzinfo=dt.UTC).timestamp()


def request_flop_high(gpus: int, hours: float, gpu_model: str | None) -> tuple[float, str]:
    """Upper bound of a request's compute: GPUs × hours × peak bf16 × 40 %, and what it
    assumed. An unknown or absent model: the catalog's highest peak (the cautious reading)."""
    catalog = load_accelerators()
    by_name = dict(catalog)
    for a in catalog.values():
        by_name.update((n, a) for n in a.nvml_names)
    acc = by_name.get(gpu_model or "")
    if acc is not None and acc.peak_tflops("bf16"):
        peak, said = float(acc.peak_tflops("bf16") or 0.0), f"{acc.model} bf16 peak"
    else:
        best = max(catalog.values(), key=lambda a: a.peak_tflops("bf16") or 0.0)
        peak = float(best.peak_tflops("bf16") or 0.0)
        said = f"GPU model {'unknown' if gpu_model else 'not given'}: {best.model}'s bf16 peak"
    flop = gpus * hours * 3600 * peak * 1e12 * UTILIZATION_HIGH
    return flop, f"{said} × {UTILIZATION_HIGH:.0%} utilization (upper bound)"


def check(
    session: Session, name: str, *, gpus: int, hours: float, gpu_model: str | None = None,
    model: str | None = None, now: float | None = None, tiers: Sequence[Tier] = DEFAULT_TIERS,
    count_simulated: bool = False,
) -> Decision:  # fmt: skip
    """Whether ``name`` may start a job of ``gpus`` GPUs for ``hours``, and why (runs on
    simulated devices count only with ``count_simulated``, as the server's totals)."""
    if gpus < 1 or not 0 < hours <= 24 * 366:
        raise GovernanceError("a request needs at least 1 GPU and 0 to 8784 hours")
    now = time.time() if now is None else now
    d = Decision(allow=True, account=name, request_gpu_hours=gpus * hours)
    row = session.get(AccountRow, name)
    if row is None:
        d.allow = False
        d.reasons.append(f"no account named {name!r}: unknown customers get no compute")
        return d
    acct = _account(row, now, None)
    d.used = month_use(session, name, month_start(now), count_simulated=count_simulated)
    d.used_gpu_hours, d.used_flop_high = d.used.gpu_hours, d.used.flop_high
    flop, assumed = request_flop_high(gpus, hours, gpu_model)
    d.request_flop_high = flop
    if acct.state == "suspended":
        d.allow = False
        d.reasons.append("the account is suspended")
    cap = acct.caps.get("gpu_hours_per_month")
    if cap is not None and d.used_gpu_hours + d.request_gpu_hours > cap:
        d.allow = False
        d.reasons.append(
            f"GPU-hour cap: {d.used_gpu_hours:.1f} used this month + {d.request_gpu_hours:.1f} "
            f"requested > {cap:g}"
        )
    cap = acct.caps.get("flop_per_month")
    if cap is not None and d.used_flop_high + flop > cap:
        d.allow = False
        d.reasons.append(
            f"FLOP cap: {d.used_flop_high:.3g} used this month ({_mix(d.used)}) + "
            f"{flop:.3g} requested ({assumed}) > {cap:.3g}"
        )
    if acct.state in ("unverified", "expired"):
        base = 0.0
        if model is not None:
            model = qualify(name, model)  # a bare name: the account's (= team's) model
            m = load_models(session, count_simulated=count_simulated).get(model)
            judged = None if m is None else m.judged()
            base = 0.0 if judged is None else judged[0]
        for t in tiers:
            if t.kind == CUMULATIVE and t.deadline_days is not None and base + flop > t.threshold:
                d.allow = False
                d.reasons.append(
                    f"{acct.state} account: the job would take "
                    f"{'model ' + model if model else 'a model'} to {base + flop:.3g} FLOP, "
                    f"past {t.name} ({t.threshold:.3g}); verify the account first ({assumed})"
                )
                break
    if d.allow:
        d.reasons.append(
            f"within caps ({acct.state} account; {d.used_gpu_hours:.1f} GPU-hours used this "
            f"month; request {flop:.3g} FLOP at most, {assumed})"
        )
    return d


def _mix(use: MonthUse) -> str:
    """The method mix of a month's FLOP, in words."""
    parts = [f"{v:.3g} {k}" for k, v in sorted(use.flop_by_method.items()) if v > 0]
    said = ", ".join(parts) or "none"
    if use.undeclared_runs:
        said += f"; {use.undeclared_runs} of {use.runs} runs undeclared"
    if use.left_out:
        said += "; left out: " + ", ".join(f"{n} {k}" for k, n in sorted(use.left_out.items()))
    return said


def month_use(
    session: Session, team: str, since: float, *, count_simulated: bool = False
) -> MonthUse:
    """What ``team``'s runs started since ``since`` add up to for its caps: GPU-hours of every
    run; FLOP (each run's highest upper bound among its methods, a counted figure above its
    hardware bound at the bound) of every run but evaluation and inference, a run that declared
    no model at the hardware estimate of its summary, else at its GPU-hours × peak × 40 %.
    Runs on simulated devices count only with ``count_simulated``."""
    use = MonthUse()
    rows = session.execute(
        select(Run.id, Run.gpu_hours, Run.gpu_count, Run.gpu_model, Run.status, Run.started_at,
               ModelRun)
        .outerjoin(ModelRun, ModelRun.run_id == Run.id)
        .where(Run.team == team, Run.started_at >= since)
    ).all()  # fmt: skip
    undeclared = [r.id for r in rows if r.ModelRun is None]
    summaries: dict[str, Mapping[str, Any]] = {}
    if undeclared:
        for run_id, summary in session.execute(
            select(RunDoc.run_id, RunDoc.summary).where(RunDoc.run_id.in_(undeclared))
        ):
            if isinstance(summary, Mapping):
                summaries[run_id] = summary
    for r in rows:
        mr: ModelRun | None = r.ModelRun
        if mr is not None:
            rc: RunCompute | None = run_of(mr)
        elif r.id in summaries:
            rc = run_compute(r.id, summaries[r.id], Declaration("", stage="undeclared"),
                             status=r.status, started_at=r.started_at)  # fmt: skip
        else:
            rc = None
        if rc is not None and rc.simulated and not count_simulated:
            use.left_out["simulated"] = use.left_out.get("simulated", 0) + 1
            continue
        use.gpu_hours += float(r.gpu_hours or 0.0)
        stage = "undeclared" if mr is None else mr.stage
        if stage in LEFT_OUT_STAGES:
            use.left_out[stage] = use.left_out.get(stage, 0) + 1
            continue
        use.runs += 1
        use.undeclared_runs += mr is None
        flop, method = _run_flop_high(rc, r.gpu_count, float(r.gpu_hours or 0.0), r.gpu_model)
        use.flop_high += flop
        use.flop_by_method[method] = use.flop_by_method.get(method, 0.0) + flop
    return use


def _run_flop_high(
    rc: RunCompute | None, gpus: int, gpu_hours: float, gpu_model: str | None
) -> tuple[float, str]:
    """A run's FLOP for a cap: its highest upper bound among methods (a counted figure judged
    at the hardware bound), else its GPU-hours at the request's estimate."""
    if rc is not None:
        flops, _ = judged_flops(rc)
        best = max(flops.items(), key=lambda kv: kv[1].high, default=None)
        if best is not None:
            return best[1].high, best[0]
    if gpus <= 0 or gpu_hours <= 0:
        return 0.0, GPU_HOURS_BOUND
    flop, _ = request_flop_high(gpus, gpu_hours / gpus, gpu_model)
    return flop, GPU_HOURS_BOUND


def record_access(session: Session, *, team: str | None, token_id: int | None, action: str,
                  ip: str, key: Fernet) -> None:  # fmt: skip
    """One line of the access log (the caller commits)."""
    session.add(AccessLogRow(at=time.time(), team=team, token_id=token_id, action=action[:300],
                             ip=key.encrypt(ip.encode())))  # fmt: skip


def access_log(session: Session, team: str, key: Fernet, limit: int = 100) -> list[dict[str, Any]]:
    rows = session.scalars(
        select(AccessLogRow).where(AccessLogRow.team == team)
        .order_by(AccessLogRow.at.desc()).limit(limit)
    )  # fmt: skip
    return [{"at": r.at, "action": r.action, "token_id": r.token_id,
             "ip": key.decrypt(r.ip).decode()} for r in rows]  # fmt: skip
