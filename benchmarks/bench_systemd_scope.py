"""The start-up cost of the systemd transient scope (``computewatch run`` where the run's own
cgroup cannot be made and a systemd manager is reachable).

1. Machines without systemd pay the detection only: ``find_systemd_run`` with no manager
   (a ``stat`` or two), per call.
2. Machines with a manager pay, per run: the ``systemd-run --version`` probe; systemd-run's own
   start (measured on this host's real ``/usr/bin/systemd-run`` up to its failed connection,
   since no manager runs here); the manager's scope creation (a D-Bus call and a job: not
   measurable here, no systemd); and the supervisor's watch for the exec
   (``await_scope_exec`` on a ``/bin/sh`` launcher that execs ``/bin/true``), compared with
   a plain spawn of ``/bin/true``.

    python benchmarks/bench_systemd_scope.py [--quick]
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from common import Section, cli_main, median, spread

from computewatch.sources.cgroup import await_scope_exec, find_systemd_run

TARGET_DETECT_US = 50.0  # no systemd: the scope must cost next to nothing


def _detect_us(n: int) -> list[float]:
    env = {"PATH": os.environ.get("PATH", ""), "XDG_RUNTIME_DIR": "/nonexistent"}
    out = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(n):
            assert find_systemd_run(env, euid=1000) is None
        out.append((time.perf_counter() - t0) / n * 1e6)
    return out


def _wall_ms(argv: list[str], env: dict[str, str], reps: int) -> list[float]:
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        subprocess.run(argv, env=env, capture_output=True, check=False)
        out.append((time.perf_counter() - t0) * 1e3)
    return out


def _spawn_wait_ms(reps: int, launcher: Path | None) -> list[float]:
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        if launcher is None:
            pid = os.posix_spawn("/bin/true", ["/bin/true"], dict(os.environ))
        else:
            argv = [str(launcher), "--scope", "--unit=computewatch-bench", "--", "/bin/true"]
            pid = os.posix_spawn(str(launcher), argv, dict(os.environ))
            got = await_scope_exec(
                pid, "--unit=computewatch-bench", "computewatch-bench", b"systemd-run", b"true"
            )
            assert got.started
        os.waitpid(pid, 0)
        out.append((time.perf_counter() - t0) * 1e3)
    return out


def run(quick: bool) -> Section:
    s = Section("systemd transient scope: start-up cost")
    reps = 20 if quick else 100
    det = _detect_us(2000 if quick else 20000)
    rows: list[list[object]] = [["detection, no manager (µs per run)", median(det), spread(det)]]
    real = shutil.which("systemd-run")
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "XDG_RUNTIME_DIR": tmp}
        if real is not None:
            v = _wall_ms([real, "--version"], env, reps)
            rows.append(["systemd-run --version probe (ms)", median(v), spread(v)])
            f = _wall_ms([real, "--user", "--scope", "--quiet", "--", "/bin/true"], env, reps)
            rows.append(["systemd-run start, to its failed connection (ms)", median(f), spread(f)])
        launcher = Path(tmp) / "systemd-run"
        launcher.write_text('#!/bin/sh\nwhile [ "$1" != -- ]; do shift; done\nshift\nexec "$@"\n')
        launcher.chmod(0o755)
        plain = _spawn_wait_ms(reps, None)
        watched = _spawn_wait_ms(reps, launcher)
    rows.append(["spawn + wait /bin/true, plain (ms)", median(plain), spread(plain)])
    rows.append(["spawn through a sh launcher + exec watch + wait (ms)", median(watched),
                 spread(watched)])  # fmt: skip
    s.body += [
        "Machines without systemd pay the first row only. With a manager, a run pays the",
        "probe, systemd-run's start and the exec watch (the sh launcher stands in for",
        "systemd-run's exec; the launcher's own start is in the row), plus the manager's",
        "scope creation, which this host (no systemd) cannot measure.",
        "",
    ]
    s.table(("what", "median", "min–max"), rows)
    s.target(
        f"detection without systemd under {TARGET_DETECT_US:.0f} µs a run",
        f"{median(det):.1f} µs",
        median(det) < TARGET_DETECT_US,
    )
    return s


if __name__ == "__main__":
    cli_main(run, __doc__)
