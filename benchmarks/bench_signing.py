"""Signed usage reports: what signing costs the client per upload (hash the summary and the
documents, sign with Ed25519) beside building the upload itself, what the server's check costs
per run at ingest (the key looked up in its database, the hashes recomputed, the signature
verified), and what checking the reports adds to ``ledger verify``.

The upload is a real stored run's, as ``push`` builds it: 600 one-second ticks of 20 series, its
summary, and a configuration document; the large case adds a 200 KiB document to ``meta``.

    python benchmarks/bench_signing.py [--quick]
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common import Section, cli_main
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from computewatch import jsonout
from computewatch.analysis.summary import build_summary
from computewatch.ledger.chain import Entry, next_entry
from computewatch.ledger.keys import encode_public, key_id
from computewatch.ledger.reports import document_sha256
from computewatch.ledger.verify import Header, verify
from computewatch.readings import Kind
from computewatch.serverdb.engine import open_database, upgrade
from computewatch.serverdb.node_keys import add_node_key, check_upload
from computewatch.store import COMPLETED, Store
from computewatch.upload.payload import build_upload
from computewatch.upload.protocol import RunUpload
from computewatch.upload.signing import ReportSigner

T0 = 1_700_000_000.0


def _stored_upload(tmp: Path) -> RunUpload:
    n, series = 600, 20
    with Store.open(tmp / "cw.db") as store:
        key = store.create_run(
            run_id="benchsign0001", name="bench", tags={"project": "p"},
            command=["python", "train.py"], cwd="/tmp", mode="run", started_at=T0,
            interval_seconds=1.0, host={"hostname": "box", "logical_cpus": 8},
        )  # fmt: skip
        store.write_batch(
            key,
            series=[(i, f"s{i}", {"i": str(i)}, Kind.GAUGE) for i in range(series)],
            ticks=[(t, 100.0 + t, T0 + t) for t in range(n)],
            samples=[(key, t, i, float(t % 97 + i)) for t in range(n) for i in range(series)],
            data_until=T0 + n - 1,
        )
        store.set_meta(key, "config", {"lr": 3e-4, "batch_size": 256, "model": "acme-7b"})
        store.update_run(key, status=COMPLETED, exit_code=0, ended_at=T0 + n)
        store.update_run(key, summary=build_summary(store, store.run_by_key(key)))
        return build_upload(store, store.run_by_key(key), seq=1, user="bench")


def _per_call(fn: Callable[[], object], n: int) -> float:
    """Median seconds per call over 5 rounds of ``n`` calls."""
    rounds = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        rounds.append((time.perf_counter() - t0) / n)
    return statistics.median(rounds)


def _fresh(up: RunUpload) -> RunUpload:
    return {k: v for k, v in up.items() if k != "signed_report"}  # type: ignore[return-value]


def _ledger(n: int, report: dict[str, Any] | None, key: Ed25519PrivateKey) -> list[Entry]:
    pub = key.public_key()
    reg = {"action": "register", "key_id": key_id(pub), "public_key": encode_public(pub),
           "team": "lab", "name": "node", "registered_at": T0, "revoked_at": None}  # fmt: skip
    entries = [next_entry(None, "node_key", reg)]
    body = {
        "run_id": "benchsign0001", "team": "lab", "status": "completed", "seq": 1,
        "started_at": T0, "ended_at": T0 + 600,
        "summary_sha256": report["summary_sha256"] if report else "f" * 64,
        "signature": "valid" if report else "unsigned", "signed_report": report,
    }  # fmt: skip
    for _ in range(n):
        entries.append(next_entry(entries[-1], "run", body))
    return entries


def run(quick: bool) -> Section:
    s = Section("Signed usage reports: signing and checking per upload")
    calls = 100 if quick else 500
    n_ledger = 5_000 if quick else 50_000
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        up = _stored_upload(tmp)
        signer = ReportSigner(tmp / "node-key.pem")
        signed = signer.sign(_fresh(up))
        assert "signed_report" in signed, signer.problem
        node_key = signer._load()
        assert node_key is not None
        big = _fresh(up)
        big["meta"] = {**up["meta"], "environment": {"packages": ["x" * 100] * 2048}}
        body = len(jsonout.dumps(up, separators=(",", ":")))
        big_meta = len(jsonout.dumps(big["meta"], separators=(",", ":")))

        with Store.open(tmp / "cw.db") as store:
            run_row = store.find_run("benchsign0001")
            build = _per_call(lambda: build_upload(store, run_row, seq=1, user="b"), 5 if quick
                              else 20)  # fmt: skip
        sign = _per_call(lambda: signer.sign(_fresh(up)), calls)
        sign_big = _per_call(lambda: signer.sign(_fresh(big)), max(10, calls // 10))
        hashes = _per_call(lambda: (document_sha256(up["summary"]), document_sha256(up["meta"])),
                           calls)  # fmt: skip

        db = open_database(f"sqlite:///{tmp / 'server.db'}")
        upgrade(db)
        with db.session() as session:
            add_node_key(session, encode_public(node_key.public_key()), team="lab", name="n")
            outcome = check_upload(session, "lab", signed).status
            assert outcome == "valid", outcome
            check = _per_call(lambda: check_upload(session, "lab", signed), calls)
            unsigned = _per_call(lambda: check_upload(session, "lab", _fresh(up)), calls)
        db.dispose()

        report = dict(signed["signed_report"])
        with_reports = _ledger(n_ledger, report, node_key)
        without = _ledger(n_ledger, None, node_key)
        times = {}
        for name, chain in (("signed", with_reports), ("unsigned", without)):
            t0 = time.perf_counter()
            v = verify(chain, Header({}))
            times[name] = time.perf_counter() - t0
            assert v.ok and v.reports == n_ledger, v.problem
    per_report = (times["signed"] - times["unsigned"]) / n_ledger
    s.table(
        ["what", "per upload"],
        [
            (f"`build_upload` of the run (JSON body {body / 1024:,.0f} KiB)",
             f"{build * 1e3:.1f} ms"),
            ("client: signing it (hash summary + meta, Ed25519 sign)", f"{sign * 1e3:.3f} ms"),
            ("... of which the two SHA-256 of canonical JSON", f"{hashes * 1e3:.3f} ms"),
            (f"client: signing with a {big_meta / 1024:,.0f} KiB `meta`",
             f"{sign_big * 1e3:.2f} ms"),
            ("server: check at ingest (key lookup in SQLite, hashes, verify)",
             f"{check * 1e3:.3f} ms"),
            ("server: check of an unsigned upload", f"{unsigned * 1e3:.3f} ms"),
            (f"`ledger verify`: {n_ledger:,} run entries with reports",
             f"{times['signed']:.2f} s ({per_report * 1e6:,.0f} µs per report more than unsigned)"),
        ],
    )  # fmt: skip
    s.add(
        "Signing is about the cost of hashing the summary and documents plus one Ed25519 "
        "signature; it grows with the documents' size, not the run's length (series are not "
        "hashed). The server's check reads one key row and verifies one signature."
    )
    return s


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    cli_main(run, __doc__)
