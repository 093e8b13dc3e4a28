"""An independent verifier in JavaScript (tests/ledger/verify_log.mjs: Node's crypto, no
packages, written from docs/ledger.md) agrees with ours: on the published test vectors, on the
entries of a real server database with their leaf hashes, root, signed checkpoint and proofs,
and on a real export written by ``ledger export`` with proofs written by ``ledger prove`` (every
entry's bytes, the root, every head's signature, an inclusion and a consistency proof); and it
refuses a tampered copy of each."""

from __future__ import annotations

import base64
import copy
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from tests.conftest import CLI
from tests.server.conftest import batch, synthetic_upload

from computewatch.governance.service import on_run_stored
from computewatch.ledger import merkle
from computewatch.ledger.chain import canonical
from computewatch.ledger.jcs import dumps
from computewatch.ledger.keys import encode_public
from computewatch.ledger.note import sign_checkpoint
from computewatch.serverdb.engine import open_database, upgrade
from computewatch.serverdb.ingest import store_batch
from computewatch.serverdb.ledger_store import entries

HERE = Path(__file__).parent
SCRIPT = HERE / "verify_log.mjs"
VECTORS = HERE / "data" / "log-vectors.json"


def _node() -> str:
    node = shutil.which("node") or "/usr/bin/node"
    if not Path(node).exists():
        pytest.fail(
            "node (v18 or later) is needed for the JavaScript verifier: apt-get install nodejs"
        )
    return node


def _run(doc: dict[str, Any], tmp_path: Path) -> tuple[int, dict[str, Any]]:
    path = tmp_path / "log.json"
    path.write_text(json.dumps(doc, ensure_ascii=False), encoding="utf-8")
    r = subprocess.run([_node(), str(SCRIPT), str(path)], capture_output=True, text=True,
                       timeout=60, check=False)  # fmt: skip
    assert r.stderr == "", r.stderr
    verdict: dict[str, Any] = json.loads(r.stdout)
    return r.returncode, verdict


def _doc_of(lines: list[bytes], key: Ed25519PrivateKey) -> dict[str, Any]:
    leaves = [merkle.leaf_hash(line) for line in lines]

    def node(level: int, index: int) -> bytes:
        return merkle.root_of(leaves[index << level : (index + 1) << level])

    n, root = len(lines), merkle.root_of(leaves)
    old = n // 2
    return {
        "public_key": encode_public(key.public_key()),
        "entries": [line.decode("utf-8") for line in lines],
        "leaf_hashes": [h.hex() for h in leaves],
        "root": root.hex(),
        "checkpoint": sign_checkpoint("computewatch.ledger/test", n, root, 1, key).text(),
        "inclusion": {"index": n - 2, "size": n,
                      "path": [h.hex() for h in merkle.inclusion_proof(node, n - 2, n)]},
        "consistency": {"old_size": old, "size": n,
                        "proof": [h.hex() for h in merkle.consistency_proof(node, old, n)]},
    }  # fmt: skip


def test_the_published_vectors_verify_in_javascript(tmp_path: Path) -> None:
    doc = json.loads(VECTORS.read_text(encoding="utf-8"))
    rc, verdict = _run(doc, tmp_path)
    assert rc == 0, verdict
    assert verdict["root"] == doc["root"]


def test_a_real_ledger_verifies_in_javascript_and_tampering_does_not(tmp_path: Path) -> None:
    db = open_database(f"sqlite:///{tmp_path / 'server.db'}")
    upgrade(db)
    runs = _runs(30)
    with db.session() as session:
        store_batch(session, "lab", batch(*runs))
        docs = [{"seq": e.seq, "time": e.time, "kind": e.kind, "body": dict(e.body)}
                for e in entries(session)]  # fmt: skip
    db.engine.dispose()
    lines = [dumps(d) for d in docs]
    pythonic_lines = [canonical(d) for d in docs]  # floats written Python's way: 8.0, 1e-05
    differ = [i for i, (a, b) in enumerate(zip(lines, pythonic_lines, strict=True)) if a != b]
    assert differ, "the real entries hold floats whose Python spelling is not RFC 8785's"
    key = Ed25519PrivateKey.generate()
    doc = _doc_of(lines, key)
    rc, verdict = _run(doc, tmp_path)
    assert rc == 0, verdict
    assert verdict["entries"] == 30

    pythonic = copy.deepcopy(doc)  # a float written Python's way is not the entry's bytes
    pythonic["entries"][differ[0]] = pythonic_lines[differ[0]].decode("utf-8")
    assert _run(pythonic, tmp_path)[1]["canonical"] is False
    forged = copy.deepcopy(doc)
    forged["checkpoint"] = doc["checkpoint"].replace("\n30\n", "\n29\n", 1)
    assert _run(forged, tmp_path)[1]["checkpoint_signed"] is False
    other = copy.deepcopy(doc)
    other["public_key"] = base64.b64encode(bytes(32)).decode()
    assert _run(other, tmp_path)[0] == 1
    wrong = copy.deepcopy(doc)
    wrong["inclusion"]["index"] -= 1
    assert _run(wrong, tmp_path)[1]["inclusion"] is False


def _runs(n: int, offset: int = 0) -> list[Any]:
    out = []
    for i in range(n):
        up = synthetic_upload(gpus=8, gpu_model="H100-SXM", utilization=0.3 + i / 100)
        summary = up["summary"]
        assert summary is not None
        flop = 3.2e18 * (i + offset + 1)  # doubles JavaScript writes whole: 3200000000000000000
        summary["flops"] = {"value": flop, "low": flop * 0.9, "high": flop * 1.1, "unit": "FLOP",
                            "method": "estimated", "assumptions": [], "source": "test"}  # fmt: skip
        up["meta"]["governance"] = {"model": f"m{i % 3}", "base_model": None,
                                    "stage": "pretrain", "parameters": 7e9}  # fmt: skip
        out.append(up)
    return out


def _node_export(*args: str) -> tuple[int, dict[str, Any]]:
    r = subprocess.run([_node(), str(SCRIPT), "--export", *args], capture_output=True, text=True,
                       timeout=120, check=False)  # fmt: skip
    assert r.stderr == "", r.stderr
    verdict: dict[str, Any] = json.loads(r.stdout)
    return r.returncode, verdict


def test_a_real_export_and_its_proofs_verify_in_javascript(cw: CLI, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'server.db'}"
    db = open_database(url)
    upgrade(db)
    with db.session() as session:
        store_batch(session, "lab", batch(*_runs(13)), on_run=on_run_stored)
    pub = cw.ok("ledger", "keygen").stdout.strip()
    first = tmp_path / "head-1.txt"
    first.write_text(cw.ok("ledger", "export", "-o", tmp_path / "old.jsonl", "--db", url).stderr
                     and cw.ok("ledger", "head", "--db", url).stdout)  # fmt: skip
    with db.session() as session:
        store_batch(session, "lab", batch(*_runs(20, 13)), on_run=on_run_stored)
    db.engine.dispose()
    export = tmp_path / "ledger.jsonl"
    cw.ok("ledger", "export", "-o", export, "--db", url)
    inclusion = tmp_path / "inclusion.json"
    cw.ok("ledger", "prove", "inclusion", "7", "--db", url, "-o", inclusion)
    consistency = tmp_path / "consistency.json"
    cw.ok("ledger", "prove", "consistency", first, "--db", url, "-o", consistency)
    assert json.loads(consistency.read_text())["old_size"] < json.loads(inclusion.read_text())[
        "size"
    ]  # fmt: skip
    rc, verdict = _node_export(str(export), "--public-key", pub, "--inclusion", str(inclusion),
                               "--consistency", str(consistency))  # fmt: skip
    assert rc == 0, verdict
    assert verdict["inclusion"] and verdict["consistency"] and verdict["heads_signed"]
    ours = json.loads(cw.ok("ledger", "verify", export, "--json").stdout)
    assert verdict["root"] == ours["root"] and verdict["entries"] == ours["entries"]
    lines = export.read_bytes().split(b"\n")
    assert b"3200000000000000000" in lines[1]

    changed = tmp_path / "changed.jsonl"  # one byte of one entry, still canonical JSON
    at = 5
    lines_changed = list(lines)
    lines_changed[at] = lines_changed[at].replace(b'"team":"lab"', b'"team":"lax"')
    changed.write_bytes(b"\n".join(lines_changed))
    rc, verdict = _node_export(str(changed), "--public-key", pub)
    assert rc == 1 and verdict["canonical"] and not verdict["heads_signed"]
    other = base64.b64encode(bytes(32)).decode()
    assert _node_export(str(export), "--public-key", other)[0] == 1
    bad = json.loads(inclusion.read_text())
    bad["seq"] = 8
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    rc, verdict = _node_export(str(export), "--public-key", pub, "--inclusion",
                               str(tmp_path / "bad.json"))  # fmt: skip
    assert rc == 1 and verdict["inclusion"] is False
