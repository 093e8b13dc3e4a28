"""The ledger of a server database: its signing key, signed heads (published beside the key as
well), export (the tree signed at its size first, so that the whole export is signed), key
rotation, and verification in place (the same checks as on an export file, plus every stored
leaf hash and the head published outside the database).

Only the server (and ``computewatch ledger keygen``) creates a signing key: every other command
reads the key it is given and refuses, naming the file, when there is none."""

from __future__ import annotations

import base64
import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from sqlalchemy import inspect, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from computewatch.errors import UsageError
from computewatch.ledger.audit import LogProblem, verify_log
from computewatch.ledger.chain import LedgerError, utc_now
from computewatch.ledger.keys import (
    ROTATION_KIND,
    create_private_key,
    decode_public,
    encode_public,
    key_id,
    load_or_create_private_key,
    load_private_key,
    rotation_body,
    rotation_keys,
)
from computewatch.ledger.log import LogEntry, LogHeader, export_lines, header_json
from computewatch.ledger.note import Checkpoint, parse_checkpoint
from computewatch.ledger.proofs import consistency_doc, inclusion_doc
from computewatch.ledger.verify import Problem, Verdict
from computewatch.paths import data_home
from computewatch.serverdb.engine import SQLITE_BEGIN, Database, open_database, parse_url
from computewatch.serverdb.governance_models import LedgerEntryRow
from computewatch.serverdb.ledger_store import (
    Head,
    append,
    consistency,
    cosigned_heads,
    entry,
    head_at,
    head_keys,
    heads,
    inclusion,
    latest_head,
    leaves,
    lines,
    origin,
    prefix,
    root_at,
    size,
    start,
)
from computewatch.serverdb.ledger_store import sign_head as sign_head_in

KEY_FILENAME = "ledger-ed25519.pem"
ENV_KEY = "COMPUTEWATCH_LEDGER_KEY"
HEAD_SUFFIX = ".checkpoint"
"""The published head sits beside the key: ``ledger-ed25519.pem.checkpoint`` (a checkpoint
note)."""


def key_path(configured: Path | None = None) -> Path:
    """The server's signing key: ``--key``/``[governance] ledger_key``, else
    ``$COMPUTEWATCH_LEDGER_KEY``, else ``$COMPUTEWATCH_HOME/ledger-ed25519.pem``."""
    if configured is not None:
        return configured
    env = os.environ.get(ENV_KEY)
    return Path(env).expanduser() if env else data_home() / KEY_FILENAME


def server_key(configured: Path | None = None, *, create: bool = False) -> Ed25519PrivateKey:
    """The server's signing key. Only the server itself passes ``create=True``; anything else
    refuses (exit status 2, naming the file) when the key is missing."""
    path = key_path(configured)
    return load_or_create_private_key(path) if create else load_private_key(path)


def keygen(configured: Path | None = None) -> Ed25519PrivateKey:
    """A new signing key at the key path (refused when a file is there)."""
    return create_private_key(key_path(configured))


def head_path(key_file: Path) -> Path:
    return key_file.with_name(key_file.name + HEAD_SUFFIX)


def publish_head(key_file: Path, head: Head) -> None:
    """Write ``head`` (its checkpoint note) as the server's published head beside its key: kept
    outside the database, so that deleting the newest entries from the database is caught."""
    path = head_path(key_file)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        tmp.write_text(head.note, encoding="utf-8")
        os.replace(tmp, path)
    except OSError as e:
        raise LedgerError(f"cannot write the published head {path}: {e.strerror or e}") from None
    finally:
        tmp.unlink(missing_ok=True)


def read_head_file(path: Path) -> Checkpoint:
    """A signed head from a file: its checkpoint note as ``ledger head`` prints it, or the JSON
    of ``ledger head --json`` (its ``checkpoint``). Unreadable: exit status 2."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise LedgerError(f"cannot read the head {path}: {e}", exit_code=2) from None
    if text.lstrip().startswith("{"):
        try:
            doc = json.loads(text)
        except (ValueError, RecursionError):
            doc = None
        note = doc.get("checkpoint") if isinstance(doc, dict) else None
        if not isinstance(note, str):
            raise LedgerError(f"{path} holds JSON without a checkpoint", exit_code=2)
        text = note
    try:
        return parse_checkpoint(text)
    except LedgerError as e:
        raise LedgerError(f"{path} is not a signed head: {e}", exit_code=2) from None


def _signers(session: Session) -> tuple[str | None, list[Ed25519PublicKey]]:
    """The key id that signs the log now (the newest head's, or the successor a key rotation
    after it names) and every key its heads and rotations hold."""
    latest = latest_head(session)
    keys = {kid: decode_public(pk) for kid, pk in head_keys(session).items()}
    current = None if latest is None else latest.key_id
    rows = session.execute(
        select(LedgerEntryRow.seq, LedgerEntryRow.body)
        .where(LedgerEntryRow.kind == ROTATION_KIND).order_by(LedgerEntryRow.seq)
    ).all()  # fmt: skip
    for seq, body in rows:
        pair = rotation_keys(json.loads(body))
        if pair is None:
            continue
        for k in pair:
            keys[key_id(k)] = k
        if latest is None or seq > latest.size:
            current = key_id(pair[1])
    return current, list(keys.values())


def check_signer(db: Database, key: Ed25519PrivateKey, key_file: Path) -> list[Ed25519PublicKey]:
    """Refuse to sign with a key other than the one the log's newest head (or key rotation)
    names; returns every key the log's heads were signed with, ``key`` among them."""
    with db.session() as session:
        current, keys = _signers(session)
    mine = key_id(key.public_key())
    if current is not None and current != mine:
        raise LedgerError(
            f"the key {key_file} (id {mine}) is not the server's: the ledger is signed by key "
            f"{current}; give the server's key with --key FILE",
            exit_code=2,
        )
    held = {key_id(k): k for k in keys}
    held[mine] = key.public_key()
    return list(held.values())


def sign_head(db: Database, key: Ed25519PrivateKey, key_file: Path | None = None,
              now: float | None = None) -> Head:  # fmt: skip
    """Sign the tree at its current size (the latest head when it covers the tree already)
    and publish it beside the key."""
    with db.writing(), db.session() as session:
        _immediate(session)
        head = sign_head_in(session, key, now=now)
        session.commit()
    if key_file is not None:
        publish_head(key_file, head)
    return head


def _immediate(session: Session) -> None:
    """On SQLite, take the write lock at BEGIN: an append reads the tree's edge, then writes."""
    if session.get_bind().dialect.name == "sqlite":
        session.connection(execution_options={SQLITE_BEGIN: "IMMEDIATE"})


def export(db: Database, key: Ed25519PrivateKey, key_file: Path | None = None) -> Iterator[bytes]:
    """The export's lines: the tree is signed at its size first, then read up to that size.
    The header carries every key the log's heads were signed with, the new head and, for each
    witness, the newest head it cosigned."""
    keys = check_signer(db, key, key_file or key_path())
    head = sign_head(db, key, key_file)
    with db.session() as session:
        n = head.size
        first = start(session)
        held = [h for h in cosigned_heads(session, n) if h.size != n]
        top = head_at(session, n) or head
        name = origin(session) or ""
        header = header_json(
            origin=name, exported_at=utc_now(),
            public_keys={key_id(k): encode_public(k) for k in keys}, first_seq=first,
            prefix=prefix(session), entries=max(0, n - first + 1),
            heads=[*(h.text() for h in held), top.text()],
        )  # fmt: skip
        yield from export_lines(header, lines(session, upto=n))


def rotate(db: Database, old: Ed25519PrivateKey, new: Ed25519PrivateKey,
           key_file: Path) -> LogEntry:  # fmt: skip
    """Retire ``old``: its last head, a key-rotation entry signed by it, and the first head
    signed by ``new``; the new head is published beside ``key_file``."""
    check_signer(db, old, key_file)
    with db.writing(), db.session() as session:
        _immediate(session)
        sign_head_in(session, old)
        entry = append(session, ROTATION_KIND, rotation_body(old, new.public_key()))
        head = sign_head_in(session, new)
        session.commit()
    publish_head(key_file, head)
    return entry


def open_existing(url: str | None) -> Database:
    """The server database at ``url`` as it is: a SQLite file that does not exist, or a
    database without a ledger, is a usage error (exit status 2); nothing is created."""
    u = parse_url(url)
    if u.get_backend_name() == "sqlite":
        path = Path(u.database or "").expanduser()
        if not u.database or not path.is_file():
            raise UsageError(f"no database at {path}: check --db (nothing was created)")
    db = open_database(u)
    try:
        with db.engine.connect() as conn:
            has = inspect(conn).has_table(LedgerEntryRow.__tablename__)
    except SQLAlchemyError as e:
        db.dispose()
        raise UsageError(f"cannot open the database {u.render_as_string()}: {e}") from None
    if not has:
        db.dispose()
        raise UsageError(f"{u.render_as_string()} holds no ledger: check --db")
    return db


VERIFY_NEWEST_HEADS = 1000
"""``verify --db`` checks the root against this many of the newest stored heads (and every
cosigned one, and the published one): the newest covers every entry."""


def verify_database(
    db: Database, trusted: Ed25519PublicKey | None, head: Path | None = None
) -> Verdict:
    """Verify the log as the database holds it now: every entry's bytes against the leaf hash
    the tree stored (naming the entry changed), the root recomputed over them against every
    head stored and the head the server published beside its key (``head``; deleting the
    newest entries is caught), each signed by ``trusted`` (the server's own key when none is
    given: it lives in a file, outside the database)."""
    with db.session() as session:
        n, first = size(session), start(session)
        if n == 0:
            raise UsageError("the database holds no ledger entries: check --db")
        stored = list(heads(session, newest=VERIFY_NEWEST_HEADS))
        _, keys = _signers(session)
        published = None
        if head is not None and head.exists():
            published = read_head_file(head)
        if published is not None and published.size > n:
            v = Verdict(version=2)
            return _fail(v, n + 1, "removed",
                         f"entries {n + 1} to {published.size} were removed from the end: the "
                         f"database ends at entry {n} but the server published a signed head at "
                         f"size {published.size} ({head})")  # fmt: skip
        header = LogHeader(
            origin=origin(session) or (stored[0].checkpoint().origin if stored else ""),
            public_keys={key_id(k): encode_public(k) for k in keys},
            first_seq=first, prefix=tuple(prefix(session)), entries=None,
            heads=tuple(h.note for h in stored)
            + (() if published is None else (published.without_cosignatures().text(),)),
        )  # fmt: skip
        checked = _against_stored_leaves(session, first, n)
        verdict = verify_log(header, checked, trusted, require_signed_head=False)
    if not verdict.ok:
        return verdict
    if published is None:
        where = "" if head is None else f" ({head} does not exist)"
        verdict.notes.append(
            f"no published head to compare with{where}: entries deleted from the end of the "
            "database, with their heads, cannot be detected"
        )
    elif trusted is not None and not published.signed_by(published.origin, trusted):
        return _fail(verdict, published.size, "signature",
                     f"the published head {head} is not signed by the trusted key")  # fmt: skip
    if verdict.last_signed_seq is not None and verdict.last_signed_seq < n:
        verdict.notes.append(
            f"entries {verdict.last_signed_seq + 1} to {n} are newer than the last signed head "
            "(the server signs a head every few seconds)"
        )
    return verdict


def _against_stored_leaves(session: Session, first: int, n: int) -> Iterator[bytes]:
    """The database's entries, each checked against the leaf hash the tree stored for it
    (looked up by the entry's own seq, read in batches)."""
    window: dict[int, bytes] = {}
    low = high = 0
    batch = 20000
    for line in lines(session, upto=n):
        seq = _seq(line)
        if not low <= seq < high:
            low, high = seq, min(n + 1, seq + batch)
            window = dict(enumerate(leaves(session, low, high - 1), low))
        kept = window.get(seq)
        if kept is None or hashlib.sha256(b"\x00" + line).digest() != kept:
            raise LogProblem(seq, "altered", f"entry {seq} was altered: its content no longer "
                             "matches the leaf hash the tree stored for it")  # fmt: skip
        yield line


def _seq(line: bytes) -> int:
    tail = line.rsplit(b',"seq":', 1)[-1]
    digits = tail.split(b",", 1)[0]
    return int(digits) if digits.isdigit() else 0


def _fail(v: Verdict, seq: int, what: str, message: str) -> Verdict:
    v.problem = Problem(seq, what, message)
    return v


def write_export(lines: Iterator[bytes], out: Path) -> int:
    """Write an export to ``out`` atomically (a temporary file renamed); returns its size."""
    tmp = out.with_name(f".{out.name}.tmp{os.getpid()}")
    size = 0
    try:
        with open(tmp, "wb") as f:
            for line in lines:
                f.write(line)
                size += len(line)
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return size


# -- heads and proofs from a database ------------------------------------------------------------


def head_doc(head: Head | Checkpoint) -> dict[str, object]:
    """``ledger head --json`` and ``GET /api/v1/ledger/head``."""
    cp = head.checkpoint() if isinstance(head, Head) else head
    return {"origin": cp.origin, "size": cp.size, "root": base64.b64encode(cp.root).decode(),
            "time": cp.time, "checkpoint": cp.text()}  # fmt: skip


def newest_head(session: Session) -> Head:
    h = latest_head(session)
    if h is None:
        raise LedgerError("the server has signed no head yet (it signs one within seconds of "
                          "starting; or run 'ledger export' on its database)")  # fmt: skip
    return h


def _held(session: Session, cp: Checkpoint, what: str) -> None:
    """The database's log must hold the tree ``cp`` signs (else the proof would be of another
    history: a fork, or a head of another log)."""
    name = origin(session)
    if name is not None and cp.origin != name:
        raise LedgerError(f"{what} is of the log {cp.origin!r}, not {name!r}", exit_code=2)
    if cp.size > size(session):
        raise LedgerError(f"{what} is at size {cp.size}, beyond the log's {size(session)} entries")
    if root_at(session, cp.size) != cp.root:
        raise LedgerError(f"the log at size {cp.size} does not have the root {what} signs: the "
                          "log was rewritten since (a fork)")  # fmt: skip


def prove_inclusion(
    session: Session, seq: int, head: Checkpoint | None = None
) -> dict[str, object]:
    """The inclusion proof of entry ``seq`` in the tree of ``head`` (default: the newest)."""
    cp = newest_head(session).checkpoint() if head is None else head
    if head is not None:
        _held(session, cp, "the head given")
    if not 1 <= seq <= cp.size:
        raise LedgerError(f"entry {seq} is not in the tree of {cp.size} entries", exit_code=2)
    line = entry(session, seq)
    if line is None:
        raise LedgerError(f"entry {seq} was pruned under the retention policy: its bytes are "
                          "gone, its leaf hash is not", exit_code=2)  # fmt: skip
    return inclusion_doc(line, seq, cp, inclusion(session, seq, cp.size))


def prove_consistency(session: Session, old: Checkpoint,
                      new: Checkpoint | None = None) -> dict[str, object]:  # fmt: skip
    """The consistency proof from ``old`` to ``new`` (default: the newest head)."""
    cp = newest_head(session).checkpoint() if new is None else new
    if new is not None:
        _held(session, cp, "the new head given")
    if old.size > cp.size:
        raise LedgerError(f"the old head (size {old.size}) is newer than the new one "
                          f"({cp.size})", exit_code=2)  # fmt: skip
    return consistency_doc(old, cp, consistency(session, old.size, cp.size))
