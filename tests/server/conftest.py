"""Shared fixtures for the server's tests (tests/server/, tests/server/clients/, tests/server/web/).

Everything is real and started here: a throw-away PostgreSQL 15 cluster (Debian's ``initdb`` and
``pg_ctl``, run as the ``postgres`` user when the tests run as root) and ``computewatch server``
child processes on free loopback ports. All of it is stopped at teardown.

Fixtures:

``postgres_cluster`` (session)
    One cluster for the whole session. ``.create_database()`` makes a fresh database and returns
    its URL (``postgresql+psycopg://postgres@127.0.0.1:PORT/NAME``); ``.url(name)`` is the URL of
    database ``name``; ``.port``, ``.stop()``, ``.start()``. Use a cluster of your own
    (``make_postgres_cluster``) to stop and start PostgreSQL in a test.
``make_postgres_cluster`` (session)
    ``make_postgres_cluster()`` starts another cluster (stopped at session end).
``db`` (parametrized: ids ``sqlite`` and ``postgresql``)
    The kind of database a test runs on. A test that uses ``server`` or ``db_url`` runs once on
    each; to run on one only: ``@pytest.mark.parametrize("db", ["sqlite"], indirect=True)``.
``db_url``
    A fresh, empty database of that kind (``sqlite:///TMP/server.db`` or a new PostgreSQL db).
``server``
    A factory: ``server()`` starts ``computewatch server --db DB_URL --listen 127.0.0.1:PORT``
    (own ``COMPUTEWATCH_HOME``), waits for ``/healthz`` and returns a :class:`ServerProcess`;
    ``server(db_url=URL, args=[...], tls=(cert, key), host="0.0.0.0")`` for another database,
    more flags, HTTPS (``.url`` is then https, ``.client()`` verifies the certificate) or another
    listen address (several servers on one database: call it twice with the same ``db_url``).
    A ServerProcess has ``.url``, ``.db_url``, ``.home``, ``.token(team, scope, name=None)
    -> str`` (through the real ``computewatch server token create``), ``.client(token=None)
    -> httpx.Client``, ``.stop()`` (SIGTERM), ``.kill()`` (SIGKILL), ``.restart()`` (same
    port and database), ``.output()`` (everything it printed, access log included).
``make_upload``
    ``make_upload(id=None, seq=1, **fields) -> RunUpload``: a synthetic but complete upload of
    one run (summary with GPUs, energy, carbon, cost figures and their methods). ``batch(*runs)``
    wraps runs in an ``IngestBatch`` (module-level helper, also a fixture: ``make_batch``).
"""

from __future__ import annotations

import itertools
import os
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.conftest import CW, TIMEOUT, free_loopback_port

from computewatch.server.budgets import period_bounds
from computewatch.upload.protocol import PROTOCOL_VERSION, IngestBatch, RunUpload

PG_BIN = Path("/usr/lib/postgresql/15/bin")
PY = sys.executable
START_TIMEOUT = 60.0


# -- PostgreSQL -----------------------------------------------------------------------------------


def _as_postgres(cmd: Sequence[str]) -> list[str]:
    """PostgreSQL refuses to run as root: as root, run ``cmd`` as the ``postgres`` user."""
    if os.geteuid() == 0:
        return ["runuser", "-u", "postgres", "--", *cmd]
    return list(cmd)


class PostgresCluster:
    """A throw-away cluster in a temporary directory, listening on 127.0.0.1:``port``."""

    def __init__(self) -> None:
        # /dev/shm when there is one: a cluster's files are many and short-lived
        shm = Path("/dev/shm")
        base = str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None
        self.dir = Path(tempfile.mkdtemp(prefix="cw-pg-", dir=base))
        os.chmod(self.dir, 0o755)
        self.data = self.dir / "data"
        self.sock = self.dir / "sock"
        self.log = self.dir / "postgres.log"
        self.sock.mkdir()
        if os.geteuid() == 0:
            shutil.chown(self.dir, "postgres", "postgres")
            shutil.chown(self.sock, "postgres", "postgres")
        self.port = free_loopback_port()
        self._names = itertools.count(1)
        r = subprocess.run(
            _as_postgres(
                [
                    str(PG_BIN / "initdb"),
                    "-D",
                    str(self.data),
                    "-A",
                    "trust",
                    "-U",
                    "postgres",
                    "-E",
                    "UTF8",
                    "--locale=C",
                    "--no-sync",
                ]
            ),
            capture_output=True,
            text=True,
            check=False,
        )
        if r.returncode != 0:
            raise RuntimeError(f"initdb failed:\n{r.stdout}\n{r.stderr}")
        self.start()

    def url(self, name: str = "postgres") -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{name}"

    def start(self) -> None:
        options = (
            f"-p {self.port} -k {self.sock} -c listen_addresses=127.0.0.1 -c fsync=off "
            "-c synchronous_commit=off -c full_page_writes=off -c max_connections=200"
        )
        r = subprocess.run(
            _as_postgres(
                [
                    str(PG_BIN / "pg_ctl"),
                    "-D",
                    str(self.data),
                    "-l",
                    str(self.log),
                    "-o",
                    options,
                    "-w",
                    "-t",
                    "60",
                    "start",
                ]
            ),
            capture_output=True,
            text=True,
            check=False,
        )
        if r.returncode != 0:
            log = self.log.read_text() if self.log.exists() else ""
            raise RuntimeError(f"pg_ctl start failed:\n{r.stdout}\n{r.stderr}\n{log[-3000:]}")

    def stop(self, mode: str = "fast") -> None:
        subprocess.run(
            _as_postgres([str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop"]),
            capture_output=True,
            check=False,
        )

    def create_database(self) -> str:
        """A fresh, empty database: its URL."""
        import psycopg

        name = f"cw_{os.getpid()}_{next(self._names)}"
        with psycopg.connect(
            f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres", autocommit=True
        ) as conn:
            # FILE_COPY: copying the template's files is much quicker than PostgreSQL 15's
            # default (WAL_LOG) for a throw-away cluster with fsync off
            conn.execute(f'CREATE DATABASE "{name}" STRATEGY = FILE_COPY')
        return self.url(name)

    def drop_database(self, url: str) -> None:
        """Drop a database made by :meth:`create_database` (its connections are ended)."""
        import psycopg

        name = url.rsplit("/", 1)[1]
        try:
            with psycopg.connect(
                f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres",
                autocommit=True,
                connect_timeout=5,
            ) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        except psycopg.Error:
            pass  # the cluster is stopped: it goes with its directory

    def destroy(self) -> None:
        self.stop("immediate")
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="session")
def make_postgres_cluster() -> Iterator[Callable[[], PostgresCluster]]:
    clusters: list[PostgresCluster] = []

    def make() -> PostgresCluster:
        c = PostgresCluster()
        clusters.append(c)
        return c

    yield make
    for c in clusters:
        c.destroy()


@pytest.fixture(scope="session")
def postgres_cluster(
    make_postgres_cluster: Callable[[], PostgresCluster],
) -> PostgresCluster:
    return make_postgres_cluster()


# -- databases ------------------------------------------------------------------------------------


@pytest.fixture(params=["sqlite", "postgresql"])
def db(request: pytest.FixtureRequest) -> str:
    kind: str = request.param
    return kind


@pytest.fixture
def db_url(db: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[str]:
    if db == "sqlite":
        yield f"sqlite:///{tmp_path / 'server.db'}"
        return
    cluster: PostgresCluster = request.getfixturevalue("postgres_cluster")
    url = cluster.create_database()
    yield url
    cluster.drop_database(url)


# -- servers --------------------------------------------------------------------------------------


class ServerProcess:
    """A real ``computewatch server`` child process."""

    def __init__(
        self,
        db_url: str,
        home: Path,
        args: Sequence[str] = (),
        *,
        tls: tuple[Path, Path] | None = None,
        host: str = "127.0.0.1",
    ) -> None:
        self.db_url = db_url
        self.home = home
        self.args = list(args)
        self.host = host
        self.tls = tls
        if tls is not None:
            self.args += ["--tls-cert", str(tls[0]), "--tls-key", str(tls[1])]
        self.port = free_loopback_port()
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}"
        self.log = home / f"server-{self.port}.log"
        self._clients: list[httpx.Client] = []
        self._outputs: list[str] = []
        self.proc: subprocess.Popen[bytes] | None = None
        home.mkdir(parents=True, exist_ok=True)
        self.start()

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["COMPUTEWATCH_HOME"] = str(self.home)
        for k in ("COMPUTEWATCH_RUN_ID", "COMPUTEWATCH_SPOOL"):
            env.pop(k, None)
        return env

    def start(self) -> None:
        self._log_file = open(self.log, "ab")  # noqa: SIM115 - closed by stop()
        self.proc = subprocess.Popen(
            [
                PY,
                "-m",
                "computewatch",
                "server",
                "--db",
                self.db_url,
                "--listen",
                f"{self.host}:{self.port}",
                *self.args,
            ],
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            env=self.env(),
        )
        try:
            self.wait_healthy()
        except BaseException:
            self.kill()
            raise

    def wait_healthy(self, timeout: float = START_TIMEOUT) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"server exited {self.proc.returncode}:\n{self.output()[-3000:]}")
            try:
                if (
                    httpx.get(f"{self.url}/healthz", timeout=2, verify=self.verify).status_code
                    == 200
                ):
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        pytest.fail(f"server not healthy after {timeout:g} s:\n{self.output()[-3000:]}")

    @property
    def verify(self) -> ssl.SSLContext | bool:
        """What an HTTP client verifies the server with: its self-signed certificate."""
        return ssl.create_default_context(cafile=str(self.tls[0])) if self.tls else True

    def output(self) -> str:
        """Everything the server printed so far (all its starts)."""
        try:
            return self.log.read_text(errors="replace")
        except OSError:
            return ""

    def token(self, team: str, scope: str, name: str | None = None) -> str:
        """A new token, made with the real ``computewatch server token create``."""
        cmd = [PY, "-m", "computewatch", "server", "token", "create", "--db", self.db_url]
        cmd += ["--team", team, "--scope", scope]
        if name is not None:
            cmd += ["--name", name]
        r = subprocess.run(
            cmd, capture_output=True, text=True, env=self.env(), timeout=120, check=False
        )
        assert r.returncode == 0, f"token create: exit {r.returncode}\n{r.stderr}"
        token = r.stdout.strip()
        assert token and "\n" not in token, r.stdout
        return token

    def cli(self, *args: str | Path) -> subprocess.CompletedProcess[str]:
        """``computewatch ARGS`` with the server's home (its key files) as the working directory
        and ``COMPUTEWATCH_HOME``, no server URL or token from the environment; not checked."""
        e = self.env()
        e.pop("COMPUTEWATCH_SERVER", None)
        e.pop("COMPUTEWATCH_TOKEN", None)
        return subprocess.run([*CW, *map(str, args)], capture_output=True, text=True, env=e,
                              timeout=TIMEOUT, check=False, cwd=self.home)  # fmt: skip

    def client(self, token: str | None = None, **kw: Any) -> httpx.Client:
        """An HTTP client on this server (with ``Authorization: Bearer token`` when given);
        closed at teardown."""
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        kw.setdefault("verify", self.verify)
        c = httpx.Client(base_url=self.url, headers=headers, timeout=kw.pop("timeout", 60), **kw)
        self._clients.append(c)
        return c

    def _wait(self, timeout: float = 30) -> None:
        assert self.proc is not None
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._log_file.close()

    def stop(self) -> int | None:
        """SIGTERM and wait; the exit status."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        if self.proc is not None:
            self._wait()
            return self.proc.returncode
        return None

    def kill(self) -> None:
        """SIGKILL: the server gets no chance to finish anything."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
        if self.proc is not None:
            self._wait()

    def restart(self) -> None:
        """Stop (if running) and start again on the same port and database."""
        self.stop()
        self.start()

    def close(self) -> None:
        for c in self._clients:
            c.close()
        self.kill()


@pytest.fixture
def server(
    db: str, request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[Callable[..., ServerProcess]]:
    started: list[ServerProcess] = []
    default_url: list[str] = []

    def start(
        db_url: str | None = None,
        args: Sequence[str] = (),
        *,
        tls: tuple[Path, Path] | None = None,
        host: str = "127.0.0.1",
    ) -> ServerProcess:
        if db_url is None:
            if not default_url:
                default_url.append(request.getfixturevalue("db_url"))
            db_url = default_url[0]
        home = tmp_path / f"server-home-{len(started)}"
        s = ServerProcess(db_url, home, args, tls=tls, host=host)
        started.append(s)
        return s

    yield start
    for s in started:
        s.close()


# -- payloads -------------------------------------------------------------------------------------


def _figure(value: float | None, unit: str, method: str, spread: float = 0.2) -> dict[str, Any]:
    return {
        "value": value,
        "unit": unit,
        "method": method,
        "low": None if value is None else value * (1 - spread),
        "high": None if value is None else value * (1 + spread),
        "assumptions": [],
        "source": "test",
    }


def started_this_month(duration: float) -> float:
    """A start time for a synthetic run of ``duration`` seconds that counts in this month's
    caps and budgets (which take the runs started in the period): ended a minute ago where the
    month is that old, else starting just after the month began (and ending after now). In the
    first hours of a month, a run that ended a minute ago would have started in the last."""
    now = time.time()
    month, _ = period_bounds("month", now)
    return max(now - duration - 60, month + 1)


def synthetic_upload(
    id: str | None = None,
    seq: int = 1,
    *,
    started_at: float | None = None,
    duration: float = 3600.0,
    gpus: int = 1,
    gpu_model: str = "H100-SXM5-80GB",
    utilization: float = 0.5,
    kwh: float | None = 1.0,
    cost: float | None = 2.0,
    co2e_g: float | None = 300.0,
    cpu_seconds: float = 1800.0,
    **fields: Any,
) -> RunUpload:
    """A complete upload of one run, with a summary carrying GPU, CPU, energy, carbon and cost
    figures (kWh facility energy, USD cost, gCO2e carbon) and their methods."""
    start = time.time() - duration - 60 if started_at is None else started_at
    final = fields.get("final", True)
    summary: dict[str, Any] = {
        "schema_version": 1,
        "id": id,
        "duration_seconds": duration,
        "status": fields.get("status", "completed"),
        "command": fields.get("command", ["python", "train.py"]),
        "cpu": {
            "seconds_total": cpu_seconds,
            "utilization_mean": 0.5,
            "utilization_max": 1.0,
            "allowed_cores": 8,
            "method": "cgroup",
        },
        "gpus": [
            {
                "uuid": f"GPU-{i}",
                "index": i,
                "name": gpu_model,
                "model": gpu_model,
                "simulated": True,
                "mig_parent_uuid": None,
                "scope": "used by the run",
                "utilization_mean": utilization,
                "energy_joules": None,
                "energy_method": None,
                "throttle_seconds": {},
                "share": 1.0,
                "share_rule": "only process",
            }
            for i in range(gpus)
        ],
        "energy": {"facility": _figure(kwh, "kWh", "measured")},
        "carbon": {"total": _figure(co2e_g, "gCO2e", "modeled", 0.5)},
        "cost": {"total": _figure(cost, "USD", "estimated", 0.1)},
        "notes": [],
    }
    run: dict[str, Any] = {
        "id": id or uuid.uuid4().hex,
        "seq": seq,
        "final": final,
        "name": "train",
        "status": "completed",
        "exit_code": 0,
        "started_at": start,
        "ended_at": start + duration if final else None,
        "host": "node-1",
        "user": "alice",
        "project": "llm",
        "tags": {"env": "test"},
        "command": ["python", "train.py"],
        "summary": summary,
        "meta": {"config": {"lr": 0.001}},
        "series": [
            {
                "name": "gpu.utilization",
                "labels": {"gpu_uuid": "GPU-0"},
                "bucket_seconds": 60.0,
                "points": [[start + 60 * k, 0.1, utilization, 0.9] for k in range(10)],
            }
        ],
    }
    run.update(fields)
    summary["id"] = run["id"]
    return run  # type: ignore[return-value]


def batch(*runs: RunUpload, protocol: int = PROTOCOL_VERSION) -> IngestBatch:
    return {"protocol": protocol, "runs": list(runs)}


@pytest.fixture
def make_upload() -> Callable[..., RunUpload]:
    return synthetic_upload


@pytest.fixture
def make_batch() -> Callable[..., IngestBatch]:
    return batch


FLOP_JOB = """
import computewatch
with computewatch.track() as r:
    for _ in range({steps}):
        r.step(flops={flops})
"""


def flop_job(tmp_path: Path, steps: int, flops: float) -> Path:
    """A script that reports ``steps`` steps of ``flops`` counted FLOPs each."""
    job = tmp_path / f"job-{steps}-{flops:g}.py"
    job.write_text(FLOP_JOB.format(steps=steps, flops=repr(flops)))
    return job
