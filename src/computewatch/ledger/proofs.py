"""Proof files (``ledger prove``) and their offline check (``ledger check-proof``): everything
a proof needs travels in it but the log's public key, which the auditor holds.

An inclusion proof::

    {"type": "inclusion", "origin": "...", "seq": 5, "size": 1234,
     "entry": "<the entry's bytes, as its export line>", "leaf_hash": "<hex>",
     "path": ["<hex>", ...], "checkpoint": "<the signed head of size 1234>"}

A consistency proof::

    {"type": "consistency", "origin": "...", "old_size": 1000, "size": 1234,
     "old_checkpoint": "<signed head of size 1000>", "checkpoint": "<signed head of size 1234>",
     "proof": ["<hex>", ...]}

Hashes are hex, leaf side first (RFC 9162 sections 2.1.3 and 2.1.4).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from computewatch.errors import ComputewatchError
from computewatch.ledger.chain import LedgerError
from computewatch.ledger.log import parse_entry
from computewatch.ledger.merkle import verify_consistency, verify_inclusion
from computewatch.ledger.note import Checkpoint, parse_checkpoint

__all__ = ["ProofCheck", "check_proof", "consistency_doc", "inclusion_doc"]


def inclusion_doc(
    entry: bytes, seq: int, head: Checkpoint, path: Sequence[bytes]
) -> dict[str, Any]:
    return {
        "type": "inclusion",
        "origin": head.origin,
        "seq": seq,
        "size": head.size,
        "entry": entry.decode("utf-8"),
        "leaf_hash": hashlib.sha256(b"\x00" + entry).hexdigest(),
        "path": [h.hex() for h in path],
        "checkpoint": head.text(),
    }


def consistency_doc(old: Checkpoint, new: Checkpoint, proof: Sequence[bytes]) -> dict[str, Any]:
    return {
        "type": "consistency",
        "origin": new.origin,
        "old_size": old.size,
        "size": new.size,
        "old_checkpoint": old.text(),
        "checkpoint": new.text(),
        "proof": [h.hex() for h in proof],
    }


@dataclass(frozen=True, slots=True)
class ProofCheck:
    ok: bool
    message: str
    type: str = ""
    size: int = 0


def _hexes(doc: Mapping[str, Any], key: str) -> list[bytes]:
    items = doc.get(key)
    if not isinstance(items, list) or not all(isinstance(h, str) for h in items):
        raise LedgerError(f"a proof's {key} is a list of hex hashes")
    try:
        out = [bytes.fromhex(h) for h in items]
    except ValueError:
        raise LedgerError(f"a proof's {key} is a list of hex hashes") from None
    if any(len(h) != 32 for h in out):
        raise LedgerError(f"a hash of the proof's {key} has 32 bytes")
    return out


def _head(doc: Mapping[str, Any], key: str, public_key: Ed25519PublicKey) -> Checkpoint:
    text = doc.get(key)
    if not isinstance(text, str):
        raise LedgerError(f"the proof holds no {key}")
    cp = parse_checkpoint(text)
    if not cp.signed_by(cp.origin, public_key):
        raise _Fail(f"its {key.replace('_', ' ')} (size {cp.size}) is not signed by the log's key")
    return cp


class _Fail(ComputewatchError):
    """A proof that does not hold (caught inside :func:`check_proof`)."""


def check_proof(doc: object, public_key: Ed25519PublicKey) -> ProofCheck:
    """Whether a proof file holds, with only the log's public key: its heads signed by it, and
    the RFC 9162 proof between what they say. A malformed file is a :class:`LedgerError`."""
    if not isinstance(doc, Mapping) or doc.get("type") not in ("inclusion", "consistency"):
        raise LedgerError("not a proof: its type is inclusion or consistency")
    try:
        if doc["type"] == "inclusion":
            return _inclusion(doc, public_key)
        return _consistency(doc, public_key)
    except _Fail as e:
        return ProofCheck(False, str(e), str(doc["type"]))


def _inclusion(doc: Mapping[str, Any], public_key: Ed25519PublicKey) -> ProofCheck:
    cp = _head(doc, "checkpoint", public_key)
    text, seq = doc.get("entry"), doc.get("seq")
    if not isinstance(text, str) or not isinstance(seq, int) or isinstance(seq, bool):
        raise LedgerError("an inclusion proof holds its entry (text) and seq (a number)")
    line = text.encode("utf-8")
    entry = parse_entry(line, "the proof's entry")
    if entry.seq != seq:
        raise _Fail(f"the entry is entry {entry.seq}, not entry {seq}")
    leaf = hashlib.sha256(b"\x00" + line).digest()
    if doc.get("size") != cp.size:
        raise _Fail(f"the proof is for a tree of {doc.get('size')}, its head of {cp.size}")
    if not verify_inclusion(leaf, seq - 1, cp.size, _hexes(doc, "path"), cp.root):
        raise _Fail(
            f"entry {seq} is not in the tree of {cp.size} entries that the head signs "
            "(the audit path does not lead to its root)"
        )
    return ProofCheck(
        True,
        f"entry {seq} ({entry.kind}) is in the log {cp.origin} at size "
        f"{cp.size}, whose head its key signed",
        "inclusion",
        cp.size,
    )


def _consistency(doc: Mapping[str, Any], public_key: Ed25519PublicKey) -> ProofCheck:
    old = _head(doc, "old_checkpoint", public_key)
    new = _head(doc, "checkpoint", public_key)
    if old.origin != new.origin:
        raise _Fail(f"the heads are of two logs ({old.origin!r}, {new.origin!r})")
    if not verify_consistency(old.size, new.size, old.root, new.root, _hexes(doc, "proof")):
        raise _Fail(
            f"the tree of {old.size} entries is not a prefix of the tree of {new.size}: "
            "the log was rewritten between the two heads (a fork)"
        )
    return ProofCheck(
        True,
        f"the log {new.origin} at size {new.size} extends its head at size "
        f"{old.size}: nothing before was changed",
        "consistency",
        new.size,
    )
