"""What an auditor relies on, through the real CLI, each tampering caught and named: heads
dropped from an export, an export cut with its header fixed, the newest entries deleted from the
database, history rewritten and signed again with the server's own key (caught by an earlier
export or head: ``verify --previous``), a run relabelled and signed again (caught by its node's
signature), the governance tables UPDATEd (the status is a replay of the log, and ``verify --db``
names the table), a mistyped ``--db``; no command but the server and ``ledger keygen`` creates a
signing key, and a rotated key keeps every older head verifiable."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from tests.conftest import CLI
from tests.ledger.forge import read_export, resign_export, rewrite_database, write_export
from tests.server.conftest import batch, synthetic_upload

from computewatch.governance.service import on_run_stored
from computewatch.ledger.keys import load_private_key
from computewatch.serverdb.engine import open_database, upgrade
from computewatch.serverdb.ingest import store_batch


def _governed(flop: float, model: str = "m", stage: str = "pretrain") -> Any:
    up = synthetic_upload(gpus=8, gpu_model="H100-SXM")
    summary = up["summary"]
    assert summary is not None
    for gpu in summary["gpus"]:  # real devices: a simulated run stays out of the totals
        gpu["simulated"] = False
    summary["flops"] = {
        "value": flop,
        "low": flop * 0.85,
        "high": flop * 1.15,
        "unit": "FLOP",
        "method": "estimated",
        "assumptions": [],
        "source": "test",
    }
    up["meta"]["governance"] = {
        "model": model,
        "base_model": None,
        "stage": stage,
        "parameters": None,
    }
    return up


def _store(url: str, *runs: Any) -> None:
    db = open_database(url)
    upgrade(db)
    with db.session() as session:
        store_batch(session, "lab", batch(*runs), on_run=on_run_stored)
    db.engine.dispose()


def _database(tmp_path: Path, runs: int = 4) -> str:
    url = f"sqlite:///{tmp_path / 'server.db'}"
    _store(url, *[_governed(1e22 * (i + 1)) for i in range(runs)])
    return url


def _setup(cw: CLI, tmp_path: Path) -> tuple[str, Path, Path, Path]:
    """A database, a first export (its head in the middle of the log), more runs, a second
    export; the server's public key. Returns (url, first, second, key)."""
    url = _database(tmp_path)
    cw.ok("ledger", "keygen")
    first = tmp_path / "first.jsonl"
    cw.ok("ledger", "export", "-o", first, "--db", url)
    _store(url, *[_governed(2e22) for _ in range(3)])
    export = tmp_path / "ledger.jsonl"
    cw.ok("ledger", "export", "-o", export, "--db", url)
    pub = tmp_path / "server.pub"
    pub.write_text(cw.ok("ledger", "public-key").stdout)
    ok = cw("ledger", "verify", export, "--public-key", pub)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    return url, first, export, pub


def _problem(cw: CLI, *args: Any) -> dict[str, Any]:
    r = cw("ledger", "verify", *args, "--json")
    assert r.returncode == 1, r.stdout + r.stderr
    problem: dict[str, Any] = json.loads(r.stdout)["problem"]
    return problem


def test_dropping_heads_leaves_entries_unsigned(cw: CLI, tmp_path: Path) -> None:
    _, first, export, pub = _setup(cw, tmp_path)
    header, lines = read_export(export)
    older, first_lines = read_export(first)
    bare = tmp_path / "bare.jsonl"
    write_export(bare, {**header, "heads": []}, lines)
    r = cw("ledger", "verify", bare, "--public-key", pub)
    assert r.returncode == 1 and r.stdout.startswith("TAMPERED (unsigned)"), r.stdout
    assert f"entries 1 to {len(lines)} are not covered by a signed head" in r.stdout
    loose = cw("ledger", "verify", bare, "--public-key", pub, "--allow-unsigned-tail")
    assert loose.returncode == 0 and "--allow-unsigned-tail" in loose.stderr
    only_older = tmp_path / "older.jsonl"  # the newest head dropped, an older one kept
    write_export(only_older, {**header, "heads": older["heads"]}, lines)
    problem = _problem(cw, only_older, "--public-key", pub)
    assert problem["what"] == "unsigned" and problem["seq"] == len(first_lines) + 1, problem


def test_an_export_cut_with_its_count_fixed_is_caught(cw: CLI, tmp_path: Path) -> None:
    _, _, export, pub = _setup(cw, tmp_path)
    header, lines = read_export(export)
    cut = tmp_path / "cut.jsonl"
    write_export(cut, {**header, "entries": len(lines) - 5}, lines[:-5])
    problem = _problem(cw, cut, "--public-key", pub)
    assert problem["what"] == "removed" and problem["seq"] == len(lines) - 4
    assert f"holds a head signed at size {len(lines)}" in problem["message"]
    cut_heads = tmp_path / "cut-heads.jsonl"
    write_export(cut_heads, {**header, "entries": len(lines) - 5, "heads": []}, lines[:-5])
    assert _problem(cw, cut_heads, "--public-key", pub)["what"] == "unsigned"


def test_deleting_the_newest_entries_of_the_database_is_caught(cw: CLI, tmp_path: Path) -> None:
    url, _, export, _ = _setup(cw, tmp_path)
    _, lines = read_export(export)
    assert cw("ledger", "verify", "--db", url).returncode == 0
    keep = len(lines) - 4
    with sqlite3.connect(tmp_path / "server.db") as c:  # the entries and the heads over them
        c.execute("DELETE FROM ledger_entries WHERE seq > ?", (keep,))
        c.execute("DELETE FROM ledger_heads WHERE size > ?", (keep,))
    r = cw("ledger", "verify", "--db", url)
    assert r.returncode == 1, r.stdout
    assert r.stdout.startswith(f"TAMPERED (removed) in the database: entries {keep + 1} to ")
    assert "published a signed head" in r.stdout


def test_history_rewritten_and_signed_again_is_a_fork_of_an_earlier_export(
    cw: CLI, tmp_path: Path
) -> None:
    url, first, _, pub = _setup(cw, tmp_path)
    head = tmp_path / "head.txt"
    head.write_text(cw.ok("ledger", "head", "--db", url).stdout)
    key = load_private_key(cw.home / "ledger-ed25519.pem")

    def lighter(doc: dict[str, Any]) -> None:
        doc["body"]["figures"]["flops"]["hardware"]["high"] = 1.0

    rewrite_database(tmp_path / "server.db", key, {3: lighter})
    rewritten = tmp_path / "rewritten.jsonl"
    cw.ok("ledger", "export", "-o", rewritten, "--db", url)
    alone = cw("ledger", "verify", rewritten, "--public-key", pub)
    assert alone.returncode == 0, alone.stdout  # signed by the server's key: alone, it holds
    problem = _problem(cw, rewritten, "--public-key", pub, "--previous", first)
    assert problem["what"] == "fork" and problem["seq"] == 3, problem
    assert "entry 3 differs from the earlier export" in problem["message"]
    problem = _problem(cw, rewritten, "--public-key", pub, "--previous", head)
    assert problem["what"] == "fork" and "differs from the earlier head" in problem["message"]
    # the database in place: the head published beside the key is the one before
    assert "TAMPERED" in cw("ledger", "verify", "--db", url).stdout


def test_a_relabelled_run_signed_again_fails_its_nodes_signature(cw: CLI, tmp_path: Path) -> None:
    from computewatch.serverdb.node_keys import add_node_key
    from computewatch.upload.signing import ReportSigner

    url = f"sqlite:///{tmp_path / 'server.db'}"
    db = open_database(url)
    upgrade(db)
    signer = ReportSigner(tmp_path / "node-key.pem")
    run = signer.sign(_governed(9e25, "frontier", stage="rl"))
    assert signer.problem is None and run["signed_report"]["figures"]["stage"] == "rl"
    with db.session() as session:
        add_node_key(session, _public(tmp_path), team="lab", name="node-a")
        store_batch(session, "lab", batch(run), on_run=on_run_stored)
    db.engine.dispose()
    cw.ok("ledger", "keygen")
    export = tmp_path / "ledger.jsonl"
    cw.ok("ledger", "export", "-o", export, "--db", url)
    pub = tmp_path / "server.pub"
    pub.write_text(cw.ok("ledger", "public-key").stdout)
    v = json.loads(cw.ok("ledger", "verify", export, "--public-key", pub, "--json").stdout)
    assert v["reports"]["signed"] == 1 and v["reports"]["figures_unsigned"] == 0
    header, lines = read_export(export)
    seq = next(json.loads(x)["seq"] for x in lines if json.loads(x)["kind"] == "run")

    def relabel(doc: dict[str, Any]) -> None:
        doc["body"]["figures"]["stage"] = "eval"
        doc["body"]["figures"]["flops"] = {}

    key = load_private_key(cw.home / "ledger-ed25519.pem")
    forged = tmp_path / "relabelled.jsonl"
    write_export(forged, *resign_export(header, lines, key, {seq: relabel}))
    problem = _problem(cw, forged, "--public-key", pub)
    assert problem["what"] == "report" and problem["seq"] == seq
    assert "differ from those its node signed" in problem["message"]

    def both(doc: dict[str, Any]) -> None:  # the report's figures changed too: its signature
        relabel(doc)
        doc["body"]["signed_report"]["figures"] = doc["body"]["figures"]

    write_export(forged, *resign_export(header, lines, key, {seq: both}))
    problem = _problem(cw, forged, "--public-key", pub)
    assert problem["what"] == "report" and "changed after signing" in problem["message"]


def _public(tmp_path: Path) -> str:
    from computewatch.ledger.keys import encode_public, load_or_create_private_key

    return encode_public(load_or_create_private_key(tmp_path / "node-key.pem").public_key())


def test_updating_the_governance_tables_moves_nothing_and_is_named(cw: CLI, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'server.db'}"
    _store(url, _governed(4e25, "big"), _governed(5e25, "big"))
    cw.ok("ledger", "keygen")
    before = cw.json("governance", "status", "--db", url, "--at", "1800000000")
    [big] = before
    assert big["judged_flop"] == 9e25 * 1.15
    assert {o["tier"]: o["state"] for o in big["obligations"]} == {
        "eu-systemic-risk": "open",
        "us-frontier": "open",
    }  # 1.035e26 FLOP at most
    assert cw("ledger", "verify", "--db", url).returncode == 0
    with sqlite3.connect(tmp_path / "server.db") as c:
        c.execute(
            "UPDATE model_runs SET hardware = hardware / 10, hardware_low = hardware_low "
            "/ 10, hardware_high = hardware_high / 10"
        )
        c.execute("UPDATE obligations SET state = 'done', reference = 'forged'")
    after = cw.json("governance", "status", "--db", url, "--at", "1800000000")
    assert after == before  # the status is the log's, not the tables'
    r = cw("ledger", "verify", "--db", url)
    assert r.returncode == 1 and r.stdout.startswith("TAMPERED (tables)"), r.stdout
    assert "'done' (reference 'forged') in the obligations table but 'open'" in r.stdout


def test_a_mistyped_database_is_refused_and_not_created(cw: CLI, tmp_path: Path) -> None:
    _database(tmp_path)
    cw.ok("ledger", "keygen")
    mistyped = tmp_path / "mistyped.db"
    for args in (("verify",), ("export", "-o", str(tmp_path / "x.jsonl")), ("head",)):
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
        assert c.execute("SELECT count(*) FROM ledger_heads").fetchone()[0] == 0
    cw.ok("ledger", "keygen")
    assert key.exists() and cw("ledger", "keygen").returncode == 2  # never overwritten
    cw.ok("ledger", "export", "-o", tmp_path / "x.jsonl", "--db", url)
    other = tmp_path / "other.pem"
    cw.ok("ledger", "keygen", "--key", other)  # a mistyped --key naming another key
    r = cw("ledger", "export", "-o", tmp_path / "y.jsonl", "--db", url, "--key", other)
    assert r.returncode == 2 and "is not the server's" in r.stderr
    assert cw("ledger", "verify", "--db", url).returncode == 0  # nothing was signed with it


def test_a_rotated_key_keeps_older_heads_verifiable(cw: CLI, tmp_path: Path) -> None:
    url, _, _, old_pub = _setup(cw, tmp_path)
    rotated = cw.ok("ledger", "keygen", "--rotate", "--db", url)
    new_pub = tmp_path / "new.pub"
    new_pub.write_text(rotated.stdout)
    assert new_pub.read_text() != old_pub.read_text()
    _store(url, *[_governed(2e22) for _ in range(2)])
    export = tmp_path / "after.jsonl"
    cw.ok("ledger", "export", "-o", export, "--db", url)
    header, lines = read_export(export)
    assert len(header["public_keys"]) == 2
    assert [json.loads(x)["kind"] for x in lines].count("key-rotation") == 1
    ok = cw("ledger", "verify", export, "--public-key", new_pub)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert cw("ledger", "verify", export).returncode == 0  # the header's keys
    retired = _problem(cw, export, "--public-key", old_pub)  # only the old one: refused
    assert retired["what"] == "signature" and "not a trusted key" in retired["message"]
    assert cw("ledger", "verify", "--db", url).returncode == 0


def test_heads_and_proofs_through_the_cli_and_a_rewrite_refused(cw: CLI, tmp_path: Path) -> None:
    """``ledger head``, ``prove inclusion SEQ --head FILE``, ``prove consistency OLD NEW`` and
    ``check-proof`` on a database; after the operator rewrites entry 3 and signs again, a proof
    from the old head is refused as a fork (exit 1, nothing written) instead of printed."""
    url, first, _, pub = _setup(cw, tmp_path)
    older, _ = read_export(first)
    old = tmp_path / "old-head.txt"
    old.write_text(older["heads"][-1])
    new = tmp_path / "new-head.json"  # the JSON of 'ledger head --json' is a head file too
    new.write_text(cw.ok("ledger", "head", "--db", url, "--json").stdout)
    old_size, new_size = int(old.read_text().split("\n")[1]), json.loads(new.read_text())["size"]
    assert cw.ok("ledger", "head", "--db", url).stdout == json.loads(new.read_text())["checkpoint"]
    assert old_size < new_size

    inc = tmp_path / "inclusion.json"
    cw.ok("ledger", "prove", "inclusion", "3", "--head", old, "--db", url, "-o", inc)
    assert json.loads(inc.read_text())["size"] == old_size
    held = cw.json("ledger", "check-proof", inc, "--public-key", pub)
    assert held["ok"] and held["type"] == "inclusion" and held["size"] == old_size
    con = tmp_path / "consistency.json"
    cw.ok("ledger", "prove", "consistency", old, new, "--db", url, "-o", con)
    doc = json.loads(con.read_text())
    assert (doc["old_size"], doc["size"]) == (old_size, new_size)
    assert cw.ok("ledger", "check-proof", con, "--public-key", pub).stdout.startswith("holds:")
    beyond = cw("ledger", "prove", "inclusion", str(new_size + 1), "--db", url)
    assert beyond.returncode == 2 and "is not in the tree" in beyond.stderr

    def lighter(d: dict[str, Any]) -> None:
        d["body"]["figures"]["flops"]["hardware"]["high"] = 1.0

    rewrite_database(tmp_path / "server.db", load_private_key(cw.home / "ledger-ed25519.pem"),
                     {3: lighter})  # fmt: skip
    forked = tmp_path / "forked.json"
    r = cw("ledger", "prove", "consistency", old, "--db", url, "-o", forked)
    assert r.returncode == 1 and "(a fork)" in r.stderr and str(old) in r.stderr, r.stderr
    assert not forked.exists()
    r = cw("ledger", "prove", "inclusion", "3", "--head", old, "--db", url)
    assert r.returncode == 1 and "(a fork)" in r.stderr, r.stderr


def test_an_export_on_standard_input_is_verified(cw: CLI, tmp_path: Path) -> None:
    """``ledger verify -`` reads the export from standard input (a download piped in), and a
    tampered one is caught there as from a file."""
    _, _, export, pub = _setup(cw, tmp_path)
    r = cw("ledger", "verify", "-", "--public-key", pub, input=export.read_text())
    assert r.returncode == 0 and r.stdout.startswith("intact"), r.stdout + r.stderr
    header, lines = read_export(export)
    cut = tmp_path / "cut.jsonl"
    write_export(cut, {**header, "entries": len(lines) - 5}, lines[:-5])
    r = cw("ledger", "verify", "-", "--public-key", pub, input=cut.read_text())
    assert r.returncode == 1 and "TAMPERED" in r.stdout, r.stdout + r.stderr
