"""Migration 0006 on a database that holds a ledger of the first format (a hash chain with a
signed checkpoint, and two open obligations for one model and tier, as a status request racing
the upkeep could open): every entry becomes a leaf in RFC 8785 form, a ``chain-migrated`` entry
commits to the chain's last hash, the duplicate obligation is merged with an entry saying so,
and the result verifies in place, as an export, and replays."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from alembic import command
from alembic.config import Config
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from computewatch.governance.ledger_ops import export, sign_head, verify_database
from computewatch.governance.service import replay_log
from computewatch.ledger.audit import verify_log
from computewatch.ledger.chain import Entry, canonical, next_entry
from computewatch.ledger.keys import CHECKPOINT_KIND, checkpoint_body
from computewatch.ledger.log import read_header
from computewatch.serverdb.engine import MIGRATIONS, open_database, upgrade


def _to(url: str, revision: str) -> None:
    db = open_database(url)
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    with db.engine.connect() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)
        conn.commit()
    db.dispose()


def test_a_hash_chain_becomes_the_log(tmp_path: Path) -> None:
    path = tmp_path / "server.db"
    url = f"sqlite:///{path}"
    _to(url, "0005")
    key = Ed25519PrivateKey.generate()
    chain: list[Entry] = []
    bodies = [
        (
            "run",
            {
                "run_id": "r1",
                "team": "lab",
                "status": "completed",
                "model": "m",
                "stage": "pretrain",
                "gpu_hours": 8.0,
                "energy_kwh": 1.0,
                "duration_seconds": 3600.0,
                "devices": ["8x H100-SXM"],
                "flops": {"hardware": {"value": 3.2e18, "low": 3e18, "high": 3.5e18}},
            },
        ),
        ("obligation-opened", {"obligation": 1, "model": "m", "tier": "eu-gpai"}),
        ("obligation-opened", {"obligation": 2, "model": "m", "tier": "eu-gpai"}),
    ]
    for kind, body in bodies:
        chain.append(next_entry(chain[-1] if chain else None, kind, body))
    chain.append(next_entry(chain[-1], CHECKPOINT_KIND, checkpoint_body(chain[-1], key)))
    with sqlite3.connect(path) as c:
        for e in chain:
            c.execute(
                "INSERT INTO ledger_entries VALUES (?, ?, ?, ?, ?, ?)",
                (e.seq, e.time, e.kind, canonical(e.body).decode(), e.prev, e.hash),
            )
        for oid in (1, 2):
            c.execute(
                "INSERT INTO obligations (id, model, tier, trigger, rule, threshold, "
                "opened_at, state) VALUES (?, 'm', 'eu-gpai', 'crossed', '', 1e23, 0, "
                "'open')",
                (oid,),
            )
    db = open_database(url)
    upgrade(db)
    with sqlite3.connect(path) as c:
        rows = c.execute("SELECT seq, kind, body FROM ledger_entries ORDER BY seq").fetchall()
        states = c.execute("SELECT id, state FROM obligations ORDER BY id").fetchall()
        columns = [r[1] for r in c.execute("PRAGMA table_info(ledger_entries)")]
    assert columns == ["seq", "time", "kind", "body"]
    kinds = [k for _, k, _ in rows]
    assert kinds == [
        "run",
        "obligation-opened",
        "obligation-opened",
        "checkpoint",
        "chain-migrated",
        "obligation-merged",
    ]
    assert '"gpu_hours":8,' in rows[0][2] and "3200000000000000000" in rows[0][2]  # RFC 8785
    migrated = json.loads(rows[4][2])
    assert migrated == {"entries": 4, "format": 1, "last_hash": chain[-1].hash, "last_seq": 4}
    assert json.loads(rows[5][2])["into"] == 1 and states == [(1, "open"), (2, "merged")]
    head = sign_head(db, key)
    assert head.size == 6
    assert verify_database(db, key.public_key()).ok
    lines = list(export(db, key))
    v = verify_log(
        read_header(json.loads(lines[0]), "export"),
        [x.rstrip(b"\n") for x in lines[1:]],
        key.public_key(),
    )
    assert v.ok and v.entries == 6, v.problem
    with db.session() as session:
        r = replay_log(session)
    assert [o.state for _, o in sorted(r.obligations.items())] == ["open", "merged"]
    assert r.models()["lab/m"].own["hardware"].value == 3.2e18  # 0008: models are team/name
    assert {o.model for o in r.obligations.values()} == {"lab/m"}
    with sqlite3.connect(path) as c:  # the table qualified as the replay reads the log
        assert c.execute("SELECT DISTINCT model FROM obligations").fetchall() == [("lab/m",)]
    db.dispose()
