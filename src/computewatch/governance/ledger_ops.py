"""The ledger of a server database: its signing key, export (a checkpoint first, so that the
whole export is signed), key rotation, the head the server publishes outside the database, and
verification in place (the same checks as on an export file, plus the published head).

Only the server (and ``computewatch ledger keygen``) creates a signing key: every other command
reads the key it is given and refuses, naming the file, when there is none."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from sqlalchemy import inspect, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from computewatch.errors import UsageError
from computewatch.ledger.chain import Entry, LedgerError, utc_now
from computewatch.ledger.keys import (
    CHECKPOINT_KIND,
    ROTATION_KIND,
    checkpoint_valid,
    create_private_key,
    key_id,
    load_or_create_private_key,
    load_private_key,
    rotation_body,
    rotation_keys,
)
from computewatch.ledger.verify import (
    Header,
    Problem,
    Verdict,
    export_lines,
    header_json,
    verify,
)
from computewatch.paths import data_home
from computewatch.serverdb.engine import Database, open_database, parse_url
from computewatch.serverdb.governance_models import LedgerEntryRow
from computewatch.serverdb.ledger_store import append, checkpoint, count, entries, start

KEY_FILENAME = "ledger-ed25519.pem"
ENV_KEY = "COMPUTEWATCH_LEDGER_KEY"
HEAD_SUFFIX = ".head.json"
"""The published head sits beside the key: ``ledger-ed25519.pem.head.json``."""


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


def publish_head(key_file: Path, cp: Entry) -> None:
    """Write the checkpoint ``cp`` as the server's published head beside its key (kept outside
    the database, so that deleting the newest entries from the database is caught)."""
    doc = {**dict(cp.body), "checkpoint_seq": cp.seq}
    path = head_path(key_file)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        tmp.write_text(json.dumps(doc, sort_keys=True) + "\n", encoding="ascii")
        os.replace(tmp, path)
    except OSError as e:
        raise LedgerError(f"cannot write the published head {path}: {e.strerror or e}") from None
    finally:
        tmp.unlink(missing_ok=True)


def read_head(path: Path) -> Mapping[str, Any]:
    try:
        doc = json.loads(path.read_text(encoding="ascii"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise LedgerError(f"cannot read the published head {path}: {e}", exit_code=2) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("head_seq"), int):
        raise LedgerError(f"{path} is not a published ledger head", exit_code=2)
    return doc


def _last_checkpoint(session: Session) -> Entry | None:
    row = session.scalars(
        select(LedgerEntryRow)
        .where(LedgerEntryRow.kind == CHECKPOINT_KIND)
        .order_by(LedgerEntryRow.seq.desc())
        .limit(1)
    ).first()
    if row is None:
        return None
    return Entry(row.seq, row.time, row.kind, json.loads(row.body), row.prev, row.hash)


def _log_keys(db: Database) -> tuple[str | None, list[Ed25519PublicKey]]:
    """The key id of the newest checkpoint and every key the rotations in the log name."""
    keys: list[Ed25519PublicKey] = []
    with db.session() as session:
        last = _last_checkpoint(session)
        rows = session.scalars(
            select(LedgerEntryRow.body).where(LedgerEntryRow.kind == ROTATION_KIND)
        ).all()
    for body in rows:
        pair = rotation_keys(json.loads(body))
        if pair is not None:
            keys.extend(pair)
    newest = None if last is None else str(last.body.get("key_id"))
    return newest, keys


def _check_signer(db: Database, key: Ed25519PrivateKey, key_file: Path) -> list[Ed25519PublicKey]:
    """Refuse to sign with a key other than the one the log's newest checkpoint (or key
    rotation) names; returns every key the log's heads were signed with."""
    newest, rotated = _log_keys(db)
    mine = key_id(key.public_key())
    current = key_id(rotated[-1]) if rotated else newest
    if current is not None and current != mine:
        raise LedgerError(
            f"the key {key_file} (id {mine}) is not the server's: the ledger is signed by key "
            f"{current}; give the server's key with --key FILE",
            exit_code=2,
        )
    keys = {key_id(k): k for k in rotated}
    keys[mine] = key.public_key()
    return list(keys.values())


def sign_head(db: Database, key: Ed25519PrivateKey, key_file: Path | None = None) -> None:
    """Append a checkpoint signing the chain's current head (nothing when it is one already)
    and publish it beside the key."""
    with db.session() as session:
        checkpoint(session, key)
        session.commit()
    if key_file is not None:
        publish_latest(db, key_file)


def publish_latest(db: Database, key_file: Path) -> None:
    """Publish the newest checkpoint of the database beside the key (when there is one)."""
    with db.session() as session:
        cp = _last_checkpoint(session)
    if cp is not None:
        publish_head(key_file, cp)


def export(db: Database, key: Ed25519PrivateKey, key_file: Path | None = None) -> Iterator[bytes]:
    """The export's lines: the chain's head is signed first, then read in one snapshot. The
    header carries every key the log's checkpoints were signed with."""
    keys = _check_signer(db, key, key_file or key_path())
    sign_head(db, key, key_file)
    with db.session() as session:
        first_seq, first_prev = start(session)
        n = count(session)
        head = header_json(
            keys, exported_at=utc_now(), entries=n, first_seq=first_seq, first_prev=first_prev
        )
        yield from export_lines(head, entries(session))


def rotate(db: Database, old: Ed25519PrivateKey, new: Ed25519PrivateKey, key_file: Path) -> Entry:
    """Retire ``old``: its last checkpoint, a key-rotation entry signed by it, and the first
    checkpoint by ``new``; the new head is published beside ``key_file``."""
    _check_signer(db, old, key_file)
    with db.session() as session:
        checkpoint(session, old)
        entry = append(session, ROTATION_KIND, rotation_body(old, new.public_key()))
        checkpoint(session, new)
        session.commit()
    publish_latest(db, key_file)
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


def verify_database(
    db: Database, trusted: Ed25519PublicKey | None, head: Path | None = None
) -> Verdict:
    """Verify the chain as the database holds it now (the server's own public key is trusted
    when no other is given: it lives in a file, outside the database), then that the database
    still holds the head the server published (``head``, kept beside the key)."""
    with db.session() as session:
        first_seq, first_prev = start(session)
        chain = list(entries(session))
    if not chain and first_seq == 1:
        raise UsageError("the database holds no ledger entries: check --db")
    header = Header({}, first_seq=first_seq, first_prev=first_prev)
    verdict = verify(chain, header, trusted)
    if not verdict.ok:
        return verdict
    if head is None or not head.exists():
        where = "" if head is None else f" ({head} does not exist)"
        verdict.notes.append(
            f"no published head to compare with{where}: entries deleted from the end of the "
            "database cannot be detected"
        )
        return verdict
    published = read_head(head)
    seq = int(published["head_seq"])
    key = trusted
    if (
        key is None
        or published.get("key_id") != key_id(key)
        or not checkpoint_valid(published, key)
    ):
        return _fail(verdict, seq, "signature",
                     f"the published head {head} is not signed by the trusted key")  # fmt: skip
    index = seq - first_seq
    if not 0 <= index < len(chain):
        last = chain[-1].seq if chain else first_seq - 1
        return _fail(verdict, last + 1, "removed",
                     f"entries {last + 1} to {seq} were removed from the end: the database ends "
                     f"at entry {last} but the server published a signed head at entry {seq} "
                     f"({head})")  # fmt: skip
    if chain[index].hash != published.get("head_hash"):
        return _fail(verdict, seq, "altered",
                     f"entry {seq} differs from the head the server published ({head}): the "
                     "entries up to it were rewritten")  # fmt: skip
    return verdict


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
