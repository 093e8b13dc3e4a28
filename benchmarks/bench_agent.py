"""The node agent's cost: CPU per tick on a node with 8 fake GPUs and 200 processes, and memory
over a long compressed run with processes coming and going (it must stay flat).

Run: ``python benchmarks/bench_agent.py [--quick]``; ``run_all.py`` includes it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import Section, cli_main

from computewatch.fleet.attribution import Attributor
from computewatch.fleet.node import NodeOptions, NodeSampler
from computewatch.sources.host import HostSource
from computewatch.sources.nvidia import NvidiaSource
from computewatch.testing import ManualClock, from_preset


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def real_node_cost(ticks: int, children: int) -> tuple[float, float, int]:
    """Mean and max CPU seconds per tick over the real /proc with ``children`` sleepers."""
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
        for i, p in enumerate(procs[:16]):  # some of them "on" the GPUs
            fake.devices[i % 8].add_process(p.pid)
        node.sample()
        costs = []
        for _ in range(ticks):
            c0 = time.process_time()
            node.sample()
            costs.append(time.process_time() - c0)
            time.sleep(0.01)
        n = node.processes
        node.close()
        return sum(costs) / len(costs), max(costs), n
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()


def _stat(pid: int, utime: int) -> str:
    rest = [
        "S",
        "1",
        str(pid),
        str(pid),
        "0",
        "-1",
        "0",
        "0",
        "0",
        "0",
        "0",
        str(utime),
        "0",
        "0",
        "0",
        "20",
        "0",
        "1",
        "0",
        str(100 + pid),
        "1000",
        "256",
    ] + ["0"] * 30
    return f"{pid} (w) " + " ".join(rest) + "\n"


def churn_memory(ticks: int, live: int, per_tick: int) -> list[tuple[int, float]]:
    """RSS over a compressed run on a recorded /proc where ``per_tick`` processes start and as
    many end every tick (each with its own job tag, so jobs come and go too)."""
    root = Path(tempfile.mkdtemp(prefix="cw-bench-proc-"))
    try:
        next_pid = 1000
        alive: list[int] = []
        clock = ManualClock(0.0)
        fake = from_preset("8xH100-SXM", clock=clock)
        node = NodeSampler(
            NodeOptions(
                node="bench", procfs_root=str(root), filesystems=(), job_expiry_seconds=5.0
            ),
            Attributor(str(root), user_name=lambda u: "u"),
            clock=clock,
        )
        node.gpus = [NvidiaSource(fake, pids=node.pids_view, all_gpus=True, procfs_root=str(root))]

        def spawn() -> None:
            nonlocal next_pid
            pid = next_pid
            next_pid += 1
            d = root / str(pid)
            d.mkdir()
            (d / "stat").write_text(_stat(pid, 0))
            (d / "status").write_text("Name:\tw\nUid:\t1000\t1000\t1000\t1000\n")
            (d / "cgroup").write_text("0::/user.slice\n")
            (d / "environ").write_bytes(f"COMPUTEWATCH_TAGS=job=j{pid}\0".encode())
            alive.append(pid)
            (root / "loadavg").write_text(f"0 0 0 1/1 {pid}\n")

        for _ in range(live):
            spawn()
        points: list[tuple[int, float]] = []
        for t in range(ticks):
            for _ in range(per_tick):
                pid = alive.pop(0)
                (root / str(pid) / "stat").write_text("")
                shutil.rmtree(root / str(pid), ignore_errors=True)
                spawn()
            for pid in alive[:: max(len(alive) // 10, 1)]:
                (root / str(pid) / "stat").write_text(_stat(pid, t))
            clock.advance(1.0)
            node.sample()
            if t in (ticks // 10, ticks // 2, ticks - 1):
                points.append((t + 1, rss_mib()))
        node.close()
        return points
    finally:
        shutil.rmtree(root, ignore_errors=True)


TICK_SHARE_TARGET = 0.01  # of one core at the agent's default 5 s interval
GROWTH_TARGET_MIB = 2.0  # RSS growth from a tenth of the churn run to its end


def hwm_mib() -> float:
    """This process's peak resident memory (VmHWM: unlike ru_maxrss, not carried over from
    the parent across fork and exec)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def churn_memory_fresh(
    ticks: int, live: int, per_tick: int
) -> tuple[list[tuple[int, float]], float]:
    """:func:`churn_memory` in a fresh interpreter (as an agent runs), so that what other
    benchmarks loaded into this process does not count: its RSS points and peak RSS (MiB)."""
    code = (
        "import json, sys; sys.path.insert(0, sys.argv[1]); import bench_agent; "
        "pts = bench_agent.churn_memory(*map(int, sys.argv[2:])); "
        "print(json.dumps([pts, bench_agent.hwm_mib()]))"
    )
    here = str(Path(__file__).resolve().parent)
    out = subprocess.run(
        [sys.executable, "-c", code, here, str(ticks), str(live), str(per_tick)],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    pts, peak = json.loads(out.strip().splitlines()[-1])
    return [(int(t), float(m)) for t, m in pts], float(peak)


def run(quick: bool) -> Section:
    s = Section("Node agent: CPU per tick and memory under process churn")
    ticks, children, churn = (20, 200, 1500) if quick else (50, 200, 5000)
    mean, worst, seen = real_node_cost(ticks, children)
    points, peak = churn_memory_fresh(churn, live=200, per_tick=5)
    share = mean / 5
    rows: list[list[object]] = [
        [f"processes on the node (real /proc, {children} sleepers)", seen],
        ["CPU per tick, 8 fake GPUs, mean", f"{mean * 1e3:.2f} ms"],
        ["CPU per tick, 8 fake GPUs, worst", f"{worst * 1e3:.2f} ms"],
        ["CPU share at the default 5 s interval", f"{share:.3%} of one core"],
    ]
    rows += [
        [f"RSS after {tick} churn ticks (5 processes and jobs replaced per tick)", f"{mib:.1f} MiB"]
        for tick, mib in points
    ]
    rows.append(["peak RSS of the churn process", f"{peak:.1f} MiB"])
    s.table(("measure", "value"), rows)
    s.add(
        "CPU: `NodeSampler.sample()` over the real /proc with 200 sleeping children and 8 "
        "simulated H100s (16 children placed on them), process CPU time per tick. Memory: a "
        "recorded /proc where 5 processes, each its own job, end and start every tick; the "
        "clock is simulated so that ended jobs expire as they would over hours.",
        "",
    )
    s.target(
        f"agent CPU ≤ {TICK_SHARE_TARGET:.0%} of one core at 5 s",
        f"{share:.3%}",
        share <= TICK_SHARE_TARGET,
    )
    growth = points[-1][1] - points[0][1]
    s.target(
        f"agent RSS flat under churn (≤ {GROWTH_TARGET_MIB:g} MiB growth)",
        f"{growth:+.1f} MiB from tick {points[0][0]} to {points[-1][0]}",
        growth <= GROWTH_TARGET_MIB,
    )
    return s


if __name__ == "__main__":
    cli_main(run, __doc__)
