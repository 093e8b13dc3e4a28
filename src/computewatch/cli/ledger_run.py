"""``computewatch ledger ...``: thin commands over computewatch.ledger and
computewatch.governance (parsers in :mod:`computewatch.cli.governance`). Exit status 0: what was
checked holds; 1: it does not (named); 2: usage (a missing file or key, a mistyped ``--db``)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from computewatch import jsonout
from computewatch.config import load_config
from computewatch.errors import PROG, UsageError
from computewatch.governance.witness import open_state, poll_once, read_witness_key
from computewatch.ledger.audit import Previous, WitnessKey, verify_log
from computewatch.ledger.chain import LedgerError
from computewatch.ledger.keys import encode_public, key_id, read_public_key
from computewatch.ledger.log import open_export, parse_entry, read_header
from computewatch.ledger.merkle import verify_consistency
from computewatch.ledger.note import Checkpoint, parse_checkpoint
from computewatch.ledger.proofs import check_proof, consistency_doc
from computewatch.ledger.verify import Problem, Verdict, read_export, verify
from computewatch.units import format_bytes

if TYPE_CHECKING:
    from computewatch.governance import remote

# The server database's side of the ledger (SQLAlchemy and the server's tables, ~0.3 s to load)
# is imported by the commands that use it: checking an export file never does.

__all__ = ["cmd_ledger"]


def _emit(doc: object, out: Any = None) -> None:
    f = out or sys.stdout
    jsonout.dump(doc, f, indent=2)
    f.write("\n")


def _key_file(args: argparse.Namespace) -> Path:
    from computewatch.governance.ledger_ops import key_path  # server database side

    return key_path(Path(args.key).expanduser() if getattr(args, "key", None) else None)


def _remote(args: argparse.Namespace) -> remote.Remote | None:
    from computewatch.governance import remote  # server database side

    if getattr(args, "db", None):
        return None
    return remote.from_settings(load_config(getattr(args, "config", None)), args.server, args.token)


def cmd_ledger(args: argparse.Namespace) -> int:
    cmd = args.ledger_cmd
    if cmd == "public-key":
        from computewatch.governance.ledger_ops import server_key  # server database side

        print(encode_public(server_key(_key_file(args)).public_key()))
        return 0
    if cmd == "keygen":
        return _keygen(args)
    if cmd == "export":
        return _export(args)
    if cmd == "head":
        return _head(args)
    if cmd == "prove":
        return _prove(args)
    if cmd == "check-proof":
        return _check_proof(args)
    if cmd == "replay":
        return _replay(args)
    if cmd == "witness":
        return _witness(args)
    return _verify(args)


def _export(args: argparse.Namespace) -> int:
    from computewatch.governance.ledger_ops import (  # server database side
        export,
        open_existing,
        server_key,
        write_export,
    )
    from computewatch.serverdb.engine import upgrade  # server database side

    out = Path(args.output).expanduser()
    server = _remote(args)
    if server is not None:
        size = write_export(server.ledger_export(), out)
    else:
        path = _key_file(args)
        key = server_key(path)
        db = open_existing(args.db)
        upgrade(db)
        size = write_export(export(db, key, path), out)
    print(f"{PROG}: ledger written to {out} ({format_bytes(size)})", file=sys.stderr)
    return 0


def _keygen(args: argparse.Namespace) -> int:
    from computewatch.governance.ledger_ops import (  # server database side
        keygen,
        open_existing,
        rotate,
        server_key,
    )
    from computewatch.serverdb.engine import upgrade  # server database side

    path = _key_file(args)
    if not args.rotate:
        if args.db:
            raise UsageError("ledger keygen: --db goes with --rotate")
        print(encode_public(keygen(path).public_key()))
        return 0
    old = server_key(path)
    db = open_existing(args.db)
    upgrade(db)
    fresh = path.with_name(path.name + ".new")
    fresh.unlink(missing_ok=True)
    new = keygen(fresh)
    try:
        rotate(db, old, new, path)
    except BaseException:
        fresh.unlink(missing_ok=True)
        raise
    retired = path.with_name(f"{path.name}.{key_id(old.public_key())}.retired")
    os.replace(path, retired)
    os.replace(fresh, path)
    print(encode_public(new.public_key()))
    print(f"{PROG}: key rotated; the old key is kept as {retired}", file=sys.stderr)
    return 0


# -- heads and proofs ------------------------------------------------------------------------------


def _head(args: argparse.Namespace) -> int:
    from computewatch.governance.ledger_ops import (  # server database side
        head_doc,
        newest_head,
        open_existing,
    )

    server = _remote(args)
    if server is not None:
        doc = server.ledger_head()
        cp = parse_checkpoint(str(doc.get("checkpoint")))
    else:
        db = open_existing(args.db)
        with db.session() as session:
            cp = newest_head(session).checkpoint()
    if args.json:
        _emit(head_doc(cp))
    else:
        sys.stdout.write(cp.text())
    return 0


def _write_proof(doc: dict[str, Any], args: argparse.Namespace) -> None:
    if args.output:
        out = Path(args.output).expanduser()
        with open(out, "w", encoding="utf-8") as f:
            _emit(doc, f)
        print(f"{PROG}: proof written to {out}", file=sys.stderr)
    else:
        _emit(doc)


def _prove(args: argparse.Namespace) -> int:
    from computewatch.governance.ledger_ops import (  # server database side
        open_existing,
        prove_consistency,
        prove_inclusion,
        read_head_file,
    )

    server = _remote(args)
    if args.proof == "inclusion":
        head = None if args.head is None else read_head_file(Path(args.head).expanduser())
        if server is not None:
            doc = server.inclusion_proof(args.seq, None if head is None else head.size)
            if head is not None:
                served = parse_checkpoint(str(doc.get("checkpoint")))
                if served.root != head.root:
                    raise LedgerError(
                        f"the server's head at size {head.size} differs from "
                        f"{args.head}: the log was rewritten (a fork)"
                    )
                doc["checkpoint"] = head.text()
        else:
            db = open_existing(args.db)
            with db.session() as session:
                doc = prove_inclusion(session, args.seq, head)
        _write_proof(doc, args)
        return 0
    old = read_head_file(Path(args.old).expanduser())
    new = None if args.new is None else read_head_file(Path(args.new).expanduser())
    if server is not None:
        answer = server.consistency_proof(old.size, None if new is None else new.size)
        served = parse_checkpoint(str(answer.get("checkpoint")))
        if new is not None and served.root != new.root:
            raise LedgerError(
                f"the server's head at size {new.size} differs from {args.new}: "
                "the log was rewritten (a fork)"
            )
        proof = [bytes.fromhex(str(h)) for h in answer.get("proof") or []]
        doc = consistency_doc(old, new or served, proof)
    else:
        db = open_existing(args.db)
        with db.session() as session:
            doc = prove_consistency(session, old, new)
    _extends(doc, old, args.old)
    _write_proof(doc, args)
    return 0


def _extends(doc: dict[str, Any], old: Checkpoint, label: str) -> None:
    """A consistency proof is printed only when it holds: the log's tree at the old head's size
    must be the old head's (else the log was rewritten since that head was signed)."""
    new = parse_checkpoint(str(doc["checkpoint"]))
    proof = [bytes.fromhex(str(h)) for h in doc["proof"]]
    if not verify_consistency(old.size, new.size, old.root, new.root, proof):
        raise LedgerError(
            f"the log's head at size {new.size} does not extend {label} (size {old.size}): "
            "the log was rewritten since that head was signed (a fork); no proof written"
        )


def _check_proof(args: argparse.Namespace) -> int:
    path = Path(args.file).expanduser()
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as e:
        raise LedgerError(f"cannot read the proof {path}: {e}", exit_code=2) from None
    key = read_public_key(Path(args.public_key).expanduser())
    result = check_proof(doc, key)
    if args.json:
        _emit(
            {"ok": result.ok, "type": result.type, "size": result.size, "message": result.message}
        )
    elif result.ok:
        print(f"holds: {result.message}")
    else:
        print(f"DOES NOT HOLD ({result.type}): {result.message}")
    return 0 if result.ok else 1


# -- verification ----------------------------------------------------------------------------------


def _previous(text: str) -> Previous:
    from computewatch.governance.ledger_ops import read_head_file  # server database side

    path = Path(text).expanduser()
    try:
        with open(path, "rb") as f:
            first = f.readline(1 << 20)
    except OSError as e:
        raise LedgerError(
            f"cannot read --previous {path}: {e.strerror or e}", exit_code=2
        ) from None
    if first.lstrip().startswith(b"{") and b'"format"' in first:
        old = open_export(path)
        if old.version != 2:
            raise UsageError(
                f"--previous {path}: an export of format {old.version}; compare "
                "exports of the transparency log (format 2)"
            )
        return Previous(str(path), header=old.header, lines=old.lines())
    return Previous(str(path), head=read_head_file(path))


def _verify(args: argparse.Namespace) -> int:
    if bool(args.file) == bool(args.db):
        raise UsageError("ledger verify: give an export FILE or --db URL (one of them)")
    trusted = None
    if args.public_key:
        trusted = read_public_key(Path(args.public_key).expanduser())
    witnesses = [WitnessKey(*read_witness_key(w)) for w in args.witness_key]
    k = args.witnesses_required
    if k is not None and not witnesses:
        raise UsageError("ledger verify: --witnesses-required goes with --witness-key")
    if k is not None and k > len(witnesses):
        raise UsageError(f"ledger verify: {k} witnesses required but {len(witnesses)} given")
    if args.file:
        if args.head:
            raise UsageError("ledger verify: --head goes with --db")
        stdin = args.file == "-"  # the export piped in: read as the file the system names it
        path = Path("/dev/stdin") if stdin else Path(args.file).expanduser()
        verdict = _verify_file(path, trusted, args, witnesses, k or 1)
        where = "standard input" if stdin else args.file
    else:
        if args.previous or witnesses:
            raise UsageError("ledger verify: --previous and --witness-key go with an export FILE")
        from computewatch.governance.ledger_ops import (  # server database side
            head_path,
            open_existing,
            server_key,
            verify_database,
        )
        from computewatch.governance.service import (  # server database side
            projection_problems,
            replay_log,
        )

        db = open_existing(args.db)
        path = _key_file(args)
        if trusted is None and path.exists():  # the server's own key: a file outside the DB
            trusted = server_key(path).public_key()
        head = Path(args.head).expanduser() if args.head else head_path(path)
        verdict = verify_database(db, trusted, head)
        if verdict.ok:
            with db.session() as session:
                problems = projection_problems(session, replay_log(session))
            if problems:
                verdict.problem = Problem(
                    0,
                    "tables",
                    problems[0] + (f" ({len(problems) - 1} more)" if len(problems) > 1 else ""),
                )
        where = "the database"
    _print_verdict(verdict, where, args.json)
    return 0 if verdict.ok else 1


def _verify_file(
    path: Path, trusted: Any, args: argparse.Namespace, witnesses: list[WitnessKey], k: int
) -> Verdict:
    ex = open_export(path)
    if ex.version == 1:
        ex.close()
        if args.file == "-":
            raise UsageError(
                "ledger verify: an export of format 1 (the hash chain) is read twice: give its "
                "FILE, not standard input"
            )
        if args.previous or witnesses:
            raise UsageError(
                f"{path} is an export of format 1 (the hash chain): --previous and "
                "--witness-key check exports of the transparency log"
            )
        header, entries = read_export(path)
        verdict = verify(entries, header, trusted, require_signed_head=not args.allow_unsigned_tail)
        verdict.notes.append("an export of format 1 (the hash chain before the transparency log)")
    else:
        previous = None if args.previous is None else _previous(args.previous)
        jobs = args.jobs if args.jobs else _default_jobs(path)
        verdict = verify_log(
            ex.header,
            ex.lines(),
            trusted,
            require_signed_head=not args.allow_unsigned_tail,
            witnesses=witnesses,
            witnesses_required=k,
            previous=previous,
            jobs=jobs,
        )
    if args.allow_unsigned_tail and verdict.ok:
        verdict.notes.append(
            "--allow-unsigned-tail: entries after the newest signed head were checked only "
            "against each other; nothing proves the server wrote them or that the export is "
            "whole"
        )
    return verdict


SMALL_EXPORT = 8 << 20
"""Below this size (bytes) an export is checked in this process: starting workers costs more."""


def _default_jobs(path: Path) -> int:
    try:
        if path.stat().st_size < SMALL_EXPORT:
            return 1
    except OSError:
        return 1
    return max(1, min(4, os.cpu_count() or 1))


def _print_verdict(v: Verdict, where: str, as_json: bool) -> None:
    if as_json:
        doc: dict[str, Any] = {
            "ok": v.ok,
            "format": v.version,
            "entries": v.entries,
            "checkpoints": v.checkpoints,
            "last_signed_seq": v.last_signed_seq,
            "reports": v.reports_json(),
            "problem": None
            if v.problem is None
            else {"seq": v.problem.seq, "what": v.problem.what, "message": v.problem.message},
            "notes": v.notes,
        }
        if v.version >= 2:
            doc.update(
                size=v.size, root=v.root, heads=v.checkpoints, witnessed_size=v.witnessed_size
            )
        _emit(doc)
        return
    for note in v.notes:
        print(f"{PROG}: note: {note}", file=sys.stderr)
    if v.problem is not None:
        print(f"TAMPERED ({v.problem.what}) in {where}: {v.problem.message}")
        return
    if v.version >= 2:
        signed = "none" if v.last_signed_seq is None else f"up to entry {v.last_signed_seq}"
        print(
            f"intact: {v.entries} entries, root {v.root} at size {v.size}, "
            f"{v.checkpoints} signed heads (signed {signed})"
        )
        if v.witnessed_size is not None:
            print(f"witnessed: the head at size {v.witnessed_size} is cosigned as required")
    else:
        signed = "none" if v.last_signed_seq is None else f"up to entry {v.last_signed_seq}"
        print(f"intact: {v.entries} entries, {v.checkpoints} signed checkpoints (signed {signed})")
    unknown = f", {v.reports_unknown_key} signed by keys not registered before them" * bool(
        v.reports_unknown_key
    )
    old = f", {v.reports_figures_unsigned} of them in the first format (figures not signed)" * bool(
        v.reports_figures_unsigned
    )
    print(
        f"{v.reports} run reports: {v.reports_signed} signed by known nodes, "
        f"{v.reports_unsigned} unsigned{unknown}{old}"
    )


# -- replay ----------------------------------------------------------------------------------------


def _entries(path: Path) -> Iterator[Any]:
    ex = open_export(path)
    for n, line in enumerate(ex.lines(), 2):
        yield parse_entry(line, f"{path}:{n}")


def _replay(args: argparse.Namespace) -> int:
    from computewatch.governance.replay import PRUNE, Replay  # server database side
    from computewatch.governance.service import fresh_replay  # server database side
    from computewatch.governance.status import status_json  # server database side

    path = Path(args.file).expanduser()
    ex = open_export(path)
    if ex.version != 2:
        ex.close()
        raise UsageError(f"{path} is an export of format 1: replay reads the transparency log")
    header = read_header(ex.header_doc, f"{path}:1")
    ex.close()
    prune = None
    if header.first_seq > 1:  # what the pruned entries added up to is replayed first
        for e in _entries(path):
            if e.kind == PRUNE and e.body.get("first_seq") == header.first_seq:
                prune = e.body
    r: Replay = fresh_replay(header.first_seq, prune).feed_all(_entries(path))
    now = time.time() if args.at is None else args.at
    doc = status_json(r.statuses(), now)
    if args.json:
        _emit(doc)
    else:
        # the text view and its rich tables load only for a human reader
        from computewatch.cli.governance_run import print_status

        print_status(doc)
    for seq, message in r.problems:
        print(f"{PROG}: entry {seq}: {message}", file=sys.stderr)
    return 1 if r.problems else 0


# -- witness ---------------------------------------------------------------------------------------


def _witness(args: argparse.Namespace) -> int:
    from computewatch.governance import remote  # server database side

    if not args.interval > 0:
        raise UsageError("--interval: seconds above 0")
    log_key = read_public_key(Path(args.public_key).expanduser())
    state = open_state(Path(args.state).expanduser(), args.name)
    client = remote.Remote(args.log, args.token or os.environ.get("COMPUTEWATCH_TOKEN"))
    print(
        f"{PROG}: witness {state.name}; its key for auditors ({state.dir / 'witness.vkey'}): "
        f"{state.vkey}",
        file=sys.stderr,
    )
    while True:
        try:
            outcome = poll_once(state, client, log_key)
        except Exception as e:  # the log away, a malformed answer: said, tried next poll
            if args.once:
                raise
            print(f"{PROG}: witness: {e}", file=sys.stderr)
            time.sleep(args.interval)
            continue
        if args.json:
            _emit(outcome.to_json())
        if outcome.ok:
            if not args.json:
                print(f"{PROG}: witness: {outcome.message}", file=sys.stderr)
        else:
            where = "" if outcome.evidence is None else f"; evidence kept in {outcome.evidence}"
            print(
                f"{PROG}: ALERT: witness refuses the log's head: {outcome.message}{where}",
                file=sys.stderr,
            )
            if args.once:
                return 1
        if args.once:
            return 0
        time.sleep(args.interval)
