"""Faults of the observability plumbing: an OTLP endpoint that is down or hangs never holds up
the agent's tick nor the job (the export runs on its own thread; a failure is said once), a
py-spy the system refuses is one clear line, a bad ``--profile-steps`` range is a usage error."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from tests.conftest import free_loopback_port

from computewatch.exporters.otlp import OtlpSink
from computewatch.metrics.model import MetricSample

READY = "print('ready', flush=True)\n"
GPU = (("gpu", "GPU-0"), ("gpu_index", "0"), ("node", "n1"))


def samples(v: float) -> list[MetricSample]:
    return [MetricSample("computewatch_gpu_utilization_ratio", GPU, v)]


def closed_port() -> int:
    return free_loopback_port()  # nothing listens there


class HungEndpoint:
    """An OTLP/HTTP endpoint that takes each request and answers only once released."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.arrived = threading.Event()
        self.bodies: list[ExportMetricsServiceRequest] = []
        me = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                me.arrived.set()
                me.release.wait(120)
                req = ExportMetricsServiceRequest()
                req.ParseFromString(body)
                me.bodies.append(req)
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
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


def test_a_hung_endpoint_does_not_hold_the_tick() -> None:
    endpoint = HungEndpoint()
    log = io.StringIO()
    sink = OtlpSink(endpoint.url, timeout=60.0, log=log)
    try:
        sink.on_metrics(1.0, samples(0.1))
        assert endpoint.arrived.wait(60)  # the first export is now held by the endpoint ...
        for k in range(5):  # ... and every later tick still hands its samples over
            sink.on_metrics(2.0 + k, samples(0.2))
        assert not endpoint.bodies  # nothing answered yet: the ticks did not wait for it
        assert sink.dropped == 4  # the ticks that came meanwhile replaced each other
    finally:
        endpoint.release.set()
        sink.close(timeout=30)
        endpoint.stop()
    last = endpoint.bodies[-1].resource_metrics[0].scope_metrics[0].metrics[0]
    assert last.name == "hw.gpu.utilization"
    assert last.gauge.data_points[0].as_double == pytest.approx(0.2)  # the latest tick's
    assert "failed" not in log.getvalue()


def test_a_down_endpoint_is_said_once(tmp_path: Path) -> None:
    log = io.StringIO()
    sink = OtlpSink(f"http://127.0.0.1:{closed_port()}", timeout=1.0, log=log)
    try:
        for k in range(3):
            sink.push(samples(0.1 * k))  # the worker's export, here on the test's thread
    finally:
        sink.close(timeout=5)
    assert sink.failed == 3 and sink.exported == 0
    lines = log.getvalue().splitlines()
    assert len(lines) == 1 and "OTLP export to http://127.0.0.1:" in lines[0]
    assert "not affected" in lines[0]


def test_run_with_a_down_otlp_endpoint_keeps_the_jobs_status(cw: Any) -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    r = cw("run", "--interval", "0.2", "--otlp", url, "--", "sh", "-c", "sleep 1; exit 5")
    assert r.returncode == 5
    assert r.stderr.count("OTLP export to") == 1  # said once, however many ticks failed
    assert "Traceback" not in r.stderr
    assert cw.show()["exit_code"] == 5


def test_a_down_otlp_endpoint_is_one_line_on_stderr_however_long(cw: Any) -> None:
    """The SDK's own lines (a failed export and each retry, every tick) are not printed."""
    url = f"http://127.0.0.1:{closed_port()}"
    r = cw("run", "--quiet", "--interval", "0.2", "--otlp", url, "--", "sleep", "2")
    assert r.returncode == 0
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "OTLP export to" in lines[0], lines


def test_a_hung_otlp_endpoint_does_not_hold_the_runs_end(cw: Any) -> None:
    """The endpoint takes the last export and never answers: the run ends after its
    --otlp-timeout, not the export's own time limit (here 10 s, the interval's)."""
    endpoint = HungEndpoint()
    try:
        r = cw("run", "--quiet", "--interval", "30", "--otlp", endpoint.url,
               "--otlp-timeout", "0.5", "--", "sh", "-c", "exit 3")  # fmt: skip
        assert r.returncode == 3, r.stderr
        assert not endpoint.bodies  # held, never answered
        assert "Traceback" not in r.stderr
        for bad in ("0", "-1", "nan", "61"):
            r = cw("run", "--otlp", endpoint.url, "--otlp-timeout", bad, "--", "true")
            assert r.returncode == 2 and "--otlp-timeout" in r.stderr
        r = cw("run", "--otlp-timeout", "1", "--", "true")
        assert r.returncode == 2 and "--otlp-timeout needs --otlp" in r.stderr
    finally:
        endpoint.stop()


def test_agent_with_a_down_otlp_endpoint_still_serves(cw: Any) -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    r = cw("agent", "--once", "--interval", "0.2", "--gpu-backend", "fake:1xH100-SXM",
           "--otlp", url)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "computewatch_gpu_utilization_ratio" in r.stdout
    assert r.stderr.count("OTLP export to") == 1 and "Traceback" not in r.stderr


def test_profiler_flags_usage_errors(cw: Any) -> None:
    for args, needle in (
        (["--profile-steps", "5:3"], "A <= B"),
        (["--profile-steps", "0:3"], "counted from 1"),
        (["--profile-steps", "abc"], "not a step range"),
        (["--cprofile", "--", "true"], "--cprofile needs a Python command"),
        (["--cprofile", "--", "python", "-c", "pass"], "python -c"),
    ):
        cmd = args if "--" in args else [*args, "--", "true"]
        r = cw("run", *cmd)
        assert r.returncode == 2, (args, r.stderr)
        assert needle in r.stderr and "Traceback" not in r.stderr


def test_refused_ptrace_is_one_clear_line(cw: Any) -> None:
    """A user who may not trace the process: the real refusal, said in one line. As root, the
    command runs as ``nobody`` against a root process; as anyone else, against PID 1 (root's)."""
    if os.geteuid() != 0:
        assert os.stat("/proc/1").st_uid != os.geteuid()
        r = cw("profile", "1", "--seconds", "1")
    else:
        r = _as_nobody_against_root(cw)
    assert r.returncode == 1, r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert "permission denied" in line and "CAP_SYS_PTRACE" in line and "ptrace_scope" in line


def _as_nobody_against_root(cw: Any) -> subprocess.CompletedProcess[str]:
    target = subprocess.Popen(
        [sys.executable, "-c", READY + "import time; time.sleep(60)"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert target.stdout is not None and target.stdout.readline() == "ready\n"
    home = Path(tempfile.mkdtemp(prefix="cw-nobody-"))
    try:
        os.chmod(home, 0o777)
        env = cw.env(COMPUTEWATCH_HOME=str(home / "h"), HOME=str(home))
        python, env = _readable_install(home, env)
        return subprocess.run(
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
             python, "-m", "computewatch", "profile", str(target.pid), "--seconds", "1",
             "-o", str(home / "p.json")],
            capture_output=True, text=True, env=env, timeout=120, check=False, cwd=home,
        )  # fmt: skip
    finally:
        target.kill()
        target.communicate()
        shutil.rmtree(home, ignore_errors=True)


def _readable_install(home: Path, env: dict[str, str]) -> tuple[str, dict[str, str]]:
    """What the unprivileged user runs: the base interpreter (the test environment's venv may
    sit in a clone other users cannot enter: a 0700 ``mktemp -d``, a 0750 home), the package
    copied where it can read it with msgspec (the base of its record classes), and py-spy
    beside it. The profile command's refusal path imports nothing else from the environment."""
    import msgspec

    import computewatch  # the package under test, wherever it is installed from

    lib = home / "lib"
    for package in (computewatch, msgspec):
        shutil.copytree(
            Path(package.__file__).parent,
            lib / package.__name__,
            ignore=shutil.ignore_patterns("__pycache__"),
        )
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    shutil.copy2(spy, home / "py-spy")
    for root, dirs, files in os.walk(home):
        for name in dirs:
            os.chmod(Path(root) / name, 0o755)
        for name in files:
            os.chmod(Path(root) / name, 0o755 if name == "py-spy" else 0o644)
    env = {**env, "PYTHONPATH": str(lib), "COMPUTEWATCH_PY_SPY": str(home / "py-spy")}
    env.pop("VIRTUAL_ENV", None)
    return getattr(sys, "_base_executable", sys.executable), env
