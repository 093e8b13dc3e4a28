"""The server under load, stepped to the knee: live runs uploading, event streams open, slow
clients, and the runs pages read meanwhile; on one server process on SQLite and on two server
processes sharing one PostgreSQL.

What the load is (everything on loopback, from one asyncio process with a small HTTP/1.1 client
of its own, so that the load generator costs little of the machine's CPU):

* N simulated live runs. Each sends what the live uploader of ``computewatch run`` sends
  (``upload/stream.py``): the run's current state, built once by ``upload.payload.build_upload``
  from a real run that ``computewatch run --gpu-backend fake:1xH100-SXM`` records while this
  benchmark starts (one fake GPU: about 80 series), signed with a node key
  (``ledger.keys.sign_report``; one key per team, registered for it), in the request the client
  makes (gzip level 6, ``Content-Encoding: gzip``, a new connection per request, as urllib
  does). Each run uploads with ``final: false`` and an increasing ``seq`` every 5 s, spaced as
  the live uploader spaces them (at least 10 times what the last one took), backs off after failures
  (``upload.stream.backoff_delay``) and after a 429 waits as the live uploader does (the longer of
  that backoff and ``Retry-After`` doubled at each refusal in a row, with jitter:
  ``upload.client.busy_delay``; the final upload as ``push`` does, ``busy_delay`` alone); at the
  step's end each
  sends its final upload (``final: true``, completed), retried until stored or 60 s.
  The body of every upload is the same document with its run id and seq (the JSON keys that vary
  come last, so one gzip stream's state is copied for each body instead of compressing it all).
* M = N/5 open ``GET /api/v1/events`` streams (read tokens of the runs' 10 teams, so each sees a
  tenth of the uploads), counting the events that arrive.
* 50 slow clients: authenticated uploads whose body trickles in at 64 bytes a second (the
  server's ``--body-timeout``, 30 s, ends them; each then starts again).
* Per server process, once a second in turn: the dashboard's Runs page (``GET /runs``, HTML) and
  ``GET /api/v1/runs`` (50 runs), with a read token.

N steps through 16, 32, 63, 125, 250, 500, 1000, 2000, 4000 (60 s each) until a step breaks: a
5xx, a timeout or another error, a final upload not stored, p99 of the stored uploads' latency
over 250 ms, p99 of a runs page over 300 ms, or fewer uploads stored per second than 90 % of
what the runs offer. The target step (1,000 runs on SQLite, 2,000 on PostgreSQL) is measured
too when the ladder broke below it. The runs stay in the database from step to step.

Then, on each: 64 distinct end-of-run uploads sent at once (all stored?) and 50 copies of one
run (seq 1 to 50) sent at once (stored once, with seq 50?), both read back through the API.

Per step: uploads offered and stored per second, p50 and p99 of the stored uploads' round trip
and the server's own p50 (``Server-Timing: app``), p99 of each runs page, counts of 5xx, 429,
timeouts and other errors, events delivered per second, the CPU of the server processes (and of
PostgreSQL's), and the load generator's own CPU.

Targets: 1,000 live runs + 200 streams on one process on SQLite and 2,000 + 400 on two on
PostgreSQL with zero 5xx, p99 upload ≤ 250 ms, p99 runs page ≤ 300 ms; the 64 end-of-run
uploads all stored; the 50 copies stored once with the highest seq.

    python benchmarks/bench_server_load.py [--quick]    # --quick: N = 10, 20; 15 s steps

``COMPUTEWATCH_BENCH_LOAD_SETUPS=postgresql`` (or ``sqlite``) measures one configuration alone.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
import zlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common import PostgresCluster, Section, cli_main, free_loopback_port, process_cpu_seconds

from computewatch import jsonout
from computewatch.ledger.keys import encode_public, load_or_create_private_key, sign_report
from computewatch.ledger.reports import usage_report
from computewatch.store import Store
from computewatch.upload.client import DEFAULT_TIMEOUT, INGEST_PATH, busy_delay
from computewatch.upload.payload import LiveRun, build_upload
from computewatch.upload.protocol import PROTOCOL_HEADER, PROTOCOL_VERSION
from computewatch.upload.stream import (
    MAX_BACKOFF,
    STREAM_BYTES_PER_SECOND,
    backoff_delay,
    next_beat,
    next_upload,
)

PY = sys.executable
INTERVAL = 5.0
"""Seconds between two live uploads of one run."""
COST_FACTOR = 10.0
"""The live uploader waits at least this many times what its last upload took (stream.py)."""
LIVE_TIMEOUT = min(10.0, INTERVAL)
"""A live upload's timeout, as the live uploader sets it: min(10 s, its interval)."""
FINAL_TIMEOUT = DEFAULT_TIMEOUT
FINAL_DEADLINE = 60.0
"""How long a run retries its final upload (then it counts as lost)."""
TEAMS = [f"team-{i}" for i in range(10)]
SLOW_CLIENTS = 50
SLOW_BYTES = 64
"""What a slow client sends each second."""
STREAMS_PER_RUN = 0.2
PROBE_PERIOD = 1.0
LADDER = (16, 32, 63, 125, 250, 500, 1000, 2000, 4000)
QUICK_LADDER = (10, 20)
STEP_SECONDS = 60.0
QUICK_STEP_SECONDS = 15.0
BODY_TIMEOUT = 30
BURST_RUNS = 64
COPIES = 50
RETRIES = 20
P99_UPLOAD_MS = 250.0
P99_PAGE_MS = 300.0


# -- the upload a live run sends ----------------------------------------------------------------


def record_run(home: Path, seconds: float) -> tuple[dict[str, Any], dict[str, Any]]:
    """A real run recorded by ``computewatch run`` on one fake GPU: the upload its live
    uploader builds while it runs (``seconds`` - 3 s in), and the final one."""
    env = dict(os.environ, COMPUTEWATCH_HOME=str(home))
    for k in ("COMPUTEWATCH_RUN_ID", "COMPUTEWATCH_SPOOL", "COMPUTEWATCH_SERVER"):
        env.pop(k, None)
    proc = subprocess.Popen(
        [PY, "-m", "computewatch", "run", "--quiet", "--gpu-backend", "fake:1xH100-SXM",
         "--interval", "1", "--", "sleep", str(seconds)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        db = home / "computewatch.db"
        deadline = time.monotonic() + seconds + 60
        while not db.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(max(0.0, seconds - 3.0))
        with Store.open(db, create=False, busy_timeout=5.0) as store:
            run = store.list_runs()[0]
            live: dict[str, Any] = dict(build_upload(store, run, seq=1, live=LiveRun()))
        proc.wait(timeout=seconds + 60)
        with Store.open(db, create=False, busy_timeout=5.0) as store:
            run = store.list_runs()[0]
            final: dict[str, Any] = dict(build_upload(store, run, seq=1))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if live["final"] or not final["final"]:
        raise RuntimeError("the recorded run was not running, then finished, as expected")
    return live, final


class Template:
    """One upload document, as bodies for any run id and seq: gzip of
    ``{"protocol": 1, "runs": [upload]}`` with the keys that vary last (the summary's ``id``,
    ``signed_report``, ``id``, ``seq``), so that the compressor's state after the rest is
    copied for each body."""

    def __init__(self, upload: dict[str, Any], keys: dict[str, Any]) -> None:
        self.upload = upload
        self.keys = keys
        """Each team's node key (Ed25519PrivateKey)."""
        doc = {k: v for k, v in upload.items() if k not in ("id", "seq", "summary")}
        doc.pop("signed_report", None)
        summary = {k: v for k, v in upload["summary"].items() if k != "id"}
        self.summary = summary
        dumps = self._dumps
        head = f'{{"protocol":{PROTOCOL_VERSION},"runs":['
        prefix = head + dumps(doc)[:-1] + ',"summary":' + dumps(summary)[:-1] + ',"id":"'
        self.prefix = prefix.encode()
        self._z = zlib.compressobj(6, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
        self._head = self._z.compress(self.prefix)
        self._reports: dict[str, dict[str, Any]] = {}
        self.wire_size = len(self.body(uuid.uuid4().hex, 1, TEAMS[0]))
        """Bytes of one body on the wire (gzip)."""
        self._reports.clear()

    @staticmethod
    def _dumps(obj: object) -> str:
        return jsonout.dumps(obj, separators=(",", ":"))

    def report(self, run_id: str) -> dict[str, Any]:
        """The unsigned usage report of this document as run ``run_id`` (seq 1)."""
        base = self._reports.get(run_id)
        if base is None:
            u = self.upload
            base = usage_report(
                run_id=run_id, seq=1, final=u["final"], status=u["status"],
                exit_code=u["exit_code"], started_at=u["started_at"], ended_at=u["ended_at"],
                summary={**self.summary, "id": run_id}, meta=u["meta"],
            )  # fmt: skip
            self._reports[run_id] = base
        return base

    def suffix(self, run_id: str, seq: int, team: str, base: int | None = None) -> bytes:
        signed = sign_report({**self.report(run_id), "seq": seq}, self.keys[team])
        more = f',"series_base":{base}' if base is not None else ""
        return (
            f'{run_id}"}},"signed_report":{self._dumps(signed)},"id":"{run_id}","seq":{seq}'
            f"{more}}}]}}"
        ).encode()

    def body(self, run_id: str, seq: int, team: str, base: int | None = None) -> bytes:
        z = self._z.copy()
        return self._head + z.compress(self.suffix(run_id, seq, team, base)) + z.flush()

    def check(self) -> int:
        """That a body decodes to the upload (with its run id and seq): its size."""
        rid = uuid.uuid4().hex
        body = self.body(rid, 7, TEAMS[0])
        doc = json.loads(zlib.decompress(body, 16 + zlib.MAX_WBITS))
        run = doc["runs"][0]
        assert run["id"] == rid and run["seq"] == 7 and run["summary"]["id"] == rid
        want = {k: v for k, v in self.upload.items() if k not in ("id", "seq", "signed_report")}
        got = {k: v for k, v in run.items() if k not in ("id", "seq", "signed_report")}
        want["summary"] = {**want["summary"], "id": rid}
        assert json.loads(self._dumps(want)) == got
        return len(body)

    def plain_size(self) -> int:
        return len(self.prefix) + len(self.suffix(uuid.uuid4().hex, 1, TEAMS[0]))


# -- a small HTTP/1.1 client --------------------------------------------------------------------


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes
    seconds: float


class Failed(Exception):
    """No answer: ``kind`` is ``timeout`` or ``error``."""

    def __init__(self, kind: str, what: str) -> None:
        super().__init__(what)
        self.kind = kind


def _dechunk(data: bytes) -> bytes:
    out = bytearray()
    while data:
        size_line, _, rest = data.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            break
        out += rest[:size]
        data = rest[size + 2 :]
    return bytes(out)


async def request(
    port: int,
    method: str,
    path: str,
    headers: dict[str, str],
    body: bytes = b"",
    timeout: float = 30.0,
) -> Answer:
    """One request on a new connection (``Connection: close``), read to the end."""
    t0 = time.perf_counter()
    writer = None
    try:
        async with asyncio.timeout(timeout):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n"
            head += "".join(f"{k}: {v}\r\n" for k, v in headers.items())
            if body or method == "POST":
                head += f"Content-Length: {len(body)}\r\n"
            writer.write(head.encode() + b"\r\n" + body)
            await writer.drain()
            raw = await reader.read()
    except TimeoutError:
        raise Failed("timeout", f"{method} {path}: no answer in {timeout:g} s") from None
    except OSError as e:
        raise Failed("error", f"{method} {path}: {e}") from None
    finally:
        if writer is not None:
            writer.close()
    seconds = time.perf_counter() - t0
    head_bytes, sep, content = raw.partition(b"\r\n\r\n")
    if not sep:
        raise Failed("error", f"{method} {path}: connection closed without an answer")
    lines = head_bytes.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    hdrs = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        hdrs[k.strip().lower()] = v.strip()
    if hdrs.get("transfer-encoding", "").lower() == "chunked":
        content = _dechunk(content)
    return Answer(status, hdrs, content, seconds)


# -- the servers --------------------------------------------------------------------------------


class ServerProcess:
    """A real ``computewatch server`` child process."""

    def __init__(self, db_url: str, home: Path) -> None:
        self.db_url = db_url
        self.home = home
        home.mkdir(parents=True, exist_ok=True)
        self.env = dict(os.environ, COMPUTEWATCH_HOME=str(home))
        for k in ("COMPUTEWATCH_RUN_ID", "COMPUTEWATCH_SPOOL"):
            self.env.pop(k, None)
        self.port = free_loopback_port()
        self.log = home / f"server-{self.port}.log"
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                [PY, "-m", "computewatch", "server", "--db", db_url, "--listen",
                 f"127.0.0.1:{self.port}", "--log-level", "warning",
                 "--body-timeout", str(BODY_TIMEOUT)],
                env=self.env, stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip
        deadline = time.monotonic() + 120
        while True:
            try:
                if asyncio.run(request(self.port, "GET", "/healthz", {}, timeout=2)).status == 200:
                    break
            except Failed:
                pass
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError(f"server did not start:\n{self.output()[-3000:]}")
            time.sleep(0.2)

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def cli(self, *args: str) -> str:
        r = subprocess.run(
            [PY, "-m", "computewatch", "server", *args, "--db", self.db_url],
            env=self.env, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        if r.returncode != 0:
            raise RuntimeError(f"server {args[0]} {args[1]}: {r.stderr}")
        return r.stdout.strip()

    def cpu(self) -> float:
        return process_cpu_seconds(self.proc.pid)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@dataclass
class Setup:
    """What one configuration serves with: its processes and their tokens."""

    name: str
    servers: list[ServerProcess]
    ingest: dict[str, str]
    read: dict[str, str]
    admin: str
    live: Template
    final: Template
    live_next: Template
    """A live upload after the first: each series' points from its last bucket on."""
    final_next: Template
    db_cpu: Any = None  # () -> float: the database's CPU seconds, when it has its own processes

    def server_for(self, i: int) -> ServerProcess:
        return self.servers[i % len(self.servers)]


# -- one step -----------------------------------------------------------------------------------


@dataclass
class Stats:
    upload_ms: list[float] = field(default_factory=list)
    server_ms: list[float] = field(default_factory=list)
    page_ms: dict[str, list[float]] = field(default_factory=lambda: {"html": [], "api": []})
    statuses: Counter[int] = field(default_factory=Counter)
    failures: Counter[str] = field(default_factory=Counter)
    stored: int = 0
    finals: set[str] = field(default_factory=set)
    began: set[str] = field(default_factory=set)
    """Runs that sent an upload (a slot's next run does not begin when the step ends first)."""
    events: int = 0
    stream_opens: int = 0
    slow_ended: Counter[str] = field(default_factory=Counter)
    errors_seen: list[str] = field(default_factory=list)
    resent: int = 0
    """Continuations the server sent back (needs_full), each followed by the whole state."""

    def answered(self, a: Answer) -> None:
        self.statuses[a.status] += 1
        if a.status >= 400 and a.status != 429 and len(self.errors_seen) < 5:
            self.errors_seen.append(f"{a.status} {a.body[:200]!r}")

    def failed(self, e: Failed) -> None:
        self.failures[e.kind] += 1
        if len(self.errors_seen) < 5:
            self.errors_seen.append(str(e))


def _server_ms(a: Answer) -> float | None:
    timing = a.headers.get("server-timing", "")
    if "dur=" not in timing:
        return None
    try:
        return float(timing.split("dur=")[1].split(",")[0].split(";")[0])
    except ValueError:
        return None


def _retry_after(a: Answer) -> float | None:
    try:
        return float(a.headers["retry-after"])
    except (KeyError, ValueError):
        return None


async def upload(
    setup: Setup, server: ServerProcess, team: str, tpl: Template, run_id: str, seq: int,
    timeout: float, stats: Stats, base: int | None = None,
) -> Answer | None:  # fmt: skip
    body = tpl.body(run_id, seq, team, base)
    headers = {
        "Authorization": f"Bearer {setup.ingest[team]}",
        "Content-Type": "application/json",
        "Content-Encoding": "gzip",
        "Accept": "application/json",
        PROTOCOL_HEADER: str(PROTOCOL_VERSION),
    }
    try:
        a = await request(server.port, "POST", INGEST_PATH, headers, body, timeout)
    except Failed as e:
        stats.failed(e)
        return None
    stats.answered(a)
    if a.status == 200:
        stats.stored += 1
        stats.upload_ms.append(a.seconds * 1000)
        ms = _server_ms(a)
        if ms is not None:
            stats.server_ms.append(ms)
    return a


RUN_LIFE = (60.0, 600.0)
"""Seconds a run lives, uniform between these: while a step lasts runs end (their final upload)
and others begin in their slots (a whole first upload), N live at every moment."""


def lives(n: int, seconds: float, rng: random.Random) -> list[list[tuple[str, float]]]:
    """Each slot's runs in turn as (run id, seconds from the step's start at which it ends);
    the first is part way through its life, the last ends with the step."""
    slots = []
    for _ in range(n):
        runs = []
        end = rng.uniform(0.0, rng.uniform(*RUN_LIFE))
        while end < seconds:
            runs.append((uuid.uuid4().hex, end))
            end += rng.uniform(*RUN_LIFE)
        runs.append((uuid.uuid4().hex, math.inf))
        slots.append(runs)
    return slots


BEAT = "on its beat"
AFTER_ANSWER = "an interval after the answer"
"""The live uploader's schedule before it kept a beat: the next upload ``max(INTERVAL,
COST_FACTOR x took)`` after the last answer (compared at N = 1,000 on SQLite)."""


async def live_run(
    setup: Setup, i: int, runs: list[tuple[str, float]], t0: float, stop_at: float,
    stats: Stats, ending: Stats, warming: Stats, rng: random.Random, cadence: str = BEAT,
) -> None:  # fmt: skip
    """One slot: its runs in turn, each uploading on its beat (every INTERVAL s) and ending
    with its final upload. Its first upload, in the INTERVAL before ``t0``, is the whole state
    of a run the server has not seen (every slot's at once: counted in ``warming``); when the
    step ends (``stop_at``) its live run's final upload is counted in ``ending``, the
    end-of-step burst; the steady state between in ``stats``."""
    server = setup.server_for(i)
    team = TEAMS[i % len(TEAMS)]
    phase = rng.uniform(0, INTERVAL)
    anchor = due = t0 - INTERVAL + phase  # due: the beat of the upload to come
    await asyncio.sleep(max(0.0, anchor - time.monotonic()))
    k = 0
    run_id, ends = runs[0]
    seq = 0
    failures = 0
    acked: int | None = None  # the last seq the server stored: the next upload continues it
    give_up = stop_at + INTERVAL + FINAL_DEADLINE
    while True:
        began = time.monotonic()
        at_end = began >= stop_at
        final = at_end or began >= t0 + ends
        if at_end and began > give_up:
            return  # lost: counted by its absence from stats.finals
        seq += 1
        if acked is None:
            tpl = setup.final if final else setup.live
        else:
            tpl = setup.final_next if final else setup.live_next
        into = ending if at_end else warming if began < t0 else stats
        into.began.add(run_id)
        a = await upload(
            setup, server, team, tpl, run_id, seq, FINAL_TIMEOUT if final else LIVE_TIMEOUT,
            into, acked,
        )  # fmt: skip
        took = time.monotonic() - began
        if a is not None and a.status == 200:
            result = json.loads(a.body)["results"][0]
            if result.get("needs_full"):
                into.resent += 1
                acked = None
                continue  # the whole state at once, as the client does
            acked = seq if result["stored"] else None
            failures = 0
            if final:
                stats.finals.add(run_id)
                if at_end:
                    return
                k += 1  # the next run in this slot begins at the next beat
                run_id, ends = runs[k]
                seq = 0
                acked = None
            if cadence == AFTER_ANSWER:
                due = time.monotonic() + max(
                    INTERVAL, COST_FACTOR * took, tpl.wire_size / STREAM_BYTES_PER_SECOND
                )
            else:
                due = next_upload(anchor, due, began, took, tpl.wire_size, INTERVAL)
            wait = due - time.monotonic()
        elif a is not None and a.status == 429:
            # as the clients do: the live uploader waits the longer of its backoff and what the
            # server asked (doubled at each refusal in a row, with jitter); push, busy_delay
            failures += 1
            wait = busy_delay(_retry_after(a), failures, rng)
            if not final:
                wait = max(wait, backoff_delay(failures, INTERVAL, MAX_BACKOFF, rng))
        else:
            failures += 1
            wait = backoff_delay(failures, INTERVAL if not final else 1.0, MAX_BACKOFF, rng)
        if not at_end:  # a run waiting out a backoff when the step ends ends then, on its beat
            end = next_beat(anchor, stop_at, INTERVAL) if cadence == BEAT else stop_at + phase
            wait = min(wait, end - time.monotonic())
        else:
            wait = min(wait, give_up - time.monotonic())
        await asyncio.sleep(max(0.0, wait))


async def event_stream(setup: Setup, i: int, stats: Stats) -> None:
    """One ``GET /api/v1/events`` reader, reconnecting as the server's ``retry`` says (2 s),
    until cancelled."""
    server = setup.server_for(i)
    token = setup.read[TEAMS[i % len(TEAMS)]]
    while True:
        writer = None
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection("127.0.0.1", server.port), 30
            )
            writer.write(
                f"GET /api/v1/events HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n"
                f"Authorization: Bearer {token}\r\nAccept: text/event-stream\r\n\r\n".encode()
            )
            await writer.drain()
            status_line = await asyncio.wait_for(reader.readline(), 30)
            if not status_line:
                raise Failed("error", "events: closed without an answer")
            status = int(status_line.split(b" ", 2)[1])
            stats.statuses[status] += 1
            if status != 200:
                if len(stats.errors_seen) < 5:
                    stats.errors_seen.append(f"events: {status_line!r}")
            else:
                stats.stream_opens += 1
                tail = b""
                while True:
                    chunk = await reader.read(65536)
                    if not chunk:
                        stats.failures["stream closed"] += 1
                        break
                    data = tail + chunk
                    stats.events += data.count(b"event: run")
                    tail = data[-12:].replace(b"event: run", b"")
        except Failed as e:
            stats.failed(e)
        except TimeoutError:
            stats.failed(Failed("timeout", "events: no answer in 30 s"))
        except OSError as e:
            stats.failed(Failed("error", f"events: {e}"))
        finally:
            if writer is not None:
                writer.close()
        await asyncio.sleep(2.0)


async def slow_client(setup: Setup, i: int, stop: asyncio.Event, stats: Stats) -> None:
    """An upload whose body trickles in at SLOW_BYTES a second, started again when the server
    gives up on it."""
    server = setup.server_for(i)
    team = TEAMS[i % len(TEAMS)]
    body = setup.live.body(uuid.uuid4().hex, 1, team)
    while not stop.is_set():
        writer = None
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(
                f"POST {INGEST_PATH} HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n"
                f"Authorization: Bearer {setup.ingest[team]}\r\n"
                "Content-Type: application/json\r\nContent-Encoding: gzip\r\n"
                f"Content-Length: {len(body)}\r\n\r\n".encode()
            )
            sent = 0
            while not stop.is_set() and sent < len(body):
                try:
                    got = await asyncio.wait_for(reader.read(1024), 1.0)
                except TimeoutError:
                    writer.write(body[sent : sent + SLOW_BYTES])
                    await writer.drain()
                    sent += SLOW_BYTES
                    continue
                if got.startswith(b"HTTP/1.1 "):
                    stats.slow_ended[got.split(b" ", 2)[1].decode()] += 1
                else:
                    stats.slow_ended["closed"] += 1
                break
        except OSError:
            stats.slow_ended["connection error"] += 1
        finally:
            if writer is not None:
                writer.close()
        if not stop.is_set():
            await asyncio.sleep(0.5)


async def probe(
    setup: Setup, server: ServerProcess, stop: asyncio.Event, t0: float, stop_at: float,
    stats: Stats, ending: Stats, warming: Stats,
) -> None:  # fmt: skip
    """The runs pages, one a second in turn: the dashboard's HTML and the API's JSON; those
    asked before ``t0`` count in ``warming``, after ``stop_at`` in ``ending``."""
    token = setup.read[TEAMS[0]]
    pages = (("html", "/runs"), ("api", "/api/v1/runs?limit=50"))
    k = 0
    while not stop.is_set():
        kind, path = pages[k % 2]
        k += 1
        began = time.monotonic()
        into = ending if began >= stop_at else warming if began < t0 else stats
        try:
            a = await request(
                server.port, "GET", path, {"Authorization": f"Bearer {token}"}, timeout=30
            )
        except Failed as e:
            into.failed(e)
        else:
            into.answered(a)
            if a.status == 200:
                into.page_ms[kind].append(a.seconds * 1000)
        await asyncio.sleep(max(0.0, PROBE_PERIOD - (time.monotonic() - began)))


def _p(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    if len(values) < 3:
        return max(values)
    return statistics.quantiles(values, n=100, method="inclusive")[int(q * 100) - 1]


@dataclass
class StepResult:
    """One step: the steady state (``seconds`` long: N runs live, some ending and others
    beginning) and, apart, the end-of-step burst in which every run still live ends."""

    n: int
    m: int
    seconds: float
    offered_s: float
    stored_s: float
    upload_p50: float
    upload_p99: float
    server_p50: float
    html_p99: float
    api_p99: float
    s5xx: int
    s429: int
    timeouts: int
    other: int
    runs: int
    """Runs in the step: N, and those that began in the place of runs that ended."""
    turned: int
    finals: int
    lost: int
    end_seconds: float
    """From the step's end until the last of its N runs' final uploads was answered."""
    end_p99: float
    end_429: int
    end_page_p99: float
    warm_p99: float
    """The first uploads: every run's whole state in the INTERVAL before the steady state."""
    warm_429: int
    events_s: float
    server_cpu: float
    db_cpu: float | None
    gen_cpu: float
    slow: str
    errors: list[str]

    def broken(self) -> list[str]:
        why = []
        if self.s5xx:
            why.append(f"{self.s5xx} 5xx")
        if self.timeouts or self.other:
            why.append(f"{self.timeouts} timeouts, {self.other} other errors")
        if self.lost:
            why.append(f"{self.lost} of {self.runs} final uploads not stored")
        if not self.upload_p99 <= P99_UPLOAD_MS:
            why.append(f"p99 upload {self.upload_p99:.0f} ms")
        if not max(self.html_p99, self.api_p99) <= P99_PAGE_MS:
            why.append(f"p99 runs page {max(self.html_p99, self.api_p99):.0f} ms")
        if self.stored_s < 0.9 * self.offered_s:
            why.append(f"{self.stored_s:.1f} of {self.offered_s:.1f} uploads/s stored")
        return why


def step(setup: Setup, n: int, seconds: float, cadence: str = BEAT) -> StepResult:
    m = max(1, round(n * STREAMS_PER_RUN))
    stats = Stats()
    ending = Stats()
    warming = Stats()
    rng = random.Random(n)
    slots = lives(n, seconds, rng)
    ids = [rid for runs in slots for rid, _ in runs]
    for rid in ids:  # the usage reports' hashes, before the clock starts
        setup.live.report(rid)
        setup.final.report(rid)

    async def scenario() -> float:
        stop = asyncio.Event()
        streams = [asyncio.create_task(event_stream(setup, i, stats)) for i in range(m)]
        background = [
            asyncio.create_task(slow_client(setup, i, stop, stats)) for i in range(SLOW_CLIENTS)
        ]
        await asyncio.sleep(min(5.0, 1.0 + m / 100))  # the streams open
        t0 = time.monotonic() + INTERVAL  # after each run's first upload
        stop_at = t0 + seconds
        background += [
            asyncio.create_task(probe(setup, s, stop, t0, stop_at, stats, ending, warming))
            for s in setup.servers
        ]
        await asyncio.gather(
            *(live_run(setup, i, runs, t0, stop_at, stats, ending, warming, rng, cadence)
              for i, runs in enumerate(slots))
        )  # fmt: skip
        wall = time.monotonic() - t0
        stop.set()
        for t in streams:
            t.cancel()
        await asyncio.gather(*background, *streams, return_exceptions=True)
        return wall

    cpu0 = [s.cpu() for s in setup.servers]
    db0 = setup.db_cpu() if setup.db_cpu else None
    own0 = os.times()
    wall = asyncio.run(scenario())
    own1 = os.times()
    server_cpu = sum(s.cpu() - c for s, c in zip(setup.servers, cpu0, strict=True)) / wall
    db_cpu = (setup.db_cpu() - db0) / wall if setup.db_cpu and db0 is not None else None
    gen_cpu = (own1.user + own1.system - own0.user - own0.system) / wall
    began = stats.began | ending.began | warming.began
    stored_finals = _stored_finals(setup, began)
    codes = stats.statuses + ending.statuses + warming.statuses
    s5xx = sum(v for k, v in codes.items() if k >= 500)
    other = sum(v for k, v in codes.items() if 400 <= k < 500 and k != 429)
    failures = stats.failures + ending.failures + warming.failures
    other += failures["error"] + failures["stream closed"]
    return StepResult(
        n=n, m=m, seconds=seconds, offered_s=n / INTERVAL, stored_s=stats.stored / seconds,
        upload_p50=_p(stats.upload_ms, 0.5), upload_p99=_p(stats.upload_ms, 0.99),
        server_p50=_p(stats.server_ms, 0.5),
        html_p99=_p(stats.page_ms["html"], 0.99), api_p99=_p(stats.page_ms["api"], 0.99),
        s5xx=s5xx, s429=stats.statuses[429], timeouts=failures["timeout"], other=other,
        runs=len(began), turned=len(began) - n, finals=len(stored_finals),
        lost=len(began) - len(stored_finals), end_seconds=wall - seconds,
        end_p99=_p(ending.upload_ms, 0.99), end_429=ending.statuses[429],
        end_page_p99=_p(ending.page_ms["html"] + ending.page_ms["api"], 0.99),
        warm_p99=_p(warming.upload_ms, 0.99), warm_429=warming.statuses[429],
        events_s=stats.events / wall, server_cpu=server_cpu, db_cpu=db_cpu, gen_cpu=gen_cpu,
        slow=", ".join(f"{k}: {v}" for k, v in sorted(stats.slow_ended.items())) or "–",
        errors=stats.errors_seen + ending.errors_seen + warming.errors_seen,
    )  # fmt: skip


def _admin_get(setup: Setup, path: str) -> Any:
    a = asyncio.run(
        request(
            setup.servers[0].port, "GET", path, {"Authorization": f"Bearer {setup.admin}"},
            timeout=120,
        )
    )  # fmt: skip
    if a.status != 200:
        raise RuntimeError(f"GET {path}: {a.status} {a.body[:300]!r}")
    return json.loads(a.body)


def _all_runs(setup: Setup, query: str = "") -> list[dict[str, Any]]:
    """Every run the server lists (all pages of ``GET /api/v1/runs``)."""
    runs: list[dict[str, Any]] = []
    cursor = None
    for _ in range(10_000):
        path = f"/api/v1/runs?limit=500{query}" + (f"&cursor={cursor}" if cursor else "")
        page = _admin_get(setup, path)
        runs += page["runs"]
        cursor = page.get("next_cursor")
        if not cursor:
            break
    return runs


def _stored_finals(setup: Setup, ids: set[str]) -> set[str]:
    """Which of ``ids`` the server holds as finished (final upload stored): read back."""
    return {r["id"] for r in _all_runs(setup, "&status=completed") if r["id"] in ids and r["final"]}


# -- the bursts ---------------------------------------------------------------------------------


async def _until_stored(
    setup: Setup, i: int, run_id: str, seq: int, stats: Stats
) -> bool:  # fmt: skip
    """An end-of-run upload retried (after Retry-After on a 429) until stored, RETRIES times."""
    for attempt in range(1, RETRIES + 1):
        a = await upload(
            setup, setup.server_for(i), TEAMS[0], setup.final, run_id, seq, 60.0, stats
        )
        if a is not None and a.status == 200:
            return True
        wait = _retry_after(a) if a is not None else None
        await asyncio.sleep(wait if wait is not None else backoff_delay(attempt, 1.0, 10.0))
    return False


def bursts(setup: Setup) -> dict[str, Any]:
    """64 distinct end-of-run uploads at once; 50 copies of one run (seq 1..50) at once."""
    out: dict[str, Any] = {}
    ids = [uuid.uuid4().hex for _ in range(BURST_RUNS)]
    stats = Stats()

    async def distinct() -> list[bool]:
        return list(
            await asyncio.gather(
                *(_until_stored(setup, i, rid, 1, stats) for i, rid in enumerate(ids))
            )
        )

    ok = asyncio.run(distinct())
    out["distinct_answers"] = dict(sorted(stats.statuses.items()))
    out["distinct_failures"] = dict(stats.failures)
    out["distinct_acked"] = sum(ok)
    out["distinct_stored"] = len(_stored_finals(setup, set(ids)))
    out["distinct_p99"] = _p(stats.upload_ms, 0.99)

    one = uuid.uuid4().hex
    stats = Stats()

    async def copies() -> list[bool]:
        return list(
            await asyncio.gather(
                *(_until_stored(setup, seq, one, seq, stats) for seq in range(1, COPIES + 1))
            )
        )

    ok = asyncio.run(copies())
    out["copies_answers"] = dict(sorted(stats.statuses.items()))
    out["copies_failures"] = dict(stats.failures)
    out["copies_acked"] = sum(ok)
    rows = [r for r in _all_runs(setup) if r["id"] == one]
    detail = _admin_get(setup, f"/api/v1/runs/{one}")
    out["copies_rows"] = len(rows)
    out["copies_seq"] = detail["run"]["seq"]
    return out


# -- the configurations -------------------------------------------------------------------------


def prepare(
    name: str, servers: list[ServerProcess], live: dict[str, Any], final: dict[str, Any],
    keys: dict[str, Any], db_cpu: Any = None,
) -> Setup:  # fmt: skip
    first = servers[0]
    ingest = {t: first.cli("token", "create", "--team", t, "--scope", "ingest") for t in TEAMS}
    read = {t: first.cli("token", "create", "--team", t, "--scope", "read") for t in TEAMS}
    admin = first.cli("token", "create", "--team", "ops", "--scope", "admin")
    for t in TEAMS:
        public = encode_public(keys[t].public_key())
        first.cli("node-key", "add", public, "--team", t, "--name", f"loadgen-{t}")
    return Setup(name, servers, ingest, read, admin, Template(live, keys), Template(final, keys),
                 Template(continued(live), keys), Template(continued(final), keys),
                 db_cpu)  # fmt: skip


CONTINUED_POINTS = 6
"""Points per series of a live upload after the first: a run sampled every second, uploading
every INTERVAL s, sends each series from its last bucket on (the live uploader's LiveRun)."""


def continued(upload: dict[str, Any]) -> dict[str, Any]:
    """``upload`` as the live uploader sends it once the server holds an earlier one: each
    series' last CONTINUED_POINTS points (``series_base`` is added per request)."""
    series = [{**x, "points": x["points"][-CONTINUED_POINTS:]} for x in upload["series"]]
    return {**upload, "series": series}


def ladder(setup: Setup, quick: bool, target: int) -> list[StepResult]:
    results: list[StepResult] = []
    steps = QUICK_LADDER if quick else LADDER
    seconds = QUICK_STEP_SECONDS if quick else STEP_SECONDS
    for n in steps:
        print(f"  {setup.name}: N={n} ...", file=sys.stderr, flush=True)
        r = step(setup, n, seconds)
        results.append(r)
        print(f"    {_row(setup, r)}", file=sys.stderr, flush=True)
        if r.broken():
            break
    if not quick and all(r.n != target for r in results):
        print(f"  {setup.name}: target N={target} ...", file=sys.stderr, flush=True)
        r = step(setup, target, seconds)
        results.append(r)
        print(f"    {_row(setup, r)}", file=sys.stderr, flush=True)
    return results


PROFILE_SECONDS = 30.0
CADENCE_PAIRS = 2
"""Steps of N = 1,000 on SQLite with each schedule of the live uploads, alternated."""


def py_spy() -> str | None:
    """py-spy beside this interpreter (the ``profile`` extra), or on PATH."""
    beside = Path(PY).parent / "py-spy"
    return str(beside) if beside.exists() else shutil.which("py-spy")


def profile(setup: Setup, n: int, seconds: float) -> tuple[StepResult, Counter[str], int] | str:
    """One more step of ``n`` runs with ``py-spy record --gil`` on the (first) server process:
    the step, the samples by frame (inclusive), and the number of samples; or why not."""
    spy = py_spy()
    if spy is None:
        return "py-spy is not installed (the `profile` extra)"
    out = Path(tempfile.mkdtemp(prefix="cw-bench-spy-")) / "server.txt"
    server = setup.servers[0]
    proc = subprocess.Popen(
        [spy, "record", "--pid", str(server.proc.pid), "--gil", "--rate", "100", "--format",
         "raw", "--duration", str(int(seconds)), "--nonblocking", "-o", str(out)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        r = step(setup, n, seconds)
        try:
            _, err = proc.communicate(timeout=seconds + 60)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
        frames: Counter[str] = Counter()
        total = 0
        if not out.exists():
            return f"py-spy wrote nothing: {err.decode(errors='replace')[-300:]}"
        for line in out.read_text(errors="replace").splitlines():
            stack, _, count = line.rpartition(" ")
            if not count.isdigit():
                continue
            k = int(count)
            total += k
            for f in {_LINE.sub(")", f) for f in stack.split(";")}:
                frames[f] += k
        return r, frames, total
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        shutil.rmtree(out.parent, ignore_errors=True)


_LINE = re.compile(r":\d+\)$")
"""A frame's line number: frames are counted by function, whichever line was running."""

WATCHED = (
    ("the ingest handler (all of it)", "ingest (computewatch/server/api.py"),
    ("body parse: JSON decode and validation of the batch", "parse_batch"),
    ("ingest's database work (each upload's runs)", "_store_runs ("),
    ("SQLAlchemy flush (ORM unit of work)", "Session.flush ("),
    ("JSON encode of stored documents", "JSONEncoder.encode"),
    ("JSON decode", "JSONDecoder.decode"),
    ("record_signature (node_keys.py; with the autoflush it may cause)", "record_signature"),
    ("Pydantic validation", "validate_python"),
    ("the runs pages (HTML)", "computewatch/server/web/"),
    ("event streams", "computewatch/server/events.py"),
    ("uvicorn's HTTP protocol (httptools, or h11)", "uvicorn/protocols/http/"),
)
"""Frames whose inclusive share of the server's GIL time is shown (label, substring)."""


def _watched(frames: Counter[str], total: int) -> list[tuple[str, str]]:
    rows = []
    for label, needle in WATCHED:
        hits = [f for f in frames if needle in f]
        share = max((frames[f] for f in hits), default=0) / total if total else 0.0
        rows.append((label, f"{share:.0%}"))
    return rows


def _top_own(frames: Counter[str], total: int, k: int = 12) -> list[tuple[str, str]]:
    entry = ("main (", "_main (", "<module> (", "serve (", "cmd_server (")
    own = [(f, c) for f, c in frames.items() if "computewatch/" in f and not f.startswith(entry)]
    own.sort(key=lambda fc: -fc[1])
    return [(f[:110], f"{c / total:.0%}") for f, c in own[:k]]


def _row(setup: Setup, r: StepResult) -> list[object]:
    why = r.broken()
    return [
        setup.name, r.n, r.m, f"{r.offered_s:.1f}", f"{r.stored_s:.1f}", f"{r.upload_p50:.0f}",
        f"{r.upload_p99:.0f}", f"{r.server_p50:.0f}", f"{r.html_p99:.0f}", f"{r.api_p99:.0f}",
        r.s5xx, r.s429, r.timeouts, r.other, f"{r.finals}/{r.runs} ({r.n} + {r.turned})",
        f"p99 {r.warm_p99:.0f} ms, {r.warm_429} × 429",
        f"{r.n} in {r.end_seconds:.1f} s: p99 {r.end_p99:.0f} ms, {r.end_429} × 429, "
        f"page p99 {r.end_page_p99:.0f} ms",
        f"{r.events_s:.1f}", f"{r.server_cpu:.0%}", "–" if r.db_cpu is None else f"{r.db_cpu:.0%}",
        f"{r.gen_cpu:.0%}", r.slow, "holds" if not why else "breaks: " + "; ".join(why),
    ]  # fmt: skip


HEADERS = (
    "setup", "N runs", "M streams", "offered/s", "stored/s", "upload p50 ms", "upload p99 ms",
    "server p50 ms", "/runs p99 ms", "/api/v1/runs p99 ms", "5xx", "429", "timeouts",
    "other errors", "finals stored (runs: N + begun)", "first uploads (before the step)",
    "end of step: the last finals", "events/s",
    "server CPU", "PostgreSQL CPU", "load CPU", "slow clients ended", "verdict",
)  # fmt: skip


def configuration(
    kind: str,
    quick: bool,
    live: dict[str, Any],
    final: dict[str, Any],
    keys: dict[str, Any],
    tmp: Path,
) -> tuple[Setup | None, list[StepResult], dict[str, Any], str]:
    """Run the ladder and the bursts on one configuration; (setup, steps, bursts, note)."""
    pg: PostgresCluster | None = None
    servers: list[ServerProcess] = []
    try:
        if kind == "sqlite":
            servers = [ServerProcess(f"sqlite:///{tmp / 'server.db'}", tmp / "home-sqlite")]
            setup = prepare("SQLite, 1 process", servers, live, final, keys)
            target = 1000
            note = "SQLite (WAL) in a temporary file"
        else:
            pg = PostgresCluster()
            url = pg.create_database()
            servers = [ServerProcess(url, tmp / f"home-pg-{k}") for k in range(2)]
            setup = prepare("PostgreSQL, 2 processes", servers, live, final, keys, pg.cpu_seconds)
            target = 2000
            note = f"PostgreSQL {pg.version()} (fsync as shipped, max_connections=300)"
        steps = ladder(setup, quick, target)
        burst = bursts(setup)
        if kind == "sqlite" and not quick:
            holding = [r.n for r in steps if not r.broken()]
            n = max(holding) if holding else steps[0].n
            print(f"  {setup.name}: N={n} under py-spy ...", file=sys.stderr, flush=True)
            burst["profile"] = (n, profile(setup, n, PROFILE_SECONDS))
            pairs = []
            for k in range(CADENCE_PAIRS):
                for cadence in (AFTER_ANSWER, BEAT) if k % 2 else (BEAT, AFTER_ANSWER):
                    print(f"  {setup.name}: N={target}, {cadence} ...", file=sys.stderr, flush=True)
                    pairs.append((cadence, step(setup, target, STEP_SECONDS, cadence)))
            burst["cadence"] = pairs
        for s in servers:
            if s.proc.poll() is not None:
                note += f"; a server process exited {s.proc.returncode}"
        return setup, steps, burst, note
    finally:
        for s in servers:
            s.stop()
        if pg is not None:
            pg.close()


TARGETS = {"sqlite": (1000, 200), "postgresql": (2000, 400)}
"""The target (runs, streams) of each configuration."""
SETUPS = [
    k.strip()
    for k in os.environ.get("COMPUTEWATCH_BENCH_LOAD_SETUPS", "sqlite,postgresql").split(",")
    if k.strip() in TARGETS
]
"""The configurations measured (``COMPUTEWATCH_BENCH_LOAD_SETUPS``: both by default)."""


def run(quick: bool) -> Section:
    section = Section("Server under load: live runs, event streams, slow clients, to the knee")
    tmp = Path(tempfile.mkdtemp(prefix="cw-bench-load-"))
    try:
        live, final = record_run(tmp / "recorder", 12.0 if quick else 30.0)
        keys = {t: load_or_create_private_key(tmp / f"node-key-{t}.pem") for t in TEAMS}
        sizes = Template(live, keys)
        gz = sizes.check()
        nxt = Template(continued(live), keys)
        gz_next = nxt.check()
        section.add(
            f"Each run's first live upload: a run on one fake H100 recorded by `computewatch "
            f"run` ({len(live['series'])} series, {len(live['series'][0]['points'])} points "
            f"each), built by the live uploader's own code and signed: "
            f"{sizes.plain_size():,} bytes of JSON, {gz:,} gzip-compressed. Each one after it "
            f"continues the last one the server stored (`series_base`, as the live uploader "
            f"sends to a server that lists the feature): each series' last {CONTINUED_POINTS} "
            f"points, {nxt.plain_size():,} bytes of JSON, {gz_next:,} compressed, whatever the "
            f"run's age; an answer `needs_full` is followed at once by the whole state. The "
            f"final upload likewise. Every {INTERVAL:g} s per run, on the run's own beat (its "
            f"first upload plus whole intervals, as the live uploader does); N runs live at "
            f"every moment: a run lives {RUN_LIFE[0]:g}-{RUN_LIFE[1]:g} s (uniform; the first "
            "ones part way through), then sends its final upload and another run begins in its "
            f"place with a whole first upload. M = N/5 event streams; {SLOW_CLIENTS} slow "
            f"clients at {SLOW_BYTES} B/s against `--body-timeout {BODY_TIMEOUT}`; the runs "
            f"pages once a second per process. Each step begins with every run's first "
            f"upload within one interval (the whole state of N runs the server has not seen: "
            f"a start-up burst, reported apart in *first uploads*), then "
            f"{'15' if quick else '60'} s of steady state, measured; then every run still "
            "live ends within one interval (all "
            "N final uploads in about 5 s, a burst far above the steady state's rate of "
            "endings), reported apart in *end of step*. Latencies are round trips of the "
            "uploads the server stored (200), from connecting to the last byte; *server p50* "
            "is its own time (`Server-Timing: app`). CPU is a share of one core over the "
            "step. *Finals stored* reads back every run that began, the end's included.",
            "",
        )
        results: list[tuple[Setup, list[StepResult], dict[str, Any], str]] = []
        targets: list[tuple[int, int]] = []
        for kind in SETUPS:
            setup, steps, burst, note = configuration(kind, quick, live, final, keys, tmp)
            assert setup is not None
            results.append((setup, steps, burst, note))
            targets.append(TARGETS[kind])
        section.table(HEADERS, [_row(s, r) for s, steps, _, _ in results for r in steps])
        section.add(
            "Databases: " + "; ".join(f"{s.name}: {note}" for s, _, _, note in results) + ".",
            "",
        )
        errors = [(s.name, r.n, e) for s, steps, _, _ in results for r in steps for e in r.errors]
        if errors:
            section.add("First errors seen (up to 5 a step):", "")
            section.table(("setup", "N", "error"), errors)
        section.table(
            ("setup", "64 end-of-run uploads at once", "stored (read back)", "p99 ms",
             "50 copies of one run at once", "rows (read back)", "stored seq"),
            [
                (s.name,
                 f"{b['distinct_answers']} {b['distinct_failures'] or ''}".strip(),
                 f"{b['distinct_stored']}/{BURST_RUNS}", f"{b['distinct_p99']:.0f}",
                 f"{b['copies_answers']} {b['copies_failures'] or ''}".strip(),
                 b["copies_rows"], b["copies_seq"])
                for s, _, b, _ in results
            ],
        )  # fmt: skip
        for s, _, b, _ in results:
            if "cadence" not in b:
                continue
            section.add(
                f"The live uploads' schedule ({s.name}, N = 1,000, {CADENCE_PAIRS} pairs of "
                "steps in alternating order): each run's uploads on its own beat (its first "
                "upload plus whole intervals; what the live uploader does) or, as it did before, "
                f"{INTERVAL:g} s (at least {COST_FACTOR:g}x the upload's time) after each answer.",
                "",
            )
            section.table(
                ("schedule", "upload p50 ms", "upload p99 ms", "page p99 ms", "429", "stored/s",
                 "server CPU"),
                [(c, f"{r.upload_p50:.0f}", f"{r.upload_p99:.0f}",
                  f"{max(r.html_p99, r.api_p99):.0f}", r.s429, f"{r.stored_s:.1f}",
                  f"{r.server_cpu:.0%}") for c, r in b["cadence"]],
            )  # fmt: skip
        for s, _, b, _ in results:
            if "profile" not in b:
                continue
            n, prof = b["profile"]
            if isinstance(prof, str):
                section.add(f"Where the server's time goes: not measured ({prof}).", "")
                continue
            r, frames, total = prof
            section.add(
                f"Where the server's time goes ({s.name}, one more step of N = {n} with "
                f"`py-spy record --gil --rate 100` on the server; {total:,} samples of the thread "
                f"holding the GIL; p99 upload {r.upload_p99:.0f} ms meanwhile): share of the "
                "samples in which each frame is on the stack.",
                "",
            )
            section.table(("frame", "share of GIL time"), _watched(frames, total))
            section.table(("computewatch frame (inclusive)", "share"), _top_own(frames, total))
        for (setup, steps, burst, _), (n, m) in zip(results, targets, strict=True):
            at = [r for r in steps if r.n == n]
            if quick or not at:
                section.target(f"{setup.name}: {n:,} runs + {m} streams", "not run", None)
            else:
                r = at[-1]
                page = max(r.html_p99, r.api_p99)
                measured = (
                    f"{r.s5xx} 5xx, p99 upload "
                    + (f"{r.upload_p99:.0f} ms" if r.upload_p99 == r.upload_p99 else "– (none)")
                    + ", p99 page "
                    + (f"{page:.0f} ms" if page == page else "– (none)")
                    + f", {r.stored_s:.0f}/{r.offered_s:.0f} uploads/s stored"
                )
                section.target(
                    f"{setup.name}: {n:,} runs + {m} streams, 0 5xx, p99 upload ≤ 250 ms, "
                    "p99 runs page ≤ 300 ms", measured, not r.broken(),
                )  # fmt: skip
            section.target(
                f"{setup.name}: {BURST_RUNS} end-of-run uploads at once all stored",
                f"{burst['distinct_stored']}/{BURST_RUNS}",
                burst["distinct_stored"] == BURST_RUNS,
            )
            section.target(
                f"{setup.name}: {COPIES} copies of one run stored once with seq {COPIES}",
                f"{burst['copies_rows']} row, seq {burst['copies_seq']}",
                burst["copies_rows"] == 1 and burst["copies_seq"] == COPIES,
            )
        return section
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    cli_main(run, __doc__)
