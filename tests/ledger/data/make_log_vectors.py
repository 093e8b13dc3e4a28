"""Writes log-vectors.json beside it: a 7-entry example log (docs/ledger.md, "Test vectors")
with its entry bytes, leaf hashes, root, a signed checkpoint, an inclusion proof and a
consistency proof. Deterministic (Ed25519 signatures are): run it again and nothing changes.

    python tests/ledger/data/make_log_vectors.py
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from computewatch.ledger import merkle
from computewatch.ledger.jcs import dumps
from computewatch.ledger.keys import encode_public
from computewatch.ledger.note import sign_checkpoint

SEED = bytes(range(32))
"""The example key's private seed: never use it for anything but these vectors."""
ORIGIN = "computewatch.ledger/example"

ENTRIES = [
    ("node_key", {"action": "register", "key_id": "6a1c3bb2c6f1f0d4", "team": "lab",
                  "name": "node-a", "registered_at": 1764500000, "revoked_at": None}),
    ("run", {"run_id": "r1", "team": "lab", "status": "completed", "model": "acme-7b",
             "stage": "pretrain", "gpu_hours": 8.0, "energy_kwh": 6.25,
             "flops": {"hardware": {"value": 6591220000000000.0, "low": 5.6e15, "high": 7.6e15}}}),
    ("run", {"run_id": "r2", "team": "lab", "status": "completed", "model": "acme-7b",
             "stage": "rl", "gpu_hours": 1e-7, "energy_kwh": None,
             "flops": {"counted": {"value": 9e25, "low": 9e25, "high": 9e25}}}),
    ("obligation-opened", {"obligation": 1, "model": "acme-7b", "tier": "eu-systemic-risk",
                           "threshold": 1e25, "deadline": "2026-12-15T00:00:00Z"}),
    ("run", {"run_id": "r3", "team": "lab", "status": "failed", "model": "acme-7b-chat",
             "note": "caf\u00e9 \u20ac \U0001f600 \"quoted\"\n"}),
    ("obligation-done", {"obligation": 1, "reference": "EU AI Office 2026-117"}),
    ("prune", {"first_seq": 1, "deleted": 0, "before": "2016-12-01T00:00:00.000000Z"}),
]  # fmt: skip


def main() -> None:
    key = Ed25519PrivateKey.from_private_bytes(SEED)
    lines = [
        dumps({"seq": n, "time": f"2026-12-01T10:00:0{n}.000000Z", "kind": kind, "body": body})
        for n, (kind, body) in enumerate(ENTRIES, 1)
    ]
    leaves = [merkle.leaf_hash(line) for line in lines]

    def node(level: int, index: int) -> bytes:
        return merkle.root_of(leaves[index << level : (index + 1) << level])

    root = merkle.root_of(leaves)
    cp = sign_checkpoint(ORIGIN, len(lines), root, 1764583200, key)
    doc = {
        "about": "docs/ledger.md, 'Test vectors'; written by make_log_vectors.py",
        "public_key": encode_public(key.public_key()),
        "origin": ORIGIN,
        "entries": [line.decode("utf-8") for line in lines],
        "leaf_hashes": [h.hex() for h in leaves],
        "root": root.hex(),
        "root_base64": base64.b64encode(root).decode("ascii"),
        "checkpoint": cp.text(),
        "inclusion": {"index": 2, "size": 7,
                      "path": [h.hex() for h in merkle.inclusion_proof(node, 2, 7)]},
        "consistency": {"old_size": 3, "size": 7,
                        "old_root": merkle.root_of(leaves[:3]).hex(),
                        "proof": [h.hex() for h in merkle.consistency_proof(node, 3, 7)]},
    }  # fmt: skip
    out = Path(__file__).with_name("log-vectors.json")
    out.write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
