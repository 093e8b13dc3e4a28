"""The tamper-evident ledger: appends per second into the server database (SQLite here; each
append in its own transaction, as an ingest makes it, and many per transaction), and the time
``ledger verify`` takes for an export of 1,000,000 entries (100,000 with ``--quick``), with a
signed checkpoint every 1,000 entries as the server makes them.

    python benchmarks/bench_ledger.py [--quick]
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import Section, cli_main, computewatch_cli
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from computewatch.ledger.chain import Entry, next_entry
from computewatch.ledger.keys import CHECKPOINT_KIND, checkpoint_body
from computewatch.ledger.verify import export_lines, header_json
from computewatch.serverdb.engine import open_database, upgrade
from computewatch.serverdb.ledger_store import CHECKPOINT_EVERY, append

BODY = {
    "run_id": "0" * 32, "team": "lab", "status": "completed", "seq": 12,
    "started_at": 1.7e9, "ended_at": 1.7e9 + 3600, "summary_sha256": "f" * 64,
    "model": "acme-7b", "stage": "pretrain", "gpu_hours": 8.0, "energy_kwh": 6.2,
    "flops": {"hardware": {"value": 1e21, "low": 8e20, "high": 1.2e21}},
}  # fmt: skip


def _db_appends(tmp: Path, n: int, per_tx: int) -> float:
    db = open_database(f"sqlite:///{tmp / f'ledger-{per_tx}.db'}")
    upgrade(db)
    t0 = time.perf_counter()
    done = 0
    while done < n:
        with db.session() as session:
            for _ in range(min(per_tx, n - done)):
                append(session, "run", BODY)
                done += 1
            session.commit()
    elapsed = time.perf_counter() - t0
    db.engine.dispose()
    return n / elapsed


def _export(path: Path, n: int) -> float:
    key = Ed25519PrivateKey.generate()
    t0 = time.perf_counter()
    entries: list[Entry] = []
    last: Entry | None = None
    while len(entries) < n:
        last = next_entry(last, "run", BODY)
        entries.append(last)
        if last.seq % CHECKPOINT_EVERY == 0:
            last = next_entry(last, CHECKPOINT_KIND, checkpoint_body(last, key))
            entries.append(last)
    build = time.perf_counter() - t0
    head = header_json([key.public_key()], exported_at="x", entries=len(entries))
    with open(path, "wb") as f:
        f.writelines(export_lines(head, entries))
    return len(entries) / build


def run(quick: bool) -> Section:
    s = Section("Ledger: appends and verification")
    n_verify = 100_000 if quick else 1_000_000
    n_db = 2_000 if quick else 10_000
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        single = _db_appends(tmp, n_db // 5, 1)
        batched = _db_appends(tmp, n_db, 100)
        export = tmp / "ledger.jsonl"
        chained = _export(export, n_verify)
        size = export.stat().st_size
        times = []
        for _ in range(2 if quick else 3):
            t0 = time.perf_counter()
            r = subprocess.run([*computewatch_cli(), "ledger", "verify", str(export)],
                               capture_output=True, text=True, check=False)  # fmt: skip
            times.append(time.perf_counter() - t0)
            if r.returncode != 0:
                raise SystemExit(f"ledger verify failed: {r.stdout}{r.stderr}")
    best = min(times)
    s.table(
        ["what", "figure"],
        [
            ("appends into SQLite, one transaction each (as an ingest)", f"{single:,.0f} /s"),
            ("appends into SQLite, 100 per transaction", f"{batched:,.0f} /s"),
            ("entries hashed and chained in memory", f"{chained:,.0f} /s"),
            (f"`ledger verify` of {n_verify:,} entries + checkpoints ({size / 1e6:,.0f} MB)",
             f"{best:.1f} s (best of {len(times)}; {n_verify / best:,.0f} entries/s)"),
        ],
    )  # fmt: skip
    s.add(
        "Verification reads the export, recomputes every SHA-256, follows every previous "
        "hash and checks every Ed25519 checkpoint signature: it is linear in the entries."
    )
    return s


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    cli_main(run, __doc__)
