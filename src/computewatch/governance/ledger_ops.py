"""The ledger of a server database: its signing key, export (a checkpoint first, so that the
whole export is signed) and verification in place (the same checks as on an export file)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from computewatch.ledger.chain import utc_now
from computewatch.ledger.keys import load_or_create_private_key
from computewatch.ledger.verify import Header, Verdict, export_lines, header_json, verify
from computewatch.paths import data_home
from computewatch.serverdb.engine import Database
from computewatch.serverdb.ledger_store import checkpoint, count, entries, start

KEY_FILENAME = "ledger-ed25519.pem"
ENV_KEY = "COMPUTEWATCH_LEDGER_KEY"


def key_path(configured: Path | None = None) -> Path:
    """The server's signing key: ``--key``/``[governance] ledger_key``, else
    ``$COMPUTEWATCH_LEDGER_KEY``, else ``$COMPUTEWATCH_HOME/ledger-ed25519.pem``."""
    if configured is not None:
        return configured
    env = os.environ.get(ENV_KEY)
    return Path(env).expanduser() if env else data_home() / KEY_FILENAME


def server_key(configured: Path | None = None) -> Ed25519PrivateKey:
    return load_or_create_private_key(key_path(configured))


def sign_head(db: Database, key: Ed25519PrivateKey) -> None:
    """Append a checkpoint signing the chain's current head (nothing when it is one already)."""
    with db.session() as session:
        checkpoint(session, key)
        session.commit()


def export(db: Database, key: Ed25519PrivateKey) -> Iterator[bytes]:
    """The export's lines: the chain's head is signed first, then read in one snapshot."""
    sign_head(db, key)
    with db.session() as session:
        first_seq, first_prev = start(session)
        n = count(session)
        head = header_json(
            [key.public_key()], exported_at=utc_now(), entries=n,
            first_seq=first_seq, first_prev=first_prev,
        )  # fmt: skip
        yield from export_lines(head, entries(session))


def verify_database(db: Database, trusted: Ed25519PublicKey | None) -> Verdict:
    """Verify the chain as the database holds it now (the server's own public key is trusted
    when no other is given: it lives in a file, outside the database)."""
    with db.session() as session:
        first_seq, first_prev = start(session)
        chain = list(entries(session))
    header = Header({}, first_seq=first_seq, first_prev=first_prev)
    return verify(chain, header, trusted)


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
