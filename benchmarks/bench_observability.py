"""The observability plumbing's cost: OTLP export per agent tick (the handover on the sampling
thread, and the mapping, collection and OTLP/HTTP export on the exporter's own thread, to a
local receiver), CloudWatch EMF per tick, and a py-spy capture's cost on the profiled job
(paired runs of a fixed CPU-bound workload, bare and while py-spy samples it at 100 Hz; and one
long job with py-spy attached in every other 2-second window, whose adjacent windows share the
machine's load).

The tick is a node agent's on 8 fake H100s (GPM, clocks, errors, links) with 200 processes
(about 600 samples). Times are CPU time of the thread doing the work (``time.thread_time``).

    python benchmarks/bench_observability.py [--quick]
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from common import Section, cli_main, median, spread

from computewatch.exporters.emf import EmfSink
from computewatch.exporters.otlp import OtlpSink
from computewatch.fleet.attribution import Attributor
from computewatch.fleet.node import NodeOptions, NodeSampler
from computewatch.metrics.model import MetricSample
from computewatch.profiling.pyspy import find_py_spy
from computewatch.sources.host import HostSource
from computewatch.sources.nvidia import NvidiaSource
from computewatch.testing import from_preset

TARGET_HANDOVER_US = 50.0  # on the sampling thread
TARGET_EXPORT_MS = 50.0  # on the exporter's thread, per tick
TARGET_PYSPY_SLOWDOWN = 0.05  # py-spy at 100 Hz (blocking) on a CPU-bound job

WORKLOAD = """
import time
t0 = time.perf_counter()
s = 0
for i in range({n}):
    s += i * i % 7
print(time.perf_counter() - t0, flush=True)
"""


def agent_samples(children: int) -> list[MetricSample]:
    procs = [
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        for _ in range(children)
    ]
    try:
        time.sleep(1.0)
        fake = from_preset("8xH100-SXM")
        node = NodeSampler(
            NodeOptions(node="bench"), Attributor(), host=HostSource(), cpu_model="unknown"
        )
        node.gpus = [NvidiaSource(fake, pids=node.pids_view, all_gpus=True)]
        for i, p in enumerate(procs[:16]):
            fake.devices[i % 8].add_process(p.pid)
        node.sample()
        time.sleep(0.5)
        out = node.sample()
        node.close()
        return out
    finally:
        for p in procs:
            p.kill()
            p.wait()


class _Receiver:
    def __init__(self) -> None:
        self.requests = 0
        self.bytes = 0
        me = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(n)
                me.requests += 1
                me.bytes += n
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def measure_otlp(samples: list[MetricSample], ticks: int) -> dict[str, Any]:
    rec = _Receiver()
    # The handover: what the sampling thread pays each tick (the sink's worker exports
    # meanwhile, as in the agent).
    live = OtlpSink(rec.url, node="bench", log=io.StringIO())
    # The export, timed alone on this thread (this sink's worker gets no tick: it stays idle).
    timed = OtlpSink(rec.url, node="bench", log=io.StringIO())
    try:
        timed.push(samples)  # instruments created once, like the agent's first tick
        handover, export_cpu, export_wall = [], [], []
        for k in range(ticks):
            c0 = time.thread_time()
            live.on_metrics(float(k), samples)
            handover.append((time.thread_time() - c0) * 1e6)
            time.sleep(0.05)  # the worker takes it
        for _ in range(ticks):
            c0, w0 = time.thread_time(), time.perf_counter()
            ok = timed.push(samples)
            export_cpu.append((time.thread_time() - c0) * 1e3)
            export_wall.append((time.perf_counter() - w0) * 1e3)
            assert ok
        return {
            "handover_us": handover,
            "export_cpu_ms": export_cpu,
            "export_wall_ms": export_wall,
            "bytes": rec.bytes / max(rec.requests, 1),
            "live_exported": live.exported,
        }
    finally:
        live.close()
        timed.close()
        rec.stop()


def measure_emf(samples: list[MetricSample], ticks: int) -> list[float]:
    with tempfile.TemporaryDirectory() as d:
        sink = EmfSink(str(Path(d) / "emf.log"))
        out = []
        for k in range(ticks):
            c0 = time.thread_time()
            sink.on_metrics(1.7e9 + k, samples)
            out.append((time.thread_time() - c0) * 1e3)
        sink.close()
        return out


def _workload(n: int, profile: bool, rate: int) -> tuple[float, float]:
    """The job's own time for its fixed work (it prints it) and, with ``profile`` (py-spy
    samples it from start to end), py-spy's own CPU seconds per second of sampling."""
    job = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.readline()\n" + WORKLOAD.format(n=n)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    spy = None
    assert job.stdin is not None and job.stdout is not None
    try:
        if profile:
            exe = find_py_spy()
            assert exe is not None, "py-spy is not installed"
            out = Path(tempfile.mkdtemp()) / "raw.txt"
            spy = subprocess.Popen(
                [exe, "record", "--pid", str(job.pid), "--rate", str(rate), "--format", "raw",
                 "--output", str(out), "--duration", "60"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip
            time.sleep(1.0)  # attached and sampling
        t0 = time.perf_counter()
        job.stdin.write("go\n")
        job.stdin.flush()
        seconds = float(job.stdout.readline())
        spy_cpu = 0.0
        if spy is not None:
            spy.terminate()
            _, _, ru = os.wait4(spy.pid, 0)
            spy.returncode = 0
            spy_cpu = (ru.ru_utime + ru.ru_stime) / max(time.perf_counter() - t0 + 1.0, 1e-9)
        return seconds, spy_cpu
    finally:
        job.stdin.close()
        job.wait()
        job.stdout.close()
        if spy is not None and spy.returncode is None:
            spy.kill()
            spy.wait()


CHUNKS = """
import sys, time
while True:
    t0 = time.perf_counter()
    s = 0
    for i in range(100000):
        s += i * i % 7
    t1 = time.perf_counter()
    sys.stdout.write(f"{t1!r} {t1 - t0!r}\\n")
    sys.stdout.flush()
"""


def measure_windows(cycles: int, window: float, rate: int) -> tuple[list[float], list[float]]:
    """One long job timing fixed chunks of work (a few ms each) without pause; py-spy samples it
    in every other ``window`` seconds. Per window, the median chunk time: windows next to each
    other share the machine's load, so their ratio is the capture's cost with the drift of
    other load taken out (chunks near an attach or detach are left out)."""
    exe = find_py_spy()
    assert exe is not None, "py-spy is not installed"
    job = subprocess.Popen([sys.executable, "-c", CHUNKS], stdout=subprocess.PIPE, text=True)
    assert job.stdout is not None
    chunks: list[tuple[float, float]] = []

    def read() -> None:
        assert job.stdout is not None
        for line in job.stdout:
            t, d = line.split()
            chunks.append((float(t), float(d)))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    spans: list[tuple[bool, float, float]] = []  # (spied, start, end)
    try:
        time.sleep(1.0)
        for _ in range(cycles):
            t0 = time.perf_counter()
            time.sleep(window)
            spans.append((False, t0 + 0.2, time.perf_counter() - 0.2))
            spy = subprocess.Popen(
                [exe, "record", "--pid", str(job.pid), "--rate", str(rate), "--format", "raw",
                 "--output", os.devnull, "--duration", "600"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip
            time.sleep(0.5)  # attached
            t1 = time.perf_counter()
            time.sleep(window)
            spans.append((True, t1, time.perf_counter()))
            spy.terminate()
            spy.wait()
            time.sleep(0.3)
    finally:
        job.kill()
        job.wait()
        reader.join(5)
        job.stdout.close()
    bare, spied = [], []
    for is_spied, a, b in spans:
        inside = [d for t, d in chunks if a <= t - d and t <= b]
        if len(inside) >= 5:
            (spied if is_spied else bare).append(median(inside))
    return bare, spied


def measure_pyspy(pairs: int, n: int, rate: int) -> tuple[list[float], list[float], list[float]]:
    bare, spied, spy_cpu = [], [], []
    _workload(n // 10, False, rate)  # warm the interpreter's files
    for _ in range(pairs):  # paired and interleaved: the machine's drift hits both alike
        bare.append(_workload(n, False, rate)[0])
        t, c = _workload(n, True, rate)
        spied.append(t)
        spy_cpu.append(c)
    return bare, spied, spy_cpu


def run(quick: bool) -> Section:
    s = Section("Observability: OTLP export per tick, CloudWatch EMF, py-spy on the job")
    samples = agent_samples(50 if quick else 200)
    ticks = 20 if quick else 100
    otlp = measure_otlp(samples, ticks)
    emf = measure_emf(samples, ticks)
    s.add(
        f"One agent tick: {len(samples)} samples (8 fake H100 with GPM, "
        f"{50 if quick else 200} processes); {ticks} ticks. OTLP/HTTP protobuf to a local "
        f"receiver, {otlp['bytes'] / 1024:.0f} KiB per request (uncompressed).",
        "",
    )
    s.table(
        ("per tick", "median", "min–max", "thread"),
        [
            ["OTLP: handover (on_metrics)", f"{median(otlp['handover_us']):.1f} µs",
             spread(otlp["handover_us"]), "sampling"],
            ["OTLP: map + collect + export (CPU)", f"{median(otlp['export_cpu_ms']):.2f} ms",
             spread(otlp["export_cpu_ms"]), "exporter"],
            ["OTLP: map + collect + export (wall)", f"{median(otlp['export_wall_ms']):.2f} ms",
             spread(otlp["export_wall_ms"]), "exporter"],
            ["EMF: documents + one write (CPU)", f"{median(emf):.2f} ms", spread(emf),
             "sampling"],
        ],
    )  # fmt: skip
    pairs = 3 if quick else 7
    n = 3_000_000 if quick else 8_000_000
    rate = 100
    bare, spied, spy_cpu = measure_pyspy(pairs, n, rate)
    ratios = [b2 / b1 - 1 for b1, b2 in zip(bare, spied, strict=True)]
    slow = median(ratios)
    s.table(
        ("CPU-bound job, fixed work", "median s", "min–max"),
        [
            ["bare", f"{median(bare):.3f}", spread(bare)],
            [f"under py-spy record --rate {rate} (blocking)", f"{median(spied):.3f}",
             spread(spied)],
            ["slowdown (paired)", f"{slow:+.1%}", spread([r * 100 for r in ratios])],
            ["slowdown of the fastest runs (least disturbed by other load)",
             f"{min(spied) / min(bare) - 1:+.1%}", ""],
            ["py-spy's own CPU (cores, while sampling)", f"{median(spy_cpu):.3f}",
             spread(spy_cpu)],
        ],
    )  # fmt: skip
    cycles = 4 if quick else 10
    wb, ws = measure_windows(cycles, 2.0, rate)
    wratios = [b / a - 1 for a, b in zip(wb, ws, strict=False)]
    s.table(
        ("one job, fixed chunks of work; py-spy on in every other 2 s window", "median chunk ms",
         "min–max"),
        [
            ["bare windows", f"{median(wb) * 1e3:.2f}", spread([x * 1e3 for x in wb])],
            ["windows under py-spy (blocking, 100 Hz)", f"{median(ws) * 1e3:.2f}",
             spread([x * 1e3 for x in ws])],
            ["slowdown (adjacent windows)", f"{median(wratios):+.1%}",
             spread([r * 100 for r in wratios])],
        ],
    )  # fmt: skip
    h = median(otlp["handover_us"])
    e = median(otlp["export_cpu_ms"])
    s.target(f"OTLP handover on the sampling thread ≤ {TARGET_HANDOVER_US:.0f} µs", f"{h:.1f} µs",
             h <= TARGET_HANDOVER_US)  # fmt: skip
    s.target(f"OTLP export per tick ≤ {TARGET_EXPORT_MS:.0f} ms CPU (exporter thread)",
             f"{e:.2f} ms", e <= TARGET_EXPORT_MS)  # fmt: skip
    wslow = median(wratios)
    mid = sorted(wratios)[len(wratios) // 4 : len(wratios) - len(wratios) // 4] or wratios
    spread_pct = max(mid) - min(mid)  # the middle half of the adjacent-window ratios
    s.target(
        f"py-spy capture slows the job ≤ {TARGET_PYSPY_SLOWDOWN:.0%} (adjacent windows)",
        f"{wslow:+.1%}",
        wslow <= TARGET_PYSPY_SLOWDOWN,
        inconclusive="windows vary more than the margin" if spread_pct > 0.1 else None,
    )
    return s


if __name__ == "__main__":
    cli_main(run, __doc__)
