"""``computewatch governance ...`` and ``computewatch accounts ...``: thin commands over
computewatch.governance (parsers in :mod:`computewatch.cli.governance`; ``ledger ...`` is in
:mod:`computewatch.cli.ledger_run`)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from computewatch import jsonout
from computewatch.analysis.common import iso
from computewatch.config import load_config
from computewatch.errors import PROG, ComputewatchError, UsageError
from computewatch.governance import accounts, remote, service
from computewatch.governance.accounts import Account
from computewatch.governance.report import render_report
from computewatch.governance.service import mark_done, status
from computewatch.governance.status import find_model, report_doc, status_json
from computewatch.governance.tiers import DEFAULT_TIERS, Tier, parse_tiers
from computewatch.serverdb.engine import Database, open_database, upgrade
from computewatch.units import format_flop

__all__ = ["cmd_accounts", "cmd_governance", "print_status"]


def _db(url: str | None) -> Database:
    db = open_database(url)
    upgrade(db)
    return db


def _tiers(args: argparse.Namespace) -> tuple[Tier, ...]:
    config = load_config(getattr(args, "config", None))
    if not config.governance_tiers:
        return DEFAULT_TIERS
    return parse_tiers(config.governance_tiers, str(config.path or "configuration"))


def _remote(args: argparse.Namespace) -> remote.Remote | None:
    """The server to ask, when ``--server`` (or its variable or configuration) names one and
    ``--db`` does not say otherwise."""
    if getattr(args, "db", None):
        return None
    return remote.from_settings(load_config(getattr(args, "config", None)), args.server,
                                args.token)  # fmt: skip


def _emit(doc: object) -> None:
    jsonout.dump(doc, sys.stdout, indent=2)
    sys.stdout.write("\n")


def cmd_governance(args: argparse.Namespace) -> int:
    server = _remote(args)
    now = time.time()
    if args.governance_cmd == "done":
        if server is not None:
            server.obligation_done(args.obligation, args.reference)
        else:
            db = _db(args.db)
            with db.writing(), db.session() as session:
                view = mark_done(session, args.obligation, args.reference)
                session.commit()
            print(f"obligation {view.id} ({view.model}, {view.tier}) done: {view.reference}")
        return 0
    if args.governance_cmd in ("grant", "revoke", "grants"):
        return _grants(args, server)
    if args.governance_cmd == "status":
        at = args.at
        if server is not None:
            doc = server.governance_status(at)
        else:
            db = _db(args.db)
            with db.session() as session:  # a replay of the log: reads only
                doc = status_json(status(session), now if at is None else at)
        if args.json:
            _emit(doc)
        else:
            print_status(doc)
        return 0
    out = Path(args.output).expanduser()
    if out.suffix.lower() not in (".html", ".json"):
        raise UsageError(f"governance report: -o must end in .html or .json, not {out.name!r}")
    if server is not None:
        report = server.model_report(args.model)
    else:
        db = _db(args.db)
        with db.session() as session:
            statuses = {s.compute.model: s for s in status(session)}
        report = report_doc(statuses[find_model(statuses, args.model)], now)
    try:
        if out.suffix.lower() == ".json":
            with open(out, "w", encoding="utf-8") as f:
                jsonout.dump(report, f, indent=2)
                f.write("\n")
        else:
            out.write_text(render_report(report), encoding="utf-8")
    except OSError as e:
        raise ComputewatchError(f"cannot write {out}: {e.strerror or e}") from None
    print(f"{PROG}: report written to {out}", file=sys.stderr)
    return 0


def _grants(args: argparse.Namespace, server: remote.Remote | None) -> int:
    """``governance grant MODEL --to TEAM``, ``revoke MODEL --from TEAM``, ``grants``."""
    cmd = args.governance_cmd
    if cmd == "grants":
        if server is not None:
            found = server.grants()
        else:
            db = _db(args.db)
            with db.session() as session:
                found = [g.to_json() for g in service.grants(session)]
        if args.json:
            _emit(found)
        elif not found:
            print("no grants: each team's runs name their own team's models only")
        for g in [] if args.json else found:
            print(f"{g['model']} -> team {g['team']} (granted {g['granted_at']} by "
                  f"{g['granted_by']})")  # fmt: skip
        return 0
    revoke = cmd == "revoke"
    if server is not None:
        doc = server.grant(args.model, args.team, revoke=revoke)
    else:
        db = _db(args.db)
        act = service.revoke if revoke else service.grant
        with db.writing(), db.session() as session:
            doc = act(session, args.model, args.team, by="database").to_json()
            session.commit()
    if revoke:
        print(f"revoked: team {doc['team']}'s new runs may no longer name {doc['model']} as "
              "their base model (runs stored before keep their lineage)")  # fmt: skip
    else:
        print(f"granted: team {doc['team']}'s runs may name {doc['model']} as their base "
              f"model (--base-model {doc['model']})")  # fmt: skip
    return 0


def print_status(doc: list[Any]) -> None:
    if not doc:
        print("no model declared yet (run --model NAME declares what a run trains)")
        return
    overdue = [(m["model"], o) for m in doc for o in m["obligations"] if o.get("overdue")]
    for model, o in overdue:  # said first: an overdue obligation is an alert
        print(
            f"OVERDUE: {model} obligation {o['id']} {o['tier']}: deadline {o['deadline']} "
            f"passed {-o['days_left']:.1f} days ago (crossed {o.get('crossed_at') or 'n/a'}, "
            f"noticed {o.get('noticed_at') or o['opened_at']})"
        )
    for m in doc:
        judged = m["judged_flop"]
        line = f"{m['model']}: {m['runs']} runs, {m['gpu_hours']:.1f} GPU-hours"
        if judged is not None:
            line += f", up to {format_flop(judged)} ({m['judged_method']}, upper bound)"
        if m["base_model"]:
            line += f", base {m['base_model']}" + ("" if m["base_known"] else " (unknown here)")
        print(line)
        if m.get("view") == "partial":
            print(f"  {m['view_note']}")
        for t in m["tiers"]:
            if t["state"] in ("crossed", "forecast", "approaching"):
                when = f", crossed {t['crossed_at']}" if t.get("crossed_at") else ""
                print(
                    f"  {t['tier']}: {t['state']} (threshold {format_flop(t['threshold'])}{when})"
                )
                if t.get("deadline"):
                    print(f"    deadline {t['deadline']}: {t['deadline_rule']}")
        for o in m["obligations"]:
            left = o["days_left"]
            if left is None:
                say = ""
            elif left < 0:
                say = f", OVERDUE by {-left:.1f} days"
            else:
                say = f", {left:.1f} days left"
            print(f"  obligation {o['id']} {o['tier']}: {o['state']}{say}")


def _account_json(a: Account) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "name": a.name,
        "country": a.country,
        "status": a.status,
        "state": a.state,
        "verified_at": iso(a.verified_at),
        "reverify_due": iso(a.reverify_due),
        "caps": dict(a.caps),
        "pii_sha256": a.pii_sha256,
    }
    if a.pii is not None:
        doc["pii"] = a.pii.to_json()
    return doc


def _caps(args: argparse.Namespace) -> dict[str, float | None]:
    """The caps given on the command line (``none`` removes one: a None value)."""
    return {
        key: getattr(args, key)
        for key in ("gpu_hours_per_month", "flop_per_month")
        if getattr(args, key, _UNSET) is not _UNSET
    }


_UNSET = object()


def cmd_accounts(args: argparse.Namespace) -> int:
    server = _remote(args)
    cmd = args.accounts_cmd
    if server is not None:
        if cmd != "check":
            raise UsageError(
                f"accounts {cmd}: only 'check' goes through --server; manage accounts with "
                "--db on the server's database (personal data never crosses the API unasked)"
            )
        doc = server.account_check(args.name, args.gpus, args.hours, args.gpu_model, args.model)
        return _print_decision(doc, args.json)
    db = _db(args.db)
    with db.session() as session:
        if cmd == "check":
            simulated = load_config(getattr(args, "config", None)).governance_count_simulated
            d = accounts.check(session, args.name, gpus=args.gpus, hours=args.hours,
                               gpu_model=args.gpu_model, model=args.model,
                               tiers=_tiers(args), count_simulated=simulated)  # fmt: skip
            return _print_decision(accounts.decision_json(d), args.json)
        if cmd == "list":
            found = accounts.list_accounts(session)
            if args.json:
                _emit([_account_json(a) for a in found])
            for a in [] if args.json else found:
                print(f"{a.name}: {a.state}, {a.country or 'no country'}, caps {dict(a.caps)}")
            return 0
        if cmd == "show":
            a = accounts.get_account(session, args.name, with_pii=args.pii)
            if args.json:
                _emit(_account_json(a))
            else:
                for k, v in _account_json(a).items():
                    print(f"{k}: {v}")
                if not args.pii:
                    print("personal data: encrypted (--pii to show it)")
            return 0
        if cmd == "add":
            pii = accounts.PersonalData(
                legal_name=args.legal_name, beneficial_owners=tuple(args.owner),
                email=args.email, phone=args.phone, contacts_verified=args.contacts_verified,
                payment_reference=args.payment_reference, intended_use=args.intended_use,
            )  # fmt: skip
            caps = {k: v for k, v in _caps(args).items() if v is not None}
            a = accounts.add_account(session, args.name, pii, country=args.country, caps=caps)
        elif cmd == "verify":
            a = accounts.verify_account(session, args.name, valid_days=args.valid_days,
                                        evidence=args.evidence, by=args.by)  # fmt: skip
        else:
            a = accounts.update_account(session, args.name, status=args.status,
                                        caps=_caps(args) or None)  # fmt: skip
        session.commit()
    print(f"account {a.name}: {a.state}" + (f", caps {dict(a.caps)}" if a.caps else ""))
    if cmd == "verify":
        print(f"  verified {iso(a.verified_at)} by {args.by.strip()}; re-verification due "
              f"{iso(a.reverify_due)}")  # fmt: skip
    return 0


def _print_decision(doc: dict[str, Any], as_json: bool) -> int:
    if as_json:
        _emit(doc)
    else:
        print(f"{doc['decision']}: " + "; ".join(doc["reasons"]))
    return 0 if doc["decision"] == "allow" else 1
