"""What a TLS reverse proxy in front of ``computewatch server`` costs: nginx and Caddy as
docs/server.md configures them, against the server reached directly over plain HTTP.

One real ``computewatch server`` (SQLite in a temporary directory, ``--log-level warning``) on
127.0.0.1, and in front of it nginx and Caddy started from the documentation's own blocks by
tests/server/proxies.py (a throw-away CA, TLS 1.3, the proxy and the client on this machine).
For each path (direct, nginx, Caddy):

1. a small authenticated request (``GET /api/v1/me``) on one keep-alive connection, ``REPEAT``
   times: the round trip's median and p90;
2. an upload at the body limit: 16 MiB of JSON (one run padded with random printable text,
   which gzip keeps about 80 % of) sent by the upload client (``computewatch.upload.client``,
   gzip on, as ``push`` sends it), ``UPLOADS`` times with a new run id each: the median time
   from the request to the stored answer;
3. an open event stream (``/api/v1/events``): ``EVENTS`` uploads of a small run, each timed
   from the upload's answer to its event's arrival on the stream (the server on SQLite polls
   for changes twice a second, so up to about 0.5 s of that is the poll).

Targets: the proxy adds at most 5 ms to a small request's median round trip; an event reaches
an open stream through either proxy within 1 s (median) of the upload's answer.

    python benchmarks/bench_reverse_proxy.py [--quick]
"""

from __future__ import annotations

import os
import queue
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
from common import HERE, Section, cli_main

# The proxies' configurations come from docs/server.md through the tests' own helper, so that
# what is measured is what the documentation shows.
sys.path.insert(0, str(HERE.parent))
from tests.conftest import free_loopback_port
from tests.server.conftest import batch, synthetic_upload
from tests.server.proxies import PROXIES, Pki, Proxy, make_pki

from computewatch.upload.client import Client, encode_batch
from computewatch.upload.protocol import MAX_BODY_BYTES, PROTOCOL_HEADER

PY = sys.executable
REPEAT = 300
UPLOADS = 5
EVENTS = 20


def _start_server(home: Path) -> tuple[subprocess.Popen[bytes], int, str]:
    port = free_loopback_port()
    db = f"sqlite:///{home / 'server.db'}"
    env = dict(os.environ, COMPUTEWATCH_HOME=str(home))
    proc = subprocess.Popen(
        [PY, "-m", "computewatch", "server", "--db", db, "--listen", f"127.0.0.1:{port}",
         "--log-level", "warning"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline or proc.poll() is not None:
            raise RuntimeError("server did not start")
        time.sleep(0.1)
    token = subprocess.run(
        [PY, "-m", "computewatch", "server", "token", "create", "--db", db, "--team", "ml",
         "--scope", "admin"],
        env=env, capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    return proc, port, token


def _p(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def _small_requests(base: str, token: str, pki: Pki, n: int) -> list[float]:
    out = []
    with httpx.Client(base_url=base, verify=pki.context(),
                      headers={"Authorization": f"Bearer {token}"}) as c:  # fmt: skip
        for _ in range(20):  # warm: connection, TLS session
            c.get("/api/v1/me").raise_for_status()
        for _ in range(n):
            t0 = time.perf_counter()
            c.get("/api/v1/me").raise_for_status()
            out.append((time.perf_counter() - t0) * 1000)
    return out


def _big_body(run_id: str) -> bytes:
    up = synthetic_upload(run_id)
    up["meta"] = {"config": {"blob": ""}}
    rest = MAX_BODY_BYTES - len(encode_batch(batch(up)))
    alphabet = "".join(chr(c) for c in range(33, 127) if chr(c) not in '"\\').encode()
    raw = os.urandom(rest)
    up["meta"] = {"config": {"blob": bytes(alphabet[b % len(alphabet)] for b in raw).decode()}}
    body = encode_batch(batch(up))
    assert len(body) == MAX_BODY_BYTES
    return body


def _uploads(base: str, token: str, n: int, label: str) -> tuple[list[float], int]:
    times, wire = [], 0
    for i in range(n):
        body = _big_body(f"big-{label}-{i}")
        client = Client(base, token, timeout=120)
        t0 = time.perf_counter()
        answer = client.ingest_body(body)
        times.append(time.perf_counter() - t0)
        assert answer["results"][0]["stored"]
        wire = client.wire_bytes
    return times, wire


def _event_delays(base: str, token: str, pki: Pki, n: int, label: str) -> list[float]:
    lines: queue.Queue[tuple[float, str]] = queue.Queue()
    headers = {"Authorization": f"Bearer {token}"}
    reader = httpx.Client(base_url=base, verify=pki.context(), headers=headers, timeout=60)

    def read() -> None:
        try:
            with reader.stream("GET", "/api/v1/events") as r:
                for line in r.iter_lines():
                    lines.put((time.perf_counter(), line))
        except httpx.HTTPError:
            pass

    threading.Thread(target=read, daemon=True).start()
    while not lines.get(timeout=60)[1].startswith(": computewatch events"):
        pass
    delays = []
    with httpx.Client(base_url=base, verify=pki.context(), headers=headers, timeout=60) as c:
        for i in range(n):
            run_id = f"ev-{label}-{i}"
            r = c.post(
                "/api/v1/runs",
                content=encode_batch(batch(synthetic_upload(run_id))),
                headers={"Content-Type": "application/json", PROTOCOL_HEADER: "1"},
            )
            answered = time.perf_counter()
            r.raise_for_status()
            while True:
                at, line = lines.get(timeout=60)
                if line.startswith("data:") and f'"{run_id}"' in line:
                    delays.append(at - answered)
                    break
    reader.close()
    return delays


def run(quick: bool) -> Section:
    repeat, uploads, events = (50, 2, 5) if quick else (REPEAT, UPLOADS, EVENTS)
    section = Section("Reverse proxies (nginx, Caddy) in front of the server")
    tmp = Path(tempfile.mkdtemp(prefix="cw-bench-proxy-"))
    home = tmp / "home"
    home.mkdir()
    proc, port, token = _start_server(home)
    pki = make_pki(tmp / "pki")
    proxies: list[Proxy] = []
    old_cert_file = os.environ.get("SSL_CERT_FILE")
    os.environ["SSL_CERT_FILE"] = str(pki.ca)  # the upload client's (urllib's) trust
    try:
        paths = {"direct (HTTP)": f"http://127.0.0.1:{port}"}
        for kind in sorted(PROXIES):
            p = PROXIES[kind](tmp / kind, pki, port)
            proxies.append(p)
            paths[f"{kind} (HTTPS)"] = p.url
        results = {}
        for label, base in paths.items():
            small = _small_requests(base, token, pki, repeat)
            up_times, wire = _uploads(base, token, uploads, label.split()[0])
            delays = _event_delays(base, token, pki, events, label.split()[0])
            results[label] = (small, up_times, wire, delays)
    finally:
        for p in proxies:
            p.stop()
        proc.terminate()
        proc.wait(timeout=30)
        if old_cert_file is None:
            os.environ.pop("SSL_CERT_FILE", None)
        else:
            os.environ["SSL_CERT_FILE"] = old_cert_file
        shutil.rmtree(tmp, ignore_errors=True)
    versions = []
    for tool, args in (("nginx", ["-v"]), ("caddy", ["version"])):
        exe = shutil.which(tool)
        if exe:
            r = subprocess.run([exe, *args], capture_output=True, text=True, check=False)
            versions.append(f"{tool}: " + (r.stdout + r.stderr).strip().splitlines()[0])
    section.add(
        f"One server on SQLite; the proxies from docs/server.md ({'; '.join(versions)}); "
        f"{repeat} small requests, {uploads} uploads of 16 MiB of JSON, {events} events per "
        "path; client, proxy and server on this machine.",
        "",
    )
    rows = []
    for label, (small, up_times, wire, delays) in results.items():
        rows.append((
            label,
            f"{statistics.median(small):.2f}",
            f"{_p(small, 0.9):.2f}",
            f"{statistics.median(up_times):.2f}",
            f"{wire / 2**20:.1f} MiB",
            f"{statistics.median(delays) * 1000:.0f}",
            f"{max(delays) * 1000:.0f}",
        ))  # fmt: skip
    section.table(
        ["path", "GET /me median ms", "p90 ms", "16 MiB upload s (median)", "on the wire",
         "event delay median ms", "max ms"],
        rows,
    )  # fmt: skip
    direct = statistics.median(results["direct (HTTP)"][0])
    for label, (small, _, _, delays) in results.items():
        if label.startswith("direct"):
            continue
        added = statistics.median(small) - direct
        section.target(f"{label} adds ≤ 5 ms to a small request", f"{added:+.2f} ms", added <= 5)
        med = statistics.median(delays)
        section.target(f"{label} event within 1 s of its upload", f"{med * 1000:.0f} ms", med <= 1)
    return section


if __name__ == "__main__":
    cli_main(run, __doc__)
