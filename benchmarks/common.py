"""Shared helpers of the benchmarks: machine description, statistics, Markdown tables, and the
small process utilities several benchmarks need.

Every benchmark module has ``run(quick: bool) -> Section`` and a ``main()`` that prints its
section; ``run_all.py`` puts the sections together in ``RESULTS.md``.
"""

from __future__ import annotations

import argparse
import compileall
import io
import os
import platform
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

HERE = Path(__file__).resolve().parent


@dataclass
class Section:
    """One benchmark's contribution to RESULTS.md: Markdown, and its targets' verdicts."""

    title: str
    body: list[str] = field(default_factory=list)
    targets: list[tuple[str, str, str]] = field(default_factory=list)  # what, measured, verdict
    seconds: float = 0.0
    others_share: float | None = None  # CPU share other processes used meanwhile

    def add(self, *lines: str) -> None:
        self.body.extend(lines)

    def table(self, headers: Sequence[str], rows: Iterable[Sequence[object]]) -> None:
        self.body.extend([*table(headers, rows), ""])

    def target(
        self, what: str, measured: str, met: bool | None, *, inconclusive: str | None = None
    ) -> None:
        """Record a target: ``met`` None means it could not be measured; ``inconclusive``
        says why the measurement cannot decide (noise larger than the margin)."""
        v = verdict(met)
        if inconclusive:
            v = f"inconclusive ({inconclusive}; as measured: {v.strip('*')})"
        self.targets.append((what, measured, v))

    def markdown(self) -> str:
        return "\n".join([f"## {self.title}", "", *self.body]).rstrip() + "\n"


def verdict(met: bool | None) -> str:
    return "not measured" if met is None else ("met" if met else "**not met**")


# -- statistics -----------------------------------------------------------------------------


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def spread(values: Sequence[float]) -> str:
    """min–max of a sample, for a table cell."""
    if not values:
        return "–"
    return f"{min(values):.3f}–{max(values):.3f}"


# -- formatting -----------------------------------------------------------------------------


def table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> list[str]:
    """A GitHub Markdown table; numbers are right-aligned."""
    body = [[_cell(v) for v in row] for row in rows]
    numeric = []
    for i in range(len(headers)):
        cells = [r[i] for r in body if i < len(r) and r[i] not in ("", "–")]
        numeric.append(bool(cells) and all(_is_number(c) for c in cells))
    widths = [
        max([len(h)] + [len(r[i]) for r in body if i < len(r)]) for i, h in enumerate(headers)
    ]

    def line(cells: Sequence[str]) -> str:
        out = []
        for i, w in enumerate(widths):
            c = cells[i] if i < len(cells) else ""
            out.append(c.rjust(w) if numeric[i] and cells is not headers else c.ljust(w))
        return "| " + " | ".join(out) + " |"

    rule = "|" + "|".join(
        ("-" * (w + 1) + ":") if numeric[i] else ("-" * (w + 2)) for i, w in enumerate(widths)
    )
    return [line(list(headers)), rule + "|", *(line(r) for r in body)]


def _cell(v: object) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        if v != v:  # NaN
            return "–"
        return f"{v:.3f}" if abs(v) < 1000 else f"{v:,.0f}"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    return str(v)


def _is_number(s: str) -> bool:
    try:
        float(s.replace(",", "").rstrip("×%").lstrip("≤≥~"))
    except ValueError:
        return False
    return True


def fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


# -- the machine ----------------------------------------------------------------------------


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def _filesystem_of(path: str) -> str:
    """The mount (device, type) holding ``path``, from /proc/mounts."""
    best = ("", "?", "?")
    try:
        with open("/proc/mounts") as f:
            for line in f:
                dev, mnt, fstype = line.split()[:3]
                if path.startswith(mnt) and len(mnt) >= len(best[0]):
                    best = (mnt, dev, fstype)
    except OSError:
        pass
    return f"{best[2]} ({best[1]} on {best[0]})"


def machine() -> list[tuple[str, str]]:
    """What the figures were measured on, as (label, value) rows."""
    from computewatch.sources.host import host_facts

    facts = host_facts()
    uname = os.uname()
    mem = facts.get("memory_bytes")
    cg_cpu = facts.get("cgroup_cpu_limit_cores")
    cg_mem = facts.get("cgroup_memory_max_bytes")
    load = os.getloadavg()
    import tempfile

    return [
        ("Date (UTC)", datetime.now(UTC).strftime("%Y-%m-%d %H:%M")),
        ("CPU", str(facts.get("cpu_model"))),
        (
            "Cores",
            f"{facts.get('logical_cpus')} logical, {facts.get('allowed_cpus')} allowed"
            + (f", cgroup quota {cg_cpu:g}" if isinstance(cg_cpu, float) else ""),
        ),
        (
            "Memory",
            (fmt_bytes(float(mem)) if isinstance(mem, int) else "?")
            + (f" (cgroup limit {fmt_bytes(float(cg_mem))})" if isinstance(cg_mem, int) else ""),
        ),
        ("Kernel", f"{uname.sysname} {uname.release} {uname.machine}"),
        ("Python", f"{platform.python_version()} ({platform.python_implementation()})"),
        ("computewatch", _version("computewatch")),
        ("codecarbon", _version("codecarbon")),
        ("SQLite", sqlite3.sqlite_version),
        (
            "Also",
            f"psutil {_version('psutil')}, numpy {_version('numpy')}, "
            f"pyarrow {_version('pyarrow')}",
        ),
        ("Temp filesystem", _filesystem_of(tempfile.gettempdir())),
        ("Load at start", f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f} (1/5/15 min)"),
        ("Processes on host", str(sum(1 for e in os.listdir("/proc") if e.isdigit()))),
    ]


class OthersMeter:
    """How busy the rest of the machine was: host CPU time (/proc/stat, every mode but idle
    and iowait) minus this process's and its reaped children's, as a share of all cores."""

    def __init__(self) -> None:
        self._t0 = time.monotonic()
        self._host0 = _host_busy_seconds()
        self._own0 = _own_cpu()

    def share(self) -> float:
        elapsed = time.monotonic() - self._t0
        others = (_host_busy_seconds() - self._host0) - (_own_cpu() - self._own0)
        cores = os.cpu_count() or 1
        return max(others, 0.0) / (elapsed * cores) if elapsed > 0 else 0.0


def _host_busy_seconds() -> float:
    with open("/proc/stat", "rb") as f:
        fields = f.readline().split()[1:9]  # user nice system idle iowait irq softirq steal
    ticks = [int(x) for x in fields]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


def _own_cpu() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def machine_markdown() -> list[str]:
    return table(("Machine", ""), machine())


# -- processes ------------------------------------------------------------------------------


def computewatch_cli() -> list[str]:
    """The installed ``computewatch`` script beside this interpreter (not a pyenv shim, whose
    own start-up would be counted), else ``python -m computewatch``."""
    script = Path(sys.executable).parent / "computewatch"
    if script.exists():
        return [str(script)]
    found = shutil.which("computewatch")
    return [found] if found else [sys.executable, "-m", "computewatch"]


BASELINE_REF = "ebf5bcb"
"""The tree before the end of a run kept its figures as it went (issue 10, part 3): the
*before* of the before/after tables."""


def compile_tree(src: Path) -> None:
    """Write the bytecode of every module under ``src``, as installing a package does, so that
    timed start-ups do not include compiling (``PYTHONDONTWRITEBYTECODE`` would otherwise make
    every child compile every module it imports)."""
    compileall.compile_dir(str(src), quiet=1)


def baseline_src(ref: str = BASELINE_REF) -> Path | str:
    """The package source at ``ref`` (``git archive`` into ``benchmarks/out/``), compiled; or
    why it is not available."""
    dest = HERE / "out" / f"baseline-{ref}"
    src = dest / "src"
    if not (src / "computewatch" / "__init__.py").exists():
        try:
            tar = subprocess.run(
                ["git", "-C", str(HERE.parent), "archive", ref, "src"],
                capture_output=True,
                check=True,
            ).stdout
        except (OSError, subprocess.CalledProcessError) as e:
            err = getattr(e, "stderr", b"") or b""
            return (
                f"no baseline: git archive {ref} failed ({err.decode(errors='replace')[:200] or e})"
            )
        dest.mkdir(parents=True, exist_ok=True)
        with tarfile.open(fileobj=io.BytesIO(tar)) as t:
            t.extractall(dest, filter="data")
    compile_tree(src)
    return src


def child_env(pythonpath: Path | None = None, **extra: str) -> dict[str, str]:
    """The environment of a timed child: bytecode caches used and written, no run of ours
    around it; ``pythonpath`` puts another tree of the package first (the baseline)."""
    env = dict(os.environ)
    for k in ("PYTHONDONTWRITEBYTECODE", "COMPUTEWATCH_RUN_ID", "COMPUTEWATCH_SPOOL", "PYTHONPATH"):
        env.pop(k, None)
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    env.update(extra)
    return env


def children_cpu() -> float:
    """CPU seconds of this process's reaped children (and theirs), user + system."""
    t = os.times()
    return t.children_user + t.children_system


class SleepingTree:
    """A parent shell with ``n - 1`` ``sleep`` children: ``n`` processes in one tree."""

    def __init__(self, n: int) -> None:
        self.n = n
        script = (
            f"for i in $(seq {n - 1}); do sleep 600 & done; wait" if n > 1 else "exec sleep 600"
        )
        self.proc = subprocess.Popen(["sh", "-c", script], start_new_session=True)
        self.pid = self.proc.pid

    def wait_ready(self, count: Callable[[], int], timeout: float = 20.0) -> None:
        """Wait until ``count()`` (processes seen in the tree) reaches ``n``."""
        deadline = time.monotonic() + timeout
        while count() < self.n:
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {count()} of {self.n} processes started")
            time.sleep(0.05)

    def close(self) -> None:
        try:
            os.killpg(self.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=10)


def cli_main(run: Callable[[bool], Section], doc: str | None) -> None:
    """``python benchmarks/bench_x.py [--quick]``: run one benchmark and print its section."""
    ap = argparse.ArgumentParser(description=(doc or "").strip().splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer repetitions, smaller data")
    a = ap.parse_args()
    print("\n".join(machine_markdown()))
    print()
    t0 = time.monotonic()
    meter = OthersMeter()
    section = run(a.quick)
    section.seconds = time.monotonic() - t0
    section.others_share = meter.share()
    print(section.markdown())
    print(f"other processes used {section.others_share:.0%} of the machine's CPU meanwhile")
    for what, measured, v in section.targets:
        print(f"target {what}: {measured} — {v}")


# -- servers and their databases ------------------------------------------------------------

_PORT_RANGE = (20000, 32000)
"""Below the kernel's ephemeral range (32768–60999 by default), so a port picked here is not
handed meanwhile to another process's outgoing connection (tests/conftest.py does the same)."""


def free_loopback_port() -> int:
    """A loopback TCP port nothing listens on now, drawn outside the ephemeral range."""
    import random
    import socket

    rng = random.Random()
    for _ in range(1000):
        port = rng.randint(*_PORT_RANGE)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free loopback port in {_PORT_RANGE}")


def postgres_bin() -> Path | None:
    """The newest Debian PostgreSQL's bin/ (``/usr/lib/postgresql/N/bin``), or None."""
    found = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/initdb"),
        key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit() else 0,
    )
    return found[-1].parent if found else None


def as_postgres(cmd: Sequence[str]) -> list[str]:
    """PostgreSQL refuses to run as root: as root, run ``cmd`` as the ``postgres`` user."""
    return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else list(cmd)


class PostgresCluster:
    """A throw-away cluster in a temporary directory (data and socket), listening on
    127.0.0.1; ``settings`` are ``-c`` options (fsync and the rest as shipped unless given).
    The logic of tests/server/conftest.py's fixture, for benchmarks."""

    def __init__(self, settings: Sequence[str] = ("max_connections=300",)) -> None:
        import tempfile

        bin_dir = postgres_bin()
        if bin_dir is None:
            raise RuntimeError("no PostgreSQL (apt-get install postgresql)")
        self.bin = bin_dir
        self.dir = Path(tempfile.mkdtemp(prefix="cw-bench-pg-"))
        os.chmod(self.dir, 0o755)
        self.data = self.dir / "data"
        self.sock = self.dir / "sock"
        self.log = self.dir / "postgres.log"
        self.sock.mkdir()
        if os.geteuid() == 0:
            shutil.chown(self.dir, "postgres", "postgres")
            shutil.chown(self.sock, "postgres", "postgres")
        self.port = free_loopback_port()
        subprocess.run(
            as_postgres([str(self.bin / "initdb"), "-D", str(self.data), "-A", "trust", "-U",
                         "postgres", "-E", "UTF8", "--locale=C"]),
            check=True, capture_output=True,
        )  # fmt: skip
        options = f"-p {self.port} -k {self.sock} -c listen_addresses=127.0.0.1"
        options += "".join(f" -c {s}" for s in settings)
        r = subprocess.run(
            as_postgres([str(self.bin / "pg_ctl"), "-D", str(self.data), "-l", str(self.log),
                         "-o", options, "-w", "-t", "60", "start"]),
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if r.returncode != 0:
            log = self.log.read_text() if self.log.exists() else ""
            raise RuntimeError(f"pg_ctl start failed:\n{r.stdout}\n{r.stderr}\n{log[-3000:]}")
        self._names = 0

    def version(self) -> str:
        return self.bin.parent.name

    def create_database(self) -> str:
        """A fresh, empty database: its SQLAlchemy URL."""
        import psycopg

        self._names += 1
        name = f"bench_{self._names}"
        with psycopg.connect(
            f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres", autocommit=True
        ) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{name}"

    def postmaster_pid(self) -> int | None:
        try:
            return int((self.data / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def cpu_seconds(self) -> float:
        """CPU seconds of the postmaster and its live backends (user + system)."""
        pid = self.postmaster_pid()
        return tree_cpu_seconds(pid) if pid is not None else 0.0

    def close(self) -> None:
        subprocess.run(
            as_postgres([str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w",
                         "stop"]),
            capture_output=True, check=False,
        )  # fmt: skip
        shutil.rmtree(self.dir, ignore_errors=True)


def process_cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system) of one live process from /proc/PID/stat; 0 when gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except OSError:
        return 0.0
    # after the command: state(0) ppid(1) ... utime(11) stime(12)
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def tree_cpu_seconds(pid: int) -> float:
    """CPU seconds of ``pid``, of its children it has reaped (cutime, cstime) and of its live
    children (one level: a postmaster's backends, ended ones included)."""
    total = process_cpu_seconds(pid)
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            own = f.read().rsplit(b")", 1)[1].split()
        total += (int(own[13]) + int(own[14])) / os.sysconf("SC_CLK_TCK")
    except OSError:
        pass
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total
