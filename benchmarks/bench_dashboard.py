"""Dashboard: the Runs page of ``computewatch server`` holding 10,000 runs.

A real ``computewatch server`` child process on SQLite (and on PostgreSQL when Debian's
``postgresql`` 15 binaries are there: a throw-away cluster in a temporary directory) is seeded
with 10,000 runs of 5 teams, 20 users and 10 projects through ``POST /api/v1/runs`` (100 runs per
request). Then, with an admin token in ``Authorization: Bearer``, from this process over
loopback (HTTP included) and the server's own time from its ``Server-Timing`` header where it
sends one, median and 90th percentile of 30 requests each:

* the first page of ``/runs`` (50 runs, newest first);
* a filtered page: ``/runs?team=team-3&status=completed&sort=energy``;
* a deep page: the 100th page through the keyset cursor (``next`` links followed);

and the time to first paint of ``/runs`` in Debian's Chromium (Playwright, logged in with a
session cookie, every request to another host aborted): ``first-contentful-paint`` from
``performance.getEntriesByType('paint')``, median of fresh loads. ``--quick``: 2,000 runs.

    python benchmarks/bench_dashboard.py [--quick]
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from common import Section, child_env, cli_main, computewatch_cli, median

TARGET_SERVER_S = 0.100
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic",
]  # fmt: skip
PG_BIN = Path("/usr/lib/postgresql/15/bin")
REQUESTS = 30


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _p90(values: list[float]) -> float:
    v = sorted(values)
    return v[min(len(v) - 1, round(0.9 * (len(v) - 1)))]


def upload(i: int, rng: random.Random, now: float) -> dict[str, Any]:
    """One finished run as ``computewatch push`` uploads it, without series (the Runs page
    never reads them)."""
    duration = rng.uniform(60, 86400)
    start = now - rng.uniform(0, 90 * 86400)
    gpus = rng.choice((0, 1, 2, 4, 8))
    kwh = gpus * duration / 3600 * 0.5 + 0.01
    usd = gpus * duration / 3600 * 2.5

    def fig(v: float, unit: str, method: str) -> dict[str, Any]:
        return {"value": v, "unit": unit, "method": method, "low": v * 0.9, "high": v * 1.1,
                "assumptions": [], "source": "bench"}  # fmt: skip

    summary = {
        "schema_version": 1,
        "id": f"bench{i:07d}",
        "duration_seconds": duration,
        "status": "completed",
        "gpus": [
            {"uuid": f"GPU-{g}", "index": g, "name": "H100", "model": "H100-SXM",
             "simulated": True, "scope": "used by the run", "utilization_mean": rng.random(),
             "energy_joules": None, "energy_method": None, "throttle_seconds": {},
             "share": 1.0, "share_rule": "only process", "mig_parent_uuid": None}
            for g in range(gpus)
        ],
        "energy": {"facility": fig(kwh, "kWh", "measured")},
        "cost": {"total": fig(usd, "USD", "modeled")},
        "steps": {"count": int(duration), "samples_total": duration * 32},
        "notes": [],
    }  # fmt: skip
    return {
        "id": f"bench{i:07d}",
        "seq": 1,
        "final": True,
        "name": f"run-{i}",
        "status": rng.choice(("completed", "completed", "completed", "failed")),
        "exit_code": 0,
        "started_at": start,
        "ended_at": start + duration,
        "host": f"node-{i % 50}",
        "user": f"user-{i % 20}",
        "project": f"project-{i % 10}",
        "tags": {"env": rng.choice(("prod", "dev")), "model": f"m{i % 7}"},
        "command": ["python", "train.py", f"--seed={i}"],
        "summary": summary,
        "meta": {},
        "series": [],
    }


@contextmanager
def postgres() -> Iterator[str | None]:
    """A throw-away PostgreSQL cluster's database URL, or None without the binaries."""
    if not (PG_BIN / "initdb").exists():
        yield None
        return
    d = Path(tempfile.mkdtemp(prefix="cw-bench-pg-"))
    os.chmod(d, 0o755)
    as_pg = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    if os.geteuid() == 0:
        shutil.chown(d, "postgres", "postgres")
    port = _free_port()
    data = d / "data"
    try:
        subprocess.run(
            [*as_pg, str(PG_BIN / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres",
             "-E", "UTF8", "--locale=C", "--no-sync"],
            check=True, capture_output=True,
        )  # fmt: skip
        subprocess.run(
            [*as_pg, str(PG_BIN / "pg_ctl"), "-D", str(data), "-l", str(d / "log"), "-w", "-o",
             f"-p {port} -k {d} -c listen_addresses=127.0.0.1 -c fsync=off", "start"],
            check=True, capture_output=True,
        )  # fmt: skip
        import psycopg

        with psycopg.connect(
            f"host=127.0.0.1 port={port} user=postgres dbname=postgres", autocommit=True
        ) as conn:
            conn.execute('CREATE DATABASE "bench"')
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}/bench"
    finally:
        subprocess.run(
            [*as_pg, str(PG_BIN / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
            capture_output=True, check=False,
        )  # fmt: skip
        shutil.rmtree(d, ignore_errors=True)


class Server:
    def __init__(self, db_url: str, home: Path) -> None:
        self.db_url = db_url
        self.home = home
        self.env = child_env(COMPUTEWATCH_HOME=str(home))
        self.env.pop("COMPUTEWATCH_CONFIG", None)
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(home / "server.log", "wb")  # noqa: SIM115 - closed by stop()
        self.proc = subprocess.Popen(
            [*computewatch_cli(), "server", "--db", db_url, "--listen", f"127.0.0.1:{self.port}",
             "--log-level", "warning"],
            env=self.env, stdout=self.log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(self.url + "/healthz", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.1)
        raise RuntimeError("the server did not start: " + (home / "server.log").read_text())

    def token(self, team: str, scope: str) -> str:
        r = subprocess.run(
            [*computewatch_cli(), "server", "token", "create", "--db", self.db_url,
             "--team", team, "--scope", scope],
            env=self.env, capture_output=True, text=True, check=True,
        )  # fmt: skip
        return r.stdout.strip()

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def seed(server: Server, n: int) -> float:
    rng = random.Random(7)
    now = time.time()
    tokens = {t: server.token(f"team-{t}", "ingest") for t in range(5)}
    t0 = time.perf_counter()
    with httpx.Client(timeout=120) as c:
        for team, token in tokens.items():
            ids = [i for i in range(n) if i % 5 == team]
            for k in range(0, len(ids), 100):
                runs = [upload(i, rng, now) for i in ids[k : k + 100]]
                r = c.post(
                    server.url + "/api/v1/runs",
                    json={"protocol": 1, "runs": runs},
                    headers={"Authorization": f"Bearer {token}"},
                )
                r.raise_for_status()
    return time.perf_counter() - t0


def _server_timing(r: httpx.Response) -> float | None:
    """The ``Server-Timing: app;dur=MS`` the server sends (seconds), when it sends one."""
    for part in r.headers.get("server-timing", "").split(","):
        name, _, params = part.strip().partition(";")
        if name == "app" and params.startswith("dur="):
            try:
                return float(params[4:]) / 1000
            except ValueError:
                return None
    return None


def timed_gets(c: httpx.Client, path: str, n: int = REQUESTS) -> tuple[list[float], list[float]]:
    """Round trips seen by the client, and the server's own times (Server-Timing; empty when
    the server does not send it)."""
    c.get(path).raise_for_status()  # warm
    out: list[float] = []
    server: list[float] = []
    for _ in range(n):
        t0 = time.perf_counter()
        r = c.get(path)
        out.append(time.perf_counter() - t0)
        r.raise_for_status()
        st = _server_timing(r)
        if st is not None:
            server.append(st)
    return out, server


def deep_path(c: httpx.Client, pages: int) -> str:
    """The path of page ``pages`` of /runs, following the cursor links."""
    path = "/runs"
    for _ in range(pages - 1):
        html = c.get(path).text
        start = html.index('id="next-page"')
        href = html.rfind('href="', 0, start)
        path = html[href + 6 : html.index('"', href + 6)].replace("&amp;", "&")
    return path


def first_paint(url: str, token: str, loads: int) -> dict[str, Any] | str:
    if not Path(CHROMIUM).exists():
        return f"no Chromium at {CHROMIUM}"
    from playwright.sync_api import sync_playwright

    paints: list[float] = []
    blocked: list[str] = []
    errors: list[str] = []
    rows = 0
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            ctx = b.new_context(viewport={"width": 1400, "height": 900})

            def route(r: Any) -> None:
                if r.request.url.startswith(url + "/"):
                    r.continue_()
                else:
                    blocked.append(r.request.url)
                    r.abort()

            ctx.route("**/*", route)
            page = ctx.new_page()
            page.goto(url + "/login", wait_until="load")
            page.fill("#token", token)
            with page.expect_navigation():
                page.click("button[type=submit]")
            page.close()
            for _ in range(loads):
                page = ctx.new_page()
                page.on("pageerror", lambda e: errors.append(str(e)))
                page.goto(url + "/runs", wait_until="load")
                page.wait_for_function(
                    "performance.getEntriesByType('paint')"
                    ".some(e => e.name === 'first-contentful-paint')"
                )
                fcp = page.evaluate(
                    "performance.getEntriesByType('paint')"
                    ".find(e => e.name === 'first-contentful-paint').startTime"
                )
                paints.append(fcp / 1000.0)
                rows = page.locator("#runs tbody tr").count()
                page.close()
            ctx.close()
        finally:
            b.close()
    return {"fcp_s": median(paints), "rows": rows, "blocked": blocked, "errors": errors}


def measure(db_url: str, home: Path, n: int, quick: bool) -> dict[str, Any]:
    server = Server(db_url, home)
    try:
        seed_s = seed(server, n)
        admin = server.token("ops", "admin")
        with httpx.Client(
            base_url=server.url, headers={"Authorization": f"Bearer {admin}"}, timeout=60
        ) as c:
            first = timed_gets(c, "/runs")
            filtered = timed_gets(c, "/runs?team=team-3&status=completed&sort=energy")
            deep = timed_gets(c, deep_path(c, 20 if quick else 100))
            api = timed_gets(c, "/api/v1/runs?limit=50")
        paint = first_paint(server.url, admin, 3 if quick else 5)
    finally:
        server.stop()
    return {"seed_s": seed_s, "first": first, "filtered": filtered, "deep": deep, "api": api,
            "paint": paint}  # fmt: skip


def run(quick: bool) -> Section:
    s = Section("Dashboard: the Runs page at 10,000 runs")
    n = 2000 if quick else 10_000
    results: list[tuple[str, dict[str, Any]]] = []
    with tempfile.TemporaryDirectory(prefix="cw-bench-dash-") as tmp:
        root = Path(tmp)
        (root / "sqlite").mkdir()
        results.append(
            ("SQLite", measure(f"sqlite:///{root / 'server.db'}", root / "sqlite", n, quick))
        )
        with postgres() as pg:
            if pg is not None:
                (root / "pg").mkdir()
                results.append(("PostgreSQL 15", measure(pg, root / "pg", n, quick)))
    s.add(
        f"A real `computewatch server` holding {n:,} runs of 5 teams, seeded through "
        "`POST /api/v1/runs` (100 runs per request). Request times are measured by a client "
        "on the same machine over loopback (HTTP included), and the server's own time from "
        "its `Server-Timing: app;dur=` header where it sends one (request in to response "
        f"start), median and 90th percentile of {REQUESTS}; first paint is Chromium's "
        "`first-contentful-paint` of `/runs` (logged in, network limited to the server), "
        "median of fresh loads.",
        "",
    )
    if quick:
        s.add(f"*Quick mode: {n:,} runs, not 10,000.*", "")
    rows = []
    for db, r in results:
        paint = r["paint"]
        fcp = f"not measured: {paint}" if isinstance(paint, str) else f"{paint['fcp_s']:.3f}"
        for what, key in (
            ("/runs first page", "first"),
            ("/runs filtered (team, status, sort by energy)", "filtered"),
            ("/runs page 100 (keyset cursor)" if not quick else "/runs page 20", "deep"),
            ("/api/v1/runs?limit=50 (JSON)", "api"),
        ):
            trip, server = r[key]
            st = (
                f"{median(server) * 1000:.1f} / {_p90(server) * 1000:.1f}" if server else "not sent"
            )
            rows.append([db, what, st, f"{median(trip) * 1000:.1f}", f"{_p90(trip) * 1000:.1f}"])
        rows.append([db, "first contentful paint of /runs in Chromium (s)", "", fcp, ""])
        rows.append([db, f"seeding {n:,} runs (s)", "", f"{r['seed_s']:.1f}", ""])
    s.table(
        ("database", "measure", "server median / p90 (ms)", "round trip median (ms)",
         "round trip p90 (ms)"),
        rows,
    )  # fmt: skip
    for db, r in results:
        for what, key in (("first page", "first"), ("filtered page", "filtered")):
            trip, server = r[key]
            t = median(server) if server else median(trip)
            how = "server time" if server else "round trip"
            s.target(
                f"{db}: /runs {what} at {n:,} runs ≤ {TARGET_SERVER_S * 1000:.0f} ms",
                f"{t * 1000:.1f} ms ({how})",
                t <= TARGET_SERVER_S,
            )
        paint = r["paint"]
        if not isinstance(paint, str) and (paint["blocked"] or paint["errors"]):
            s.add(f"**{db}: requests blocked {paint['blocked']}, errors {paint['errors']}**", "")
    return s


if __name__ == "__main__":
    cli_main(run, __doc__)
