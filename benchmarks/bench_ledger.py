"""The ledger as a transparency log, side by side with the hash chain it replaced (*before*: the
package at ``BEFORE``, ``git archive`` into ``benchmarks/out/``; *after*: this tree), in one run:

- appends into a SQLite server database, one per transaction (as an ingest makes them) and 100
  per transaction;
- ``ledger verify`` of an export of 1,000,000 run entries (100,000 with ``--quick``): wall time
  and the peak memory of the verifying processes (the process and its workers together), the
  chain's verifier (which reads the whole file) beside the log's (which streams it), and the log's
  with one process and with its workers; and 100,000 run entries each with a node-signed report;
- the log's verifier before and after its check was made leaner (``LOG_BEFORE``), on the same
  export, one process: CPU per entry, the command's start-up (a 10-entry export) taken off;
- the log's signed head and its proofs on a 1,000,000-entry server database: a head signed
  (what the upkeep does every few seconds, off the ingest path), and inclusion and consistency
  proofs answered by a real ``computewatch server`` over HTTP.

    python benchmarks/bench_ledger.py [--quick]
"""

from __future__ import annotations

import hashlib
import os
import random
import resource
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import psutil
from common import (
    HERE,
    Section,
    baseline_src,
    child_env,
    cli_main,
    computewatch_cli,
    free_loopback_port,
)
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

TREE = HERE.parent / "src"
"""This tree's package: the *after* of every measurement, here and in the children (whose
environment names it: ``child_env`` drops ``PYTHONPATH``, which would leave them the installed
package, the tree under test only where it is installed in development mode)."""
sys.path.insert(0, str(TREE))  # (the imports below are this tree's)

from computewatch.ledger.jcs import dumps  # noqa: E402
from computewatch.ledger.keys import encode_public, key_id, sign_report  # noqa: E402
from computewatch.ledger.log import header_json, line_from_parts  # noqa: E402
from computewatch.ledger.merkle import CompactRange, leaf_hash, node_hash  # noqa: E402
from computewatch.ledger.note import sign_checkpoint  # noqa: E402
from computewatch.ledger.reports import usage_report  # noqa: E402

BEFORE = "1175af1"
"""The hash chain with checkpoint entries: the parent of the commit that made the transparency
log."""
LOG_BEFORE = "76219d8"
"""The transparency log before its verifier's check was made one loop per block of entries
(the fast canonical check without its second encoding and substring tests, the entries' shape
read without a call each) and its reading process stopped counting newlines."""
ORIGIN = "computewatch.ledger/bench"
FIGURES = {
    "model": "acme-7b",
    "base_model": None,
    "stage": "pretrain",
    "gpu_hours": 8.0,
    "energy_kwh": 6.2,
    "duration_seconds": 3600.0,
    "devices": [{"model": "H100-SXM", "count": 8}],
    "flops": {"hardware": {"value": 1.1e21, "low": 8e20, "high": 1.3e21}},
}
"""A run's figures as its entry holds them (a small run: 8e20 FLOP is written whole)."""
OLD_BODY = {
    "run_id": "0" * 32,
    "team": "lab",
    "status": "completed",
    "seq": 12,
    "started_at": 1.7e9,
    "ended_at": 1.7e9 + 3600,
    "summary_sha256": "f" * 64,
    "model": "acme-7b",
    "stage": "pretrain",
    "gpu_hours": 8.0,
    "energy_kwh": 6.2,
    "flops": {"hardware": {"value": 1e21, "low": 8e20, "high": 1.2e21}},
}
"""The chain's run entry body, as its own benchmark wrote it."""


def _body(i: int, report: dict[str, object] | None = None) -> dict[str, object]:
    return {
        "run_id": uuid.UUID(int=random.getrandbits(128)).hex,
        "team": "lab",
        "status": "completed",
        "seq": 12,
        "started_at": 1.7e9 + i,
        "ended_at": 1.7e9 + i + 3600.25,
        "summary_sha256": hashlib.sha256(b"%d" % i).hexdigest(),
        "signature": "unsigned" if report is None else "valid",
        "signed_report": report,
        "figures": FIGURES,
    }


# -- appends ---------------------------------------------------------------------------------------

_APPENDS = """
import sys, time
from computewatch.serverdb.engine import open_database, upgrade
from computewatch.serverdb.ledger_store import append
body = {body}
out = []
for per_tx, n in ((1, {single}), (100, {batched})):
    db = open_database(f"sqlite:///{{sys.argv[1]}}-{{per_tx}}.db")
    upgrade(db)
    t0 = time.perf_counter()
    done = 0
    while done < n:
        with db.session() as session:
            for _ in range(min(per_tx, n - done)):
                append(session, "run", body)
                done += 1
            session.commit()
    out.append(n / (time.perf_counter() - t0))
    db.dispose()
print(*out)
"""


def _appends(tmp: Path, src: Path | None, quick: bool) -> tuple[float, float]:
    """Appends per second (one per transaction, 100 per transaction), in a child process on
    the package at ``src`` (None: this tree)."""
    body = OLD_BODY if src is not None else _body(0)
    script = _APPENDS.format(
        body=repr(body), single=1000 if quick else 4000, batched=5000 if quick else 20000
    )
    r = subprocess.run(
        [sys.executable, "-c", script, str(tmp / ("before" if src else "after"))],
        env=child_env(src or TREE),
        capture_output=True,
        text=True,
        check=True,
    )
    single, batched = (float(x) for x in r.stdout.split())
    return single, batched


# -- exports ---------------------------------------------------------------------------------------


def _log_export(path: Path, n: int, *, signed: bool = False) -> tuple[Path, int]:
    """An export of ``n`` run entries (after a node_key entry when ``signed``, each run then
    carrying a report that node signed over its figures), with one head over it."""
    server = Ed25519PrivateKey.generate()
    node = Ed25519PrivateKey.generate()
    tree = CompactRange()
    seq = 0
    with open(path.with_suffix(".body"), "wb") as f:

        def add(kind: str, body: dict[str, object]) -> None:
            nonlocal seq
            seq += 1
            line = line_from_parts(seq, "2026-12-01T10:00:00.000000Z", kind, dumps(body))
            tree.append_hash(leaf_hash(line))
            f.write(line + b"\n")

        if signed:
            pub = node.public_key()
            add(
                "node_key",
                {
                    "action": "register",
                    "key_id": key_id(pub),
                    "public_key": encode_public(pub),
                    "team": "lab",
                    "name": "node-a",
                    "registered_at": 1.7e9,
                    "revoked_at": None,
                },
            )
        for i in range(n):
            report = None
            body = _body(i)
            if signed:
                unsigned = usage_report(
                    run_id=str(body["run_id"]),
                    seq=12,
                    final=True,
                    status="completed",
                    exit_code=0,
                    started_at=1.7e9 + i,
                    ended_at=1.7e9 + i + 3600.25,
                    summary={"i": i},
                    meta={},
                    figures=FIGURES,
                )
                report = sign_report(unsigned, node)
                body = {**_body(i, report), "summary_sha256": report["summary_sha256"]}
                body["run_id"] = report["run_id"]
            add("run", body)
    cp = sign_checkpoint(ORIGIN, seq, tree.root(), 1_800_000_000, server)
    pub = server.public_key()
    header = header_json(
        origin=ORIGIN,
        exported_at="bench",
        public_keys={key_id(pub): encode_public(pub)},
        first_seq=1,
        prefix=[],
        entries=seq,
        heads=[cp.text()],
    )
    with open(path, "wb") as out, open(path.with_suffix(".body"), "rb") as body_file:
        out.write(dumps(header) + b"\n")
        while chunk := body_file.read(1 << 20):
            out.write(chunk)
    path.with_suffix(".body").unlink()
    key_file = path.with_suffix(".pub")
    key_file.write_text(encode_public(pub) + "\n")
    return key_file, seq


_CHAIN_EXPORT = """
import sys
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from computewatch.ledger.chain import next_entry
from computewatch.ledger.keys import CHECKPOINT_KIND, checkpoint_body, encode_public
from computewatch.ledger.verify import export_lines, header_json
key = Ed25519PrivateKey.generate()
body = {body}
entries, last = [], None
while len(entries) < {n}:
    last = next_entry(last, "run", body)
    entries.append(last)
    if last.seq % 1000 == 0:
        last = next_entry(last, CHECKPOINT_KIND, checkpoint_body(last, key))
        entries.append(last)
head = header_json([key.public_key()], exported_at="bench", entries=len(entries))
with open(sys.argv[1], "wb") as f:
    f.writelines(export_lines(head, entries))
with open(sys.argv[1] + ".pub", "w") as f:
    f.write(encode_public(key.public_key()))
"""


def _chain_export(path: Path, n: int, src: Path) -> Path:
    script = _CHAIN_EXPORT.format(body=repr(OLD_BODY), n=n)
    subprocess.run([sys.executable, "-c", script, str(path)], env=child_env(src), check=True)
    return Path(f"{path}.pub")


def _verify(
    path: Path, key: Path, src: Path | None, *extra: str
) -> tuple[float, float, str, float]:
    """Seconds and peak MiB (the verifying process and its workers together, sampled every
    20 ms) of ``ledger verify``; what it printed; and the CPU seconds (user and system) of the
    process and its workers: other load on the machine disturbs it less than the wall time,
    though not nothing (a busy 2-core machine measured the chain's verifier at 2.3 times its
    quiet CPU time)."""
    cmd = [*computewatch_cli(), "ledger", "verify", str(path), "--public-key", str(key), *extra]
    if src is not None:
        cmd = [sys.executable, "-m", "computewatch", *cmd[len(computewatch_cli()) :]]
    cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        cmd, env=child_env(src or TREE), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    peak = 0
    parent = psutil.Process(proc.pid)
    while proc.poll() is None:
        try:
            tree = [parent, *parent.children(recursive=True)]
            peak = max(peak, sum(p.memory_info().rss for p in tree))
        except psutil.Error:
            pass
        time.sleep(0.02)
    out, err = proc.communicate()
    seconds = time.perf_counter() - t0
    cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)  # the child and the workers it reaped
    cpu = cpu1.ru_utime - cpu0.ru_utime + cpu1.ru_stime - cpu0.ru_stime
    if proc.returncode != 0:
        raise SystemExit(f"ledger verify failed: {out.decode()}{err.decode()}")
    return seconds, peak / 2**20, out.decode().strip().splitlines()[0], cpu


# -- heads and proofs on a big server database -----------------------------------------------------


def _big_database(path: Path, n: int) -> Ed25519PrivateKey:
    """A server database (this tree's schema) holding ``n`` small entries, their tree and one
    head, written straight with sqlite3."""
    from computewatch.serverdb.engine import open_database, upgrade

    db = open_database(f"sqlite:///{path}")
    upgrade(db)
    db.dispose()
    key = Ed25519PrivateKey.generate()
    stack: list[tuple[int, bytes]] = []
    with sqlite3.connect(path) as c:
        c.execute("PRAGMA synchronous = OFF")
        entries: list[tuple[int, str, str, str]] = []
        nodes: list[tuple[int, bytes]] = []
        for i in range(n):
            seq, body = i + 1, f'{{"n":{i}}}'
            when = "2026-12-01T10:00:00.000000Z"
            h, level, index = leaf_hash(line_from_parts(seq, when, "note", body)), 0, i
            entries.append((seq, when, "note", body))
            nodes.append((index, h))
            while stack and stack[-1][0] == level:
                _, left = stack.pop()
                h, level, index = node_hash(left, h), level + 1, index >> 1
                nodes.append((level << 48 | index, h))
            stack.append((level, h))
            if len(entries) >= 50_000:
                c.executemany("INSERT INTO ledger_entries VALUES (?, ?, ?, ?)", entries)
                c.executemany("INSERT INTO ledger_nodes VALUES (?, ?)", nodes)
                entries, nodes = [], []
        c.executemany("INSERT INTO ledger_entries VALUES (?, ?, ?, ?)", entries)
        c.executemany("INSERT INTO ledger_nodes VALUES (?, ?)", nodes)
        c.execute("INSERT INTO ledger_meta VALUES ('origin', ?)", (ORIGIN,))
    return key


def _timed(f: Callable[[], object], k: int) -> list[float]:
    out = []
    for _ in range(k):
        t0 = time.perf_counter()
        f()
        out.append((time.perf_counter() - t0) * 1e3)
    return out


def _p(ms: list[float], q: float) -> float:
    return statistics.quantiles(ms, n=100)[int(q) - 1] if len(ms) > 2 else max(ms)


def _proofs(tmp: Path, n: int) -> dict[str, list[float]]:
    """Milliseconds: a head signed over the tree (the upkeep's work), inclusion and consistency
    proofs built from the stored subtrees (in process), and the same answered by a real
    ``computewatch server`` over HTTP."""
    import httpx
    from sqlalchemy import text

    from computewatch.serverdb.engine import open_database
    from computewatch.serverdb.ledger_store import consistency, inclusion, sign_head

    path = tmp / "big.db"
    key = _big_database(path, n)
    db = open_database(f"sqlite:///{path}")
    out: dict[str, list[float]] = {}

    def sign() -> None:
        with db.session() as session:
            session.execute(text("DELETE FROM ledger_heads"))
            sign_head(session, key)
            session.commit()

    sign()  # warm: the database's pages
    out["head signed over the tree"] = _timed(sign, 20)
    rng = random.Random(1)
    with db.session() as session:
        out["inclusion proof, in process"] = _timed(
            lambda: inclusion(session, rng.randint(1, n), n), 200
        )
        out["consistency proof, in process"] = _timed(
            lambda: consistency(session, rng.randint(1, n - 1), n), 200
        )
    db.dispose()
    home = tmp / "server-home"
    home.mkdir()
    (tmp / "none.toml").write_text("")
    env = child_env(TREE, COMPUTEWATCH_HOME=str(home), COMPUTEWATCH_CONFIG=str(tmp / "none.toml"))
    (home / "ledger-ed25519.pem").write_bytes(_pem(key))
    os.chmod(home / "ledger-ed25519.pem", 0o600)
    token = subprocess.run(
        [
            *computewatch_cli(),
            "server",
            "token",
            "create",
            "--db",
            f"sqlite:///{path}",
            "--team",
            "lab",
            "--scope",
            "admin",
        ],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    port = free_loopback_port()
    server = subprocess.Popen(
        [
            *computewatch_cli(),
            "server",
            "--db",
            f"sqlite:///{path}",
            "--listen",
            f"127.0.0.1:{port}",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        with httpx.Client(
            base_url=f"http://127.0.0.1:{port}",
            timeout=30,
            headers={"Authorization": f"Bearer {token}"},
        ) as client:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                try:
                    if client.get("/api/v1/ledger/head").status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                time.sleep(0.2)
            # A server's first upkeep replays the whole log into its cache (later rounds feed
            # only new entries): measured apart, as the time until the server's CPU settles,
            # and the proofs after it (answered meanwhile, they wait for the interpreter).
            settled = _settle(server.pid)
            out["start-up: the first upkeep's replay of the log (s, until the CPU settles)"] = [
                settled * 1000
            ]
            for _ in range(20):  # warm: connections, caches
                client.get("/api/v1/ledger/proof/consistency", params={"old": 5})

            def inc() -> None:
                r = client.get("/api/v1/ledger/proof/inclusion", params={"seq": rng.randint(1, n)})
                r.raise_for_status()

            def con() -> None:
                r = client.get(
                    "/api/v1/ledger/proof/consistency", params={"old": rng.randint(1, n - 1)}
                )
                r.raise_for_status()

            out["inclusion proof over HTTP"] = _timed(inc, 200)
            out["consistency proof over HTTP"] = _timed(con, 200)
            out["for comparison: GET /api/v1/runs?limit=1 (auth, access log)"] = _timed(
                lambda: client.get("/api/v1/runs", params={"limit": 1}).raise_for_status(), 200
            )
            out["for comparison: GET /healthz (no auth)"] = _timed(
                lambda: client.get("/healthz").raise_for_status(), 200
            )
    finally:
        server.terminate()
        server.wait(timeout=30)
    return out


def _settle(pid: int, limit: float = 600.0) -> float:
    """Seconds until process ``pid`` uses under a fifth of a core over a second (bounded)."""
    proc = psutil.Process(pid)
    t0 = time.monotonic()
    last = sum(proc.cpu_times()[:2])
    while time.monotonic() - t0 < limit:
        time.sleep(1.0)
        now = sum(proc.cpu_times()[:2])
        if now - last < 0.2:
            break
        last = now
    return time.monotonic() - t0


def _pem(key: Ed25519PrivateKey) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


# -- the section -----------------------------------------------------------------------------------


def run(quick: bool) -> Section:
    s = Section("Ledger: the transparency log beside the hash chain")
    n = 100_000 if quick else 1_000_000
    n_signed = 20_000 if quick else 100_000
    jobs = max(1, min(4, os.cpu_count() or 1))
    base = baseline_src(BEFORE)
    before = base if isinstance(base, Path) else None
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        after_appends = _appends(tmp, None, quick)
        before_appends = _appends(tmp, before, quick) if before else None
        log = tmp / "log.jsonl"
        log_key, entries = _log_export(log, n)
        log_size = log.stat().st_size
        log_base = baseline_src(LOG_BEFORE)
        log_before = log_base if isinstance(log_base, Path) else None
        tiny = tmp / "tiny.jsonl"
        tiny_key, tiny_n = _log_export(tiny, 10)
        start_after = min(_verify(tiny, tiny_key, None, "--jobs", "1")[3] for _ in range(3))
        one = _verify(log, log_key, None, "--jobs", "1")
        many = _verify(log, log_key, None, "--jobs", str(jobs))
        old_one = start_before = None
        if log_before is not None:  # side by side: before, then after again
            start_before = min(
                _verify(tiny, tiny_key, log_before, "--jobs", "1")[3] for _ in range(3)
            )
            old_one = _verify(log, log_key, log_before, "--jobs", "1")
            again = _verify(log, log_key, None, "--jobs", "1")
            one = min(one, again, key=lambda r: r[3])  # the lower CPU of the two
        log.unlink()
        signed = tmp / "signed.jsonl"
        signed_key, _ = _log_export(signed, n_signed, signed=True)
        signed_one = _verify(signed, signed_key, None, "--jobs", "1")
        signed_many = _verify(signed, signed_key, None, "--jobs", str(jobs))
        signed.unlink()
        chain = None
        if before is not None:
            old = tmp / "chain.jsonl"
            old_key = _chain_export(old, n, before)
            chain = _verify(old, old_key, before), old.stat().st_size
            old.unlink()
        proofs = _proofs(tmp, n)
    rows: list[tuple[str, str, str]] = []
    if before_appends:
        rows.append(
            (
                "appends into SQLite, one transaction each (as an ingest)",
                f"{before_appends[0]:,.0f} /s",
                f"{after_appends[0]:,.0f} /s",
            )
        )
        rows.append(
            (
                "appends into SQLite, 100 per transaction",
                f"{before_appends[1]:,.0f} /s",
                f"{after_appends[1]:,.0f} /s",
            )
        )
    else:
        rows.append(
            ("appends into SQLite, one transaction each", "–", f"{after_appends[0]:,.0f} /s")
        )
        rows.append(
            ("appends into SQLite, 100 per transaction", "–", f"{after_appends[1]:,.0f} /s")
        )
    old_cell = (
        "–"
        if chain is None
        else (
            f"{chain[0][0]:.1f} s (CPU {chain[0][3]:.1f} s), {chain[0][1]:,.0f} MiB "
            f"({chain[1] / 1e6:,.0f} MB)"
        )
    )
    rows.append(
        (
            f"`ledger verify` of {n:,} run entries, one process",
            old_cell,
            f"{one[0]:.1f} s (CPU {one[3]:.1f} s), {one[1]:,.0f} MiB ({log_size / 1e6:,.0f} MB)",
        )
    )
    rows.append(
        (
            f"... with --jobs {jobs}",
            "–",
            f"{many[0]:.1f} s (CPU {many[3]:.1f} s), {many[1]:,.0f} MiB",
        )
    )
    rows.append(
        (
            f"`ledger verify` of {n_signed:,} run entries with node-signed reports, one process",
            "–",
            f"{signed_one[0]:.1f} s (CPU {signed_one[3]:.1f} s), {signed_one[1]:,.0f} MiB",
        )
    )
    rows.append(
        (
            f"... with --jobs {jobs}",
            "–",
            f"{signed_many[0]:.1f} s (CPU {signed_many[3]:.1f} s), {signed_many[1]:,.0f} MiB",
        )
    )
    s.add(
        f"*Before*: the package at `{BEFORE}` (the hash chain with checkpoint entries); "
        "*after*: this tree (the Merkle tree with signed heads). Same machine, same run.",
        "",
    )
    s.table(["what", "before (chain)", "after (log)"], rows)
    s.table(
        ["on a server database of " + f"{n:,} entries", "median", "p95"],
        [
            (what.replace(" (s, until the CPU settles)", ""), f"{ms[0] / 1000:.1f} s", "–")
            if what.startswith("start-up")
            else (what, f"{statistics.median(ms):.2f} ms", f"{_p(ms, 95):.2f} ms")
            for what, ms in proofs.items()
        ],
    )
    per_entry = (one[3] - start_after) / (entries - tiny_n) * 1e6
    if old_one is not None and start_before is not None:
        per_before = (old_one[3] - start_before) / (entries - tiny_n) * 1e6
        s.table(
            [f"`ledger verify` of {n:,} run entries, one process",
             f"before (`{LOG_BEFORE}`)", "after (this tree)"],
            [
                ("wall", f"{old_one[0]:.1f} s", f"{one[0]:.1f} s"),
                ("CPU", f"{old_one[3]:.1f} s", f"{one[3]:.1f} s"),
                ("CPU of the start-up (10 entries)", f"{start_before:.2f} s",
                 f"{start_after:.2f} s"),
                ("CPU per entry, start-up taken off", f"{per_before:.1f} µs",
                 f"{per_entry:.1f} µs"),
                ("peak memory", f"{old_one[1]:,.0f} MiB", f"{one[1]:,.0f} MiB"),
            ],
        )  # fmt: skip
    s.add(
        "A proof is built in the server from about 40 stored subtree hashes read in one query "
        "(*in process*); over HTTP most of the time is the server's own per-request work "
        "(authentication, the access log, the framework), as the two requests for comparison "
        "show.",
        "",
    )
    s.add(
        f"One process verifies about {per_entry:.0f} µs of CPU per run entry: checking that it "
        "is its own RFC 8785 form (orjson's parse and sorted re-encoding compared with the "
        "line, and byte tests for the few numbers orjson writes otherwise, those lines left to "
        "the exact check), reading seq, kind and body, hashing it into the tree. A signed "
        "report adds an Ed25519 verification. With --jobs the export is read in blocks of whole "
        "lines handed to worker processes as they are; each worker checks its block and hashes "
        "its leaves into aligned subtrees, which the tree takes in order; memory stays flat "
        "whatever the export's size (the chain's verifier held the whole export)."
    )
    s.target(
        f"`ledger verify` of {n:,} entries ≤ 10 s",
        f"{many[0]:.1f} s (--jobs {jobs}); {one[0]:.1f} s in one process (CPU {one[3]:.1f} s)",
        many[0] <= 10,
    )
    s.target(
        "... ≤ 200 MiB peak (process and workers)",
        f"{max(one[1], many[1]):,.0f} MiB",
        max(one[1], many[1]) <= 200,
    )
    worst = max(
        _p(proofs["inclusion proof over HTTP"], 95), _p(proofs["consistency proof over HTTP"], 95)
    )
    s.target(
        f"inclusion and consistency proofs on {n:,} entries ≤ 10 ms from the server",
        f"p95 {worst:.1f} ms over HTTP",
        worst <= 10,
    )
    s.target(
        "appends ≥ 2,500/s on SQLite, one per transaction",
        f"{after_appends[0]:,.0f} /s",
        after_appends[0] >= 2500,
    )
    return s


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    cli_main(run, __doc__)
