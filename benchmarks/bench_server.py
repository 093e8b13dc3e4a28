"""The server: ingest throughput from 8 concurrent clients, list and usage query times with
10,000 runs stored, and the memory of one server process, on SQLite and on PostgreSQL.

For each database a real ``computewatch server`` child process is started (SQLite: a temporary
file; PostgreSQL 15: a throw-away cluster made with Debian's ``initdb`` and ``pg_ctl`` in a
temporary directory, fsync on as shipped) and a token made with ``server token create``.

1. Ingest: 8 client threads, each with its own keep-alive connection, POST pre-encoded batches
   of 20 runs (each run: a summary with GPU, energy, carbon and cost figures, 4 series of 600
   points) until ``INGEST_RUNS`` runs are stored. Runs per second and points per second over the
   wall time of the phase (encoding is done before it starts).
2. The store filled to 10,000 runs over the last 30 days (10 teams, 40 users, 12 projects; small
   runs of one series), then with an admin token: ``GET /api/v1/runs`` first page (limit 50,
   newest first), a filtered page (team + status + tag, sorted by energy), and
   ``GET /api/v1/usage?by=team&since=30d``, each 30 times; the median and p90 of the server's
   own time (``Server-Timing: app``, from the request's arrival to its response's start) and of
   the round trip. On PostgreSQL the filtered page is measured right after the bulk load, before
   the planner has statistics (autovacuum's analyze comes within about a minute), and then
   everything after ``ANALYZE``.
3. The server process's RSS after that (``VmRSS``) and its peak (``VmHWM``) from /proc.

Targets: list pages ≤ 100 ms, usage by team ≤ 200 ms (server time, median).

    python benchmarks/bench_server.py [--quick]
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
from common import Section, cli_main, fmt_bytes

from computewatch import jsonout

PY = sys.executable
PG_BIN = Path("/usr/lib/postgresql/15/bin")
CLIENTS = 8
RUNS_PER_BATCH = 20
TOTAL_RUNS = 10_000
REPEAT = 30


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _as_postgres(cmd: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else cmd


class Postgres:
    """A throw-away PostgreSQL 15 cluster (fsync as shipped)."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="cw-bench-pg-"))
        os.chmod(self.dir, 0o755)
        if os.geteuid() == 0:
            shutil.chown(self.dir, "postgres", "postgres")
        self.port = _free_port()
        data = self.dir / "data"
        subprocess.run(
            _as_postgres([str(PG_BIN / "initdb"), "-D", str(data), "-A", "trust", "-U",
                          "postgres", "-E", "UTF8", "--locale=C"]),
            check=True, capture_output=True,
        )  # fmt: skip
        opts = f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c max_connections=200"
        subprocess.run(
            _as_postgres([str(PG_BIN / "pg_ctl"), "-D", str(data), "-l", str(self.dir / "log"),
                          "-o", opts, "-w", "start"]),
            check=True, capture_output=True,
        )  # fmt: skip
        self.data = data

    def url(self) -> str:
        import psycopg

        with psycopg.connect(
            f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres", autocommit=True
        ) as c:
            c.execute("CREATE DATABASE bench")
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/bench"

    def analyze(self) -> None:
        import psycopg

        with psycopg.connect(
            f"host=127.0.0.1 port={self.port} user=postgres dbname=bench", autocommit=True
        ) as c:
            c.execute("ANALYZE")

    def close(self) -> None:
        subprocess.run(
            _as_postgres([str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w",
                          "stop"]),
            capture_output=True, check=False,
        )  # fmt: skip
        shutil.rmtree(self.dir, ignore_errors=True)


class Server:
    def __init__(self, db_url: str, home: Path) -> None:
        self.db_url = db_url
        self.env = dict(os.environ, COMPUTEWATCH_HOME=str(home))
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [PY, "-m", "computewatch", "server", "--db", db_url, "--listen",
             f"127.0.0.1:{self.port}", "--log-level", "warning"],
            env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError("server did not start")
            time.sleep(0.1)

    def token(self, team: str, scope: str) -> str:
        r = subprocess.run(
            [PY, "-m", "computewatch", "server", "token", "create", "--db", self.db_url,
             "--team", team, "--scope", scope],
            env=self.env, capture_output=True, text=True, check=True,
        )  # fmt: skip
        return r.stdout.strip()

    def memory(self) -> tuple[int, int]:
        fields = {}
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            k, _, v = line.partition(":")
            fields[k] = v.strip()
        return int(fields["VmRSS"].split()[0]) * 1024, int(fields["VmHWM"].split()[0]) * 1024

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


TEAMS = [f"team-{i}" for i in range(10)]
USERS = [f"user-{i}" for i in range(40)]
PROJECTS = [f"project-{i}" for i in range(12)]


def _figure(v: float, unit: str, method: str) -> dict[str, Any]:
    return {"value": v, "unit": unit, "method": method, "low": v * 0.8, "high": v * 1.2,
            "assumptions": [], "source": "bench"}  # fmt: skip


def make_run(rng: random.Random, now: float, series: int, points: int) -> dict[str, Any]:
    start = now - rng.uniform(0, 30 * 86400)
    duration = rng.uniform(60, 12 * 3600)
    gpus = rng.choice([0, 1, 2, 4, 8])
    model = rng.choice(["H100-SXM5-80GB", "A100-SXM4-80GB", "L4"])
    kwh = duration / 3600 * (0.1 + 0.7 * gpus)
    summary = {
        "schema_version": 1, "duration_seconds": duration, "status": "completed",
        "cpu": {"seconds_total": duration * rng.uniform(0.5, 8), "method": "cgroup"},
        "gpus": [{"uuid": f"GPU-{k}", "model": model, "scope": "used by the run", "share": 1.0,
                  "utilization_mean": rng.random()} for k in range(gpus)],
        "energy": {"facility": _figure(kwh, "kWh", rng.choice(["measured", "modeled"]))},
        "carbon": {"total": _figure(kwh * 300, "gCO2e", "modeled")},
        "cost": {"total": _figure(duration / 3600 * (0.5 + 2.5 * gpus), "USD", "estimated")},
        "notes": [],
    }  # fmt: skip
    return {
        "id": uuid.UUID(int=rng.getrandbits(128)).hex, "seq": 1, "final": True,
        "name": f"run-{rng.randrange(10**6)}", "status": rng.choice(["completed"] * 9 + ["failed"]),
        "exit_code": 0, "started_at": start, "ended_at": start + duration,
        "host": f"node-{rng.randrange(64)}", "user": rng.choice(USERS),
        "project": rng.choice(PROJECTS),
        "tags": {"env": rng.choice(["prod", "dev"]), "seed": str(rng.randrange(100))},
        "command": ["python", "train.py"], "summary": summary, "meta": {},
        "series": [{"name": f"gpu.utilization.{k}", "labels": {"gpu_uuid": f"GPU-{k}"},
                    "bucket_seconds": duration / points,
                    "points": [[start + j * duration / points, 0.1, 0.5, 0.9]
                               for j in range(points)]} for k in range(series)],
    }  # fmt: skip


def _bodies(rng: random.Random, n_runs: int, series: int, points: int) -> list[tuple[str, bytes]]:
    """(team, body) per batch of RUNS_PER_BATCH runs."""
    now = time.time()
    out = []
    for k in range(0, n_runs, RUNS_PER_BATCH):
        runs = [make_run(rng, now, series, points) for _ in range(min(RUNS_PER_BATCH, n_runs - k))]
        out.append((rng.choice(TEAMS), jsonout.dumps({"protocol": 1, "runs": runs}).encode()))
    return out


def ingest(server: Server, tokens: dict[str, str], bodies: list[tuple[str, bytes]]) -> float:
    """Send every body from CLIENTS threads; the wall time."""
    work = list(bodies)
    lock = threading.Lock()
    errors: list[str] = []

    def client() -> None:
        with httpx.Client(base_url=server.url, timeout=120) as c:
            while True:
                with lock:
                    if not work:
                        return
                    team, body = work.pop()
                r = c.post(
                    "/api/v1/runs", content=body,
                    headers={"Authorization": f"Bearer {tokens[team]}",
                             "Content-Type": "application/json"},
                )  # fmt: skip
                if r.status_code != 200:
                    errors.append(f"{r.status_code} {r.text[:200]}")

    threads = [threading.Thread(target=client) for _ in range(CLIENTS)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    if errors:
        raise RuntimeError(f"{len(errors)} ingest errors, first: {errors[0]}")
    return wall


def timed(c: httpx.Client, path: str, params: dict[str, Any]) -> tuple[list[float], list[float]]:
    server_ms, round_ms = [], []
    c.get(path, params=params)  # warm
    for _ in range(REPEAT):
        t0 = time.perf_counter()
        r = c.get(path, params=params)
        round_ms.append((time.perf_counter() - t0) * 1000)
        assert r.status_code == 200, r.text
        server_ms.append(float(r.headers["server-timing"].split("dur=")[1]))
    return server_ms, round_ms


def _p(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=10)[int(q * 10) - 1] if len(values) > 2 else values[-1]


def bench_db(kind: str, quick: bool, section: Section) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="cw-bench-server-"))
    pg = Postgres() if kind == "postgresql" else None
    try:
        db_url = pg.url() if pg else f"sqlite:///{tmp / 'server.db'}"
        server = Server(db_url, tmp / "home")
        try:
            tokens = {t: server.token(t, "ingest") for t in TEAMS}
            admin = server.token("ops", "admin")
            rng = random.Random(1)
            ingest_runs = 400 if quick else 2000
            series, points = 4, 600
            bodies = _bodies(rng, ingest_runs, series, points)
            wall = ingest(server, tokens, bodies)
            body_bytes = sum(len(b) for _, b in bodies)
            result: dict[str, Any] = {
                "runs_s": ingest_runs / wall,
                "points_s": ingest_runs * series * points / wall,
                "mb_s": body_bytes / wall / 1e6,
                "body": body_bytes / len(bodies),
            }
            fill = _bodies(rng, TOTAL_RUNS - ingest_runs, 1, 60)
            ingest(server, tokens, fill)
            filter_params = {
                "limit": 50,
                "team": "team-3",
                "status": "completed",
                "tag": "env=prod",
                "sort": "energy",
                "order": "desc",
            }
            with httpx.Client(
                base_url=server.url, headers={"Authorization": f"Bearer {admin}"}, timeout=120
            ) as c:
                if pg:
                    # Right after the bulk load PostgreSQL has no statistics yet (autovacuum
                    # analyzes within about a minute): measured as it is, then after ANALYZE.
                    result["filtered_unanalyzed"] = timed(c, "/api/v1/runs", filter_params)
                    pg.analyze()
                first = timed(c, "/api/v1/runs", {"limit": 50})
                filtered = timed(c, "/api/v1/runs", filter_params)
                usage = timed(c, "/api/v1/usage", {"by": "team", "since": "30d"})
                rows = c.get("/api/v1/usage", params={"by": "team", "since": "30d"}).json()
                assert sum(r["runs"] for r in rows["rows"]) == TOTAL_RUNS
                page = c.get("/api/v1/runs", params={"limit": 500}).json()
                assert len(page["runs"]) == 500
            result["first"] = first
            result["filtered"] = filtered
            result["usage"] = usage
            result["rss"], result["hwm"] = server.memory()
            return result
        finally:
            server.stop()
    finally:
        if pg:
            pg.close()
        shutil.rmtree(tmp, ignore_errors=True)


def run(quick: bool) -> Section:
    section = Section("Server: ingest, queries over 10,000 runs, memory")
    results = {kind: bench_db(kind, quick, section) for kind in ("sqlite", "postgresql")}
    section.add(
        f"Ingest: {CLIENTS} concurrent clients, batches of {RUNS_PER_BATCH} runs × 4 series × "
        "600 points (real `computewatch server` process, token auth, one transaction per batch).",
        "",
    )
    section.table(
        ["database", "runs/s", "points/s", "MB/s of JSON", "body per batch"],
        [
            (
                k,
                f"{r['runs_s']:.0f}",
                f"{r['points_s']:,.0f}",
                f"{r['mb_s']:.1f}",
                fmt_bytes(r["body"]),
            )
            for k, r in results.items()
        ],
    )
    section.add(f"Queries with {TOTAL_RUNS:,} runs stored (30 days), {REPEAT} times each, ms:", "")
    rows = []
    for k, r in results.items():
        for name, key in (("GET /runs first page", "first"), ("GET /runs filtered", "filtered"),
                          ("GET /usage?by=team (month)", "usage")):  # fmt: skip
            server_ms, round_ms = r[key]
            med, p90 = statistics.median(server_ms), _p(server_ms, 0.9)
            rows.append((k, name, f"{med:.1f}", f"{p90:.1f}", f"{statistics.median(round_ms):.1f}"))
        if "filtered_unanalyzed" in r:
            server_ms, round_ms = r["filtered_unanalyzed"]
            med, p90 = statistics.median(server_ms), _p(server_ms, 0.9)
            name = "GET /runs filtered, before ANALYZE"
            rows.append((k, name, f"{med:.1f}", f"{p90:.1f}", f"{statistics.median(round_ms):.1f}"))
    section.table(["database", "query", "server median", "server p90", "round trip median"], rows)
    section.table(
        ["database", "server RSS after", "peak RSS"],
        [(k, fmt_bytes(r["rss"]), fmt_bytes(r["hwm"])) for k, r in results.items()],
    )
    for k, r in results.items():
        for name, key, limit in (
            ("list first page", "first", 100),
            ("list filtered", "filtered", 100),
            ("usage by team", "usage", 200),
        ):
            med = statistics.median(r[key][0])
            section.target(f"{k} {name} ≤ {limit} ms", f"{med:.1f} ms", med <= limit)
    return section


if __name__ == "__main__":
    cli_main(run, __doc__)
