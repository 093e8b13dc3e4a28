"""What a dishonest operator can do, written for the tests: rewrite entries of an export or of the
server's database and sign the rewritten log again with the server's own key (the operator holds
it). Each tampering test shows what still catches it: an earlier export or head kept by someone
else (``verify --previous``), a witness, or a signature the operator does not hold (a node's)."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from computewatch.ledger import merkle
from computewatch.ledger.jcs import dumps, loads
from computewatch.ledger.keys import encode_public, key_id
from computewatch.ledger.log import line_from_parts
from computewatch.ledger.note import parse_checkpoint, sign_checkpoint

Edit = Callable[[dict[str, Any]], None]
"""Changes an entry document (``{"seq", "time", "kind", "body"}``) in place."""


def read_export(path: Path) -> tuple[dict[str, Any], list[bytes]]:
    raw = path.read_bytes().split(b"\n")
    if raw[-1] == b"":
        raw.pop()
    return json.loads(raw[0]), raw[1:]


def write_export(path: Path, header: dict[str, Any], lines: list[bytes]) -> None:
    path.write_bytes(b"".join(x + b"\n" for x in [dumps(header), *lines]))


def resign_export(
    header: dict[str, Any],
    lines: list[bytes],
    key: Ed25519PrivateKey,
    edits: dict[int, Edit] | None = None,
) -> tuple[dict[str, Any], list[bytes]]:
    """The export with ``edits`` (by seq) applied and every head signed again by ``key`` at the
    same sizes: what the operator can do with its key."""
    out = []
    for line in lines:
        doc = loads(line)
        assert isinstance(doc, dict)
        edit = (edits or {}).get(doc["seq"])
        if edit is not None:
            edit(doc)
        out.append(line if edit is None else dumps(doc))
    leaves = [merkle.leaf_hash(x) for x in out]
    heads = []
    for text in header["heads"]:
        cp = parse_checkpoint(text)
        root = merkle.root_of(leaves[: cp.size])
        heads.append(sign_checkpoint(cp.origin, cp.size, root, cp.time, key).text())
    pub = key.public_key()
    return {**header, "heads": heads, "public_keys": {key_id(pub): encode_public(pub)}}, out


def rewrite_database(db_file: Path, key: Ed25519PrivateKey, edits: dict[int, Edit]) -> None:
    """Rewrite entries of a SQLite server database and make everything agree again: the body
    changed, every subtree hash recomputed, every head and cosignature dropped and one head
    signed over the whole rewritten tree by ``key``."""
    with sqlite3.connect(db_file) as c:
        rows = c.execute("SELECT seq, time, kind, body FROM ledger_entries ORDER BY seq").fetchall()
        origin = c.execute("SELECT value FROM ledger_meta WHERE name = 'origin'").fetchone()[0]
        lines = []
        for seq, when, kind, stored in rows:
            body = stored
            if seq in edits:
                doc = {"seq": seq, "time": when, "kind": kind, "body": loads(stored)}
                edits[seq](doc)
                body = dumps(doc["body"]).decode()
                c.execute("UPDATE ledger_entries SET body = ? WHERE seq = ?", (body, seq))
            lines.append(line_from_parts(seq, when, kind, body))
        c.execute("DELETE FROM ledger_nodes")
        stack: list[tuple[int, bytes]] = []
        for i, line in enumerate(lines):
            h, level, index = merkle.leaf_hash(line), 0, i
            c.execute("INSERT INTO ledger_nodes (id, hash) VALUES (?, ?)", (index, h))
            while stack and stack[-1][0] == level:
                _, left = stack.pop()
                h, level, index = merkle.node_hash(left, h), level + 1, index >> 1
                c.execute(
                    "INSERT INTO ledger_nodes (id, hash) VALUES (?, ?)", (level << 48 | index, h)
                )
            stack.append((level, h))
        root = merkle.root_of(merkle.leaf_hash(x) for x in lines)
        c.execute("DELETE FROM ledger_cosignatures")
        c.execute("DELETE FROM ledger_heads")
        t = int(time.time())
        cp = sign_checkpoint(origin, len(lines), root, t, key)
        pub = key.public_key()
        c.execute(
            "INSERT INTO ledger_heads (size, root, signed_at, key_id, public_key, note) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (len(lines), root, t, key_id(pub), encode_public(pub), cp.text()),
        )
