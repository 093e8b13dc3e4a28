"""What an auditor relies on, through the real CLI: every export must be signed to its end
(dropped checkpoints, a cut export with its header fixed), the database must still hold the head
the server published (its newest entries deleted), a mistyped ``--db`` creates nothing, no
command but the server and ``ledger keygen`` creates a signing key, and a rotated key keeps
every older checkpoint verifiable."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path
from typing import Any

from tests.conftest import CLI
from tests.server.conftest import batch, synthetic_upload

from computewatch.ledger.chain import canonical
from computewatch.serverdb.engine import open_database, upgrade
from computewatch.serverdb.ingest import store_batch


def _governed(flop: float, model: str = "m") -> Any:
    up = synthetic_upload(gpus=8, gpu_model="H100-SXM")
    summary = up["summary"]
    assert summary is not None
    summary["flops"] = {"value": flop, "low": flop * 0.85, "high": flop * 1.15, "unit": "FLOP",
                        "method": "estimated", "assumptions": [], "source": "test"}  # fmt: skip
    up["meta"]["governance"] = {"model": model, "base_model": None, "stage": "pretrain",
                                "parameters": None}  # fmt: skip
    return up


def _database(tmp_path: Path, runs: int = 4) -> str:
    url = f"sqlite:///{tmp_path / 'server.db'}"
    db = open_database(url)
    upgrade(db)
    with db.session() as session:
        store_batch(session, "lab", batch(*[_governed(1e22 * (i + 1)) for i in range(runs)]))
    db.engine.dispose()
    return url


def _more(url: str, runs: int = 3) -> None:
    db = open_database(url)
    with db.session() as session:
        store_batch(session, "lab", batch(*[_governed(2e22) for _ in range(runs)]))
    db.engine.dispose()


def _lines(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    docs = [json.loads(line) for line in path.read_text().splitlines()]
    return docs[0], docs[1:]


def _write(path: Path, header: dict[str, Any], entries: list[dict[str, Any]]) -> None:
    header = {**header, "entries": len(entries)}
    path.write_bytes(b"".join(canonical(d) + b"\n" for d in [header, *entries]))


def _rehash(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Renumber from 1 and recompute every hash: what an operator without the key can do."""
    prev = "0" * 64
    out = []
    for n, e in enumerate(entries, 1):
        doc = {"seq": n, "time": e["time"], "kind": e["kind"], "body": e["body"], "prev": prev}
        prev = hashlib.sha256(canonical(doc)).hexdigest()
        out.append({**doc, "hash": prev})
    return out


def _setup(cw: CLI, tmp_path: Path) -> tuple[str, Path, Path]:
    url = _database(tmp_path)
    cw.ok("ledger", "keygen")
    first = tmp_path / "first.jsonl"
    cw.ok("ledger", "export", "-o", first, "--db", url)  # a checkpoint in the middle
    _more(url)
    export = tmp_path / "ledger.jsonl"
    cw.ok("ledger", "export", "-o", export, "--db", url)
    pub = tmp_path / "server.pub"
    pub.write_text(cw.ok("ledger", "public-key").stdout)
    assert cw("ledger", "verify", export, "--public-key", pub).returncode == 0
    return url, export, pub


def test_dropping_every_checkpoint_after_rewriting_a_run_is_caught(cw: CLI, tmp_path: Path) -> None:
    _, export, pub = _setup(cw, tmp_path)
    header, entries = _lines(export)
    runs = [e for e in entries if e["kind"] == "run"]
    runs[0]["body"]["gpu_hours"] = 0.5
    forged = _rehash([e for e in entries if e["kind"] != "checkpoint"])
    bad = tmp_path / "forged.jsonl"
    _write(bad, header, forged)
    r = cw("ledger", "verify", bad, "--public-key", pub)
    assert r.returncode == 1, r.stdout + r.stderr
    assert r.stdout.startswith("TAMPERED (unsigned)")
    assert f"entries 1 to {len(forged)} are not covered by a signed checkpoint" in r.stdout
    loose = cw("ledger", "verify", bad, "--public-key", pub, "--allow-unsigned-tail")
    assert loose.returncode == 0 and "--allow-unsigned-tail" in loose.stderr


def test_a_cut_export_with_its_count_fixed_is_caught(cw: CLI, tmp_path: Path) -> None:
    _, export, pub = _setup(cw, tmp_path)
    header, entries = _lines(export)
    cut = tmp_path / "cut.jsonl"
    _write(cut, header, entries[:-5])
    r = cw("ledger", "verify", cut, "--public-key", pub, "--json")
    assert r.returncode == 1
    problem = json.loads(r.stdout)["problem"]
    assert problem["what"] == "unsigned"


def test_deleting_the_newest_entries_of_the_database_is_caught(cw: CLI, tmp_path: Path) -> None:
    url, export, _ = _setup(cw, tmp_path)
    _, entries = _lines(export)
    assert cw("ledger", "verify", "--db", url).returncode == 0
    keep = len(entries) - 4
    with sqlite3.connect(tmp_path / "server.db") as c:
        c.execute("DELETE FROM ledger_entries WHERE seq > ?", (keep,))
    r = cw("ledger", "verify", "--db", url)
    assert r.returncode == 1, r.stdout
    assert r.stdout.startswith(f"TAMPERED (removed) in the database: entries {keep + 1} to ")
    assert "published a signed head" in r.stdout


def test_a_mistyped_database_is_refused_and_not_created(cw: CLI, tmp_path: Path) -> None:
    _database(tmp_path)
    cw.ok("ledger", "keygen")
    mistyped = tmp_path / "mistyped.db"
    for args in (("verify",), ("export", "-o", str(tmp_path / "x.jsonl"))):
        r = cw("ledger", *args, "--db", f"sqlite:///{mistyped}")
        assert r.returncode == 2, r.stdout + r.stderr
        assert "no database at" in r.stderr and str(mistyped) in r.stderr
        assert not mistyped.exists()
    empty = tmp_path / "empty.db"
    sqlite3.connect(empty).close()
    r = cw("ledger", "verify", "--db", f"sqlite:///{empty}")
    assert r.returncode == 2 and "holds no ledger" in r.stderr


def test_no_command_but_keygen_creates_a_key(cw: CLI, tmp_path: Path) -> None:
    url = _database(tmp_path)
    key = cw.home / "ledger-ed25519.pem"
    r = cw("ledger", "public-key")
    assert r.returncode == 2 and str(key) in r.stderr and "keygen" in r.stderr
    assert r.stdout == "" and not key.exists()
    r = cw("ledger", "export", "-o", tmp_path / "x.jsonl", "--db", url)
    assert r.returncode == 2 and str(key) in r.stderr and not key.exists()
    with sqlite3.connect(tmp_path / "server.db") as c:
        assert c.execute("SELECT count(*) FROM ledger_entries WHERE kind='checkpoint'").fetchone()[
            0
        ] == 0  # fmt: skip
    cw.ok("ledger", "keygen")
    assert key.exists() and cw("ledger", "keygen").returncode == 2  # never overwritten
    cw.ok("ledger", "export", "-o", tmp_path / "x.jsonl", "--db", url)
    other = tmp_path / "other.pem"
    cw.ok("ledger", "keygen", "--key", other)  # a mistyped --key naming another key
    r = cw("ledger", "export", "-o", tmp_path / "y.jsonl", "--db", url, "--key", other)
    assert r.returncode == 2 and "is not the server's" in r.stderr
    assert cw("ledger", "verify", "--db", url).returncode == 0  # nothing was signed with it


def test_a_rotated_key_keeps_older_checkpoints_verifiable(cw: CLI, tmp_path: Path) -> None:
    url, _, old_pub = _setup(cw, tmp_path)
    rotated = cw.ok("ledger", "keygen", "--rotate", "--db", url)
    new_pub = tmp_path / "new.pub"
    new_pub.write_text(rotated.stdout)
    assert new_pub.read_text() != old_pub.read_text()
    _more(url, 2)
    export = tmp_path / "after.jsonl"
    cw.ok("ledger", "export", "-o", export, "--db", url)
    header, entries = _lines(export)
    assert len(header["public_keys"]) == 2
    assert [e["kind"] for e in entries].count("key-rotation") == 1
    ok = cw("ledger", "verify", export, "--public-key", new_pub)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert cw("ledger", "verify", export).returncode == 0  # the header's keys
    retired = cw("ledger", "verify", export, "--public-key", old_pub)
    assert retired.returncode == 1 and "not a trusted key" in retired.stdout  # only the old
    assert cw("ledger", "verify", "--db", url).returncode == 0
