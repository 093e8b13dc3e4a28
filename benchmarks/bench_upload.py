"""Uploads: what a 24-hour, 8-GPU run costs to upload and to store on the server, and how fast
``push`` sends runs.

1. The run of the report benchmark (``bench_report.build_run``: 86,400 ticks at 1 s × 150 series,
   8 fake H100s, a step a second, its summary stored as at the end of ``computewatch run``).
   ``build_upload`` (``upload/payload.py``: summary, documents, every series in at most
   ``MAX_POINTS`` min/mean/max buckets) timed in this process, median of 3; the JSON body's size
   and its gzip size (level 6, what ``Client(gzip=True)`` sends). Then what streaming costs
   once the live uploader has kept the run's state (``LiveRun``: series buckets and summary
   aggregates, nothing new to read): a live upload's build for the run as if still running,
   the final upload's build, and, for comparison, the running run's summary rebuilt from the
   store.
2. A real ``computewatch server`` child process on SQLite (a temporary file): the run pushed
   once through ``push_runs``; the server database's growth (file plus WAL after a
   checkpoint) is what storing it costs.
3. Push throughput: 50 runs of 10 minutes × 150 series pushed to that server in batches
   (``MAX_RUNS_PER_BATCH``), runs per second and bytes per second, payload building included.

``--quick`` uses a 2-hour run and 20 runs for the throughput.

    python benchmarks/bench_upload.py [--quick]
"""

from __future__ import annotations

import gzip
import os
import random
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import msgspec
from bench_report import _values, build_run, series_defs
from common import Section, cli_main, fmt_bytes, median

from computewatch import jsonout
from computewatch.analysis.summary import build_summary
from computewatch.store import COMPLETED, RUNNING, Store
from computewatch.upload.client import Client
from computewatch.upload.payload import LiveRun, build_upload
from computewatch.upload.protocol import MAX_POINTS
from computewatch.upload.push import plan_push, push_runs

PY = sys.executable
_CW = [PY, "-m", "computewatch"]
TARGET_BODY_BYTES = 16 * 1024 * 1024  # one request (protocol.MAX_BODY_BYTES)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _server_db_bytes(path: Path) -> int:
    with sqlite3.connect(path) as c:
        c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))


class _Server:
    def __init__(self, root: Path) -> None:
        self.db = root / "server.db"
        self.url_db = f"sqlite:///{self.db}"
        self.env = dict(os.environ, COMPUTEWATCH_HOME=str(root / "server-home"))
        port = _free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.log = open(root / "server.log", "wb")  # noqa: SIM115 - closed by stop()
        cmd = [PY, "-m", "computewatch", "server", "--db", self.url_db]
        self.proc = subprocess.Popen(
            [*cmd, "--listen", f"127.0.0.1:{port}"],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env=self.env,
        )
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(self.url + "/healthz", timeout=2):
                    break
            except OSError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise RuntimeError("the server did not start") from None
                time.sleep(0.1)
        create = ["token", "create", "--db", self.url_db, "--team", "bench", "--scope", "ingest"]
        self.token = subprocess.run(
            [*_CW, "server", *create],
            capture_output=True,
            text=True,
            env=self.env,
            check=True,
        ).stdout.strip()

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)
        self.log.close()


def _throughput_runs(path: Path, n: int, ticks: int) -> None:
    """``n`` finished runs of ``ticks`` seconds × the report run's 150 series."""
    defs = series_defs()
    rng = random.Random(5)
    with Store.open(path) as store:
        for r in range(n):
            started = time.time() - 86400 + r * ticks
            rk = store.create_run(
                run_id=f"tp{r:06d}", name=None, tags={"bench": "upload"},
                command=["python", "train.py"], cwd="/tmp", mode="run", started_at=started,
                interval_seconds=1.0,
                host={"logical_cpus": 2, "allowed_cores": 2.0},
            )  # fmt: skip
            values = _values(defs, rng)
            rows = [(rk, s, i, v) for s in range(ticks) for i, v in enumerate(next(values))]
            store.write_batch(
                rk,
                series=[(i, nm, lb, k) for i, (nm, lb, k) in enumerate(defs)],
                ticks=[(s, 5000.0 + s, started + s) for s in range(ticks)],
                samples=rows,
                data_until=started + ticks - 1,
            )
            store.update_run(rk, status=COMPLETED, exit_code=0, ended_at=started + ticks)
            store.update_run(rk, summary=build_summary(store, store.run_by_key(rk)))


def run(quick: bool) -> Section:
    s = Section("Uploads: a 24-hour 8-GPU run to the server, and push throughput")
    hours = 2 if quick else 24
    n_runs = 20 if quick else 50
    with tempfile.TemporaryDirectory(prefix="cw-bench-upload-") as tmp:
        root = Path(tmp)
        db = root / "computewatch.db"
        day = build_run(db, hours * 3600)
        with Store.open(db) as store:
            run_row = store.find_run(day["id"])
            times = []
            body = b""
            for _ in range(3):
                t0 = time.perf_counter()
                up = build_upload(store, run_row, seq=1)
                body = jsonout.dumps(up, separators=(",", ":")).encode()
                times.append(time.perf_counter() - t0)
            build_s = median(times)
            series = len(up["series"])
            points = sum(len(x["points"]) for x in up["series"])
            # streaming: what the live uploader keeps (series buckets, summary aggregates),
            # read whole once here (untimed; a live uploader reads it a few seconds at a time)
            running = msgspec.structs.replace(run_row, status=RUNNING, summary=None, ended_at=None)
            kept = LiveRun()
            kept.update(store, running)
            t0 = time.perf_counter()
            live_up = build_upload(store, running, seq=2, live=kept)
            jsonout.dumps(live_up, separators=(",", ":"))
            live_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            final_up = build_upload(store, run_row, seq=3, live=kept)
            jsonout.dumps(final_up, separators=(",", ":"))
            final_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            build_summary(store, running)
            rebuilt_s = time.perf_counter() - t0
        zipped = len(gzip.compress(body, compresslevel=6))
        server = _Server(root)
        try:
            before = _server_db_bytes(server.db)
            client = Client(server.url, server.token, timeout=120)
            with Store.open(db) as store:
                plan, _ = plan_push(store, server.url)
                t0 = time.perf_counter()
                report = push_runs(store, client, plan, server=server.url)
                push_s = time.perf_counter() - t0
            assert report.error is None and report.stored == [day["id"]], report.as_dict()
            stored_bytes = _server_db_bytes(server.db) - before
            # throughput
            tp_db = root / "throughput.db"
            _throughput_runs(tp_db, n_runs, 600)
            with Store.open(tp_db) as store:
                plan, _ = plan_push(store, server.url)
                t0 = time.perf_counter()
                tp = push_runs(store, client, plan, server=server.url)
                tp_s = time.perf_counter() - t0
            assert tp.error is None and len(tp.stored) == n_runs, tp.as_dict()
        finally:
            server.stop()
    s.add(
        f"A stored {hours}-hour run at 1 s with 8 GPUs ({hours * 3600:,} ticks × "
        f"{day['series']} series = {day['points']:,} points, the report benchmark's run). "
        f"`build_upload` in this process (median of 3, JSON encoding included); pushed once to "
        "a real `computewatch server` on SQLite; the server database's growth after a WAL "
        "checkpoint. Throughput: "
        f"{n_runs} runs of 10 minutes × 150 series pushed with `push_runs` (payloads built "
        "on the way).",
        "",
    )
    if quick:
        s.add("*Quick mode: a 2-hour run, not 24 hours.*", "")
    s.table(
        ("measure", "value"),
        [
            ["payload build, `push` (seconds)", round(build_s, 2)],
            ["a live upload's build at the end of the day, state kept (seconds)", live_s],
            ["the final upload's build after streaming, state kept (seconds)", final_s],
            ["(a running run's summary rebuilt from the store instead, seconds)", rebuilt_s],
            ["series uploaded", series],
            [f"points uploaded (≤ {MAX_POINTS} per series)", f"{points:,}"],
            ["JSON body", f"{fmt_bytes(len(body))} ({len(body):,} bytes)"],
            ["gzip body (level 6)", f"{fmt_bytes(zipped)} ({zipped:,} bytes)"],
            ["push of the run, build + send + store (seconds)", round(push_s, 2)],
            ["server database growth", f"{fmt_bytes(stored_bytes)} ({stored_bytes:,} bytes)"],
            ["push throughput (runs per second)", round(n_runs / tp_s, 1)],
            ["push throughput (JSON bytes per second)", fmt_bytes(tp.bytes_sent / tp_s) + "/s"],
        ],
    )
    s.target(
        f"{hours} h × 8 GPUs fits one request (< 16 MiB)",
        fmt_bytes(len(body)),
        len(body) < TARGET_BODY_BYTES,
    )
    return s


if __name__ == "__main__":
    cli_main(run, __doc__)
