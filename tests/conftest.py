"""Shared fixtures for the end-to-end tests.

Every test gets its own ``$COMPUTEWATCH_HOME`` under ``tmp_path``, so no test sees another's
runs. ``cw`` runs the real CLI as a child process (``python -m computewatch ...``), the way a
user would; ``make_script`` writes a small Python program for it to run. ``store`` is a fresh
database; ``free_port`` finds a free loopback port; ``prometheus`` starts a real Prometheus
(Debian's ``prometheus``); ``receiver`` is a local HTTP server recording the JSON posted to it.
(Tests run with ``--import-mode=importlib``: helpers shared between test files live here, as
fixtures.)

Under ``CI=true`` a skip of any kind fails (hooks below; tests/test_ci_skips.py checks them): a
test that depends on the machine checks what this machine does instead of skipping.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import os
import random
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Generator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from computewatch.store import Store

pytest_plugins = ["pytester"]  # tests/test_ci_skips.py runs pytest on small test files

PY = sys.executable
CW = [PY, "-m", "computewatch"]
TIMEOUT = 120.0  # a loaded 2-core CI machine can be slow to start interpreters

# A shell without job control starts its background commands with SIGINT and SIGQUIT ignored
# (`bash -c '...' &`, a CI runner's nohup), and an ignored signal stays ignored across exec: every
# child a test starts would then ignore the Ctrl-C and SIGQUIT the tests send it. The suite
# restores what a terminal gives (Python's KeyboardInterrupt handler, the default action), which
# children start with; each pytest-xdist worker imports this file too.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
if signal.getsignal(signal.SIGQUIT) == signal.SIG_IGN:
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)


# -- under CI, a skip is a failure ----------------------------------------------------------------


def under_ci() -> bool:
    """Whether this run is CI's (``CI=true``, as GitHub Actions and most others set it), where
    every test must run: a missing tool or package is a broken CI machine, not a reason to skip.
    Developers' partial environments (``CI`` unset) may skip."""
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def _skip_reason(longrepr: object) -> str:
    # A skip's longrepr is (path, lineno, "Skipped: reason"); anything else is shown as is.
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        path, lineno, message = longrepr
        return f"{message} ({path}:{lineno + 1 if isinstance(lineno, int) else lineno})"
    return str(longrepr)


def _fail_skip(report: pytest.TestReport | pytest.CollectReport) -> None:
    if under_ci() and report.skipped and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        report.longrepr = (
            f"skipped under CI=true, where no test may skip: {_skip_reason(report.longrepr)}"
        )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """``skipif`` markers, skips in fixtures and ``pytest.skip()`` in a test fail under CI."""
    report: pytest.TestReport = yield
    _fail_skip(report)
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(
    collector: pytest.Collector,
) -> Generator[None, pytest.CollectReport, pytest.CollectReport]:
    """Module-level skips (``pytest.importorskip``, ``pytest.skip(allow_module_level=True)``)
    fail under CI, as collection errors."""
    report: pytest.CollectReport = yield
    _fail_skip(report)
    return report


class CLI:
    """Runs ``computewatch`` as a real child process against one test's data home."""

    def __init__(self, home: Path, tmp: Path) -> None:
        self.home = home
        self.tmp = tmp
        self._popened: list[subprocess.Popen[str]] = []

    @property
    def db(self) -> Path:
        return self.home / "computewatch.db"

    def env(self, **extra: str) -> dict[str, str]:
        env = dict(os.environ)
        env["COMPUTEWATCH_HOME"] = str(self.home)
        for k in ("COMPUTEWATCH_RUN_ID", "COMPUTEWATCH_SPOOL"):  # tests may run under cw itself
            env.pop(k, None)
        env.update(extra)
        return env

    def __call__(
        self,
        *args: str | os.PathLike[str],
        timeout: float = TIMEOUT,
        input: str | None = None,
        cwd: str | os.PathLike[str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*CW, *map(str, args)],
            capture_output=True,
            text=True,
            timeout=timeout,
            input=input,
            env=self.env(),
            cwd=cwd or self.tmp,
            check=False,
        )

    def ok(self, *args: str | os.PathLike[str], **kw: Any) -> subprocess.CompletedProcess[str]:
        """Run and require exit status 0, showing stderr when it is not."""
        r = self(*args, **kw)
        assert r.returncode == 0, f"exit {r.returncode}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}"
        return r

    def json(self, *args: str | os.PathLike[str]) -> Any:
        """Run a read command with ``--json`` and parse what it prints."""
        return json.loads(self.ok(*args, "--json").stdout)

    def show(self, ref: str = "last") -> dict[str, Any]:
        summary: dict[str, Any] = self.json("show", ref)
        return summary

    def popen(self, *args: str | os.PathLike[str], **kw: Any) -> subprocess.Popen[str]:
        """Start ``computewatch`` without waiting; killed at teardown if still running."""
        kw.setdefault("stdout", subprocess.PIPE)
        kw.setdefault("stderr", subprocess.PIPE)
        p = subprocess.Popen([*CW, *map(str, args)], text=True, env=self.env(), cwd=self.tmp, **kw)
        self._popened.append(p)
        return p

    @staticmethod
    def wait_for(pred: Callable[[], Any], timeout: float = 60.0, what: str = "condition") -> Any:
        """Poll ``pred`` until it returns something truthy; fail after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            v = pred()
            if v:
                return v
            if time.monotonic() > deadline:
                pytest.fail(f"timed out after {timeout:g} s waiting for {what}")
            time.sleep(0.05)

    @staticmethod
    def kill_pid_file(path: Path) -> None:
        """SIGKILL the process whose PID a test script wrote to ``path`` (orphans, at teardown)."""
        try:
            pid = int(path.read_text())
        except (OSError, ValueError):
            return
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def cleanup(self) -> None:
        for p in self._popened:
            if p.poll() is None:
                p.kill()
            try:
                p.communicate(timeout=10)
            except (subprocess.TimeoutExpired, ValueError):
                pass


@pytest.fixture(autouse=True)
def cw_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh ``$COMPUTEWATCH_HOME`` for this test (not created: the CLI must create it)."""
    home = tmp_path / "cwhome"
    monkeypatch.setenv("COMPUTEWATCH_HOME", str(home))
    monkeypatch.delenv("COMPUTEWATCH_RUN_ID", raising=False)
    monkeypatch.delenv("COMPUTEWATCH_SPOOL", raising=False)
    return home


@pytest.fixture
def cw(cw_home: Path, tmp_path: Path) -> Iterator[CLI]:
    cli = CLI(cw_home, tmp_path)
    yield cli
    cli.cleanup()


@pytest.fixture
def make_script(tmp_path: Path) -> Callable[[str, str], Path]:
    """``make_script("name.py", source)`` writes a dedented Python script under tmp_path."""

    def make(name: str, source: str) -> Path:
        path = tmp_path / name
        path.write_text(textwrap.dedent(source).lstrip())
        return path

    return make


@pytest.fixture(scope="session")
def cli_class() -> type[CLI]:
    """The runner class, for module-scoped fixtures that keep their own data home."""
    return CLI


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    """A fresh, empty database under tmp_path, closed after the test."""
    s = Store.open(tmp_path / "cw.db")
    yield s
    s.close()


def _outside_ephemeral_range() -> tuple[int, int]:
    """Ports the kernel never hands out by itself: below (else above) its ephemeral range, from
    which it picks the port of every bind to port 0 and of every outgoing connection."""
    try:
        low, high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        low, high = 32768, 60999  # Linux's default
    return (10_000, low - 1) if low > 12_000 else (high + 1, 65_535)


_PORTS = _outside_ephemeral_range()
_PORT_PICKS = random.Random(os.getpid())


def free_loopback_port() -> int:
    """A loopback port nothing listens on now, for a server a test starts a moment later. It is
    drawn outside the kernel's ephemeral range: a port from ``bind(("", 0))`` could be handed
    again, meanwhile, to another test's connection or server (all the workers share the host),
    and the server would then fail to start on it."""
    for _ in range(1000):
        port = _PORT_PICKS.randint(*_PORTS)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free loopback port in {_PORTS}")


@pytest.fixture(scope="session")
def free_port() -> Callable[[], int]:
    """``free_port()`` is a loopback TCP port nothing listens on (at the moment of asking)."""
    return free_loopback_port


def _wait_ready(url: str, proc: subprocess.Popen[bytes], log: Path, timeout: float = 60.0) -> None:
    """Wait until the server ``proc`` answers ``url/-/ready`` with 200 (Prometheus and
    Alertmanager have it); fail with the end of its ``log`` when it exits or takes too long."""
    name = Path(str(proc.args[0])).name if isinstance(proc.args, list) else "server"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"{name} exited {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.1)
    pytest.fail(f"{name} not ready after {timeout:g} s:\n{log.read_text()[-3000:]}")


@pytest.fixture(scope="session")
def wait_ready() -> Callable[..., None]:
    """``wait_ready(url, proc, log)``: wait until a started server answers ``/-/ready``."""
    return _wait_ready


# -- a real Prometheus ---------------------------------------------------------------------------

PROMETHEUS = "/usr/bin/prometheus"


class Prometheus:
    """A real Prometheus on 127.0.0.1, started on ``config`` and ``tsdb`` and ready to answer;
    a context manager that stops it."""

    def __init__(self, config: Path, tsdb: Path, *args: str, log: Path | None = None) -> None:
        port = free_loopback_port()
        self.url = f"http://127.0.0.1:{port}"
        self.log = log or tsdb.parent / f"{tsdb.name}.prometheus.log"
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                [
                    PROMETHEUS,
                    f"--config.file={config}",
                    f"--storage.tsdb.path={tsdb}",
                    *args,
                    f"--web.listen-address=127.0.0.1:{port}",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        try:
            _wait_ready(self.url, self.proc, self.log)
        except BaseException:
            self.stop()
            raise

    def query(self, promql: str) -> list[dict[str, Any]]:
        """The result of an instant query now; [] while Prometheus cannot be reached."""
        url = f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        try:
            with urllib.request.urlopen(url, timeout=10) as r:
                doc = json.load(r)
        except OSError:
            return []
        assert doc["status"] == "success", doc
        result: list[dict[str, Any]] = doc["data"]["result"]
        return result

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self) -> Prometheus:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@pytest.fixture(scope="session")
def prometheus() -> Iterator[Callable[..., Prometheus]]:
    """``prometheus(config, tsdb, *flags)`` starts a real Prometheus and waits until it is
    ready (use it as a context manager to stop it; any still running stop at session end).
    Skips the test when the Debian package ``prometheus`` is not installed."""
    if not os.path.exists(PROMETHEUS):
        pytest.skip("no prometheus (apt-get install prometheus); CI installs it")
    started: list[Prometheus] = []

    def start(config: Path, tsdb: Path, *args: str, log: Path | None = None) -> Prometheus:
        p = Prometheus(config, tsdb, *args, log=log)
        started.append(p)
        return p

    yield start
    for p in started:
        p.stop()


# -- a local HTTP receiver -----------------------------------------------------------------------


class Receiver:
    """A real HTTP server on 127.0.0.1 that records JSON bodies.

    ``fail_first`` requests get HTTP ``fail_status``; while ``hold`` is clear, requests wait.
    """

    def __init__(self) -> None:
        self.bodies: list[Any] = []
        self.paths: list[str] = []
        self.requests = 0
        self.fail_first = 0
        self.fail_status = 503
        self.hold = threading.Event()
        self.hold.set()
        self.arrived = threading.Condition()
        rec = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with rec.arrived:
                    rec.requests += 1
                    n = rec.requests
                    rec.arrived.notify_all()
                rec.hold.wait(60)
                if n <= rec.fail_first:
                    self.send_response(rec.fail_status)
                    self.end_headers()
                    return
                with rec.arrived:
                    rec.bodies.append(json.loads(body))
                    rec.paths.append(self.path)
                    rec.arrived.notify_all()
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}"

    def wait(self, pred: Any, timeout: float = 30.0) -> None:
        with self.arrived:
            assert self.arrived.wait_for(lambda: pred(self), timeout), "receiver: timed out"

    def alerts(self) -> list[dict[str, Any]]:
        """Every alert of every computewatch webhook document received so far."""
        with self.arrived:
            return [a for d in self.bodies for a in d["alerts"]]

    def stop(self) -> None:
        self.hold.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.stop()


# -- a self-signed certificate for TLS tests -------------------------------------------------


@pytest.fixture
def self_signed(tmp_path: Path) -> Callable[[], tuple[Path, Path]]:
    """``self_signed()`` writes a certificate for 127.0.0.1 and its key (0600) under tmp_path."""

    def make() -> tuple[Path, Path]:
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
        now = datetime.datetime.now(datetime.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(
                x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                critical=False,
            )
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256())
        )
        cert_path = tmp_path / "tls.crt"
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_path = tmp_path / "tls.key"
        key_path.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        key_path.chmod(0o600)  # a key others can read is refused
        return cert_path, key_path

    return make
