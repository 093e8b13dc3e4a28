"""The agent's training detection: classification time per job with a full 1 h window at the
agent's default 5 s interval, the agent's tick time with detection on and off (8 fake GPUs,
8 jobs), and the memory a window holds.

Run: ``python benchmarks/bench_agent_detection.py [--quick]``.
"""

from __future__ import annotations

import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from common import Section, cli_main

from computewatch.fleet.agent import Agent
from computewatch.fleet.attribution import Attributor
from computewatch.fleet.detection import DetectOptions, TrainingDetector
from computewatch.fleet.node import NodeOptions, NodeSampler
from computewatch.sources.nvidia import NvidiaSource
from computewatch.testing import ManualClock, from_preset

INTERVAL = 5.0
WINDOW = 3600.0
TICK_TARGET_MS = 5.0  # extra tick time detection may add at most, worst tick


def _stat(pid: int) -> str:
    rest = ["S", "1", str(pid), str(pid), "0", "-1", "0"] + ["0"] * 12
    rest += [str(100 + pid), "1000", "256"] + ["0"] * 30
    return f"{pid} (train) " + " ".join(rest) + "\n"


def _training(t: float) -> int:
    return 30 if t % 60 < 5 else 97


def make_node(root: Path, gpus: int, gpus_per_job: int) -> tuple[NodeSampler, ManualClock]:
    """A recorded /proc with one process per job, each on ``gpus_per_job`` of ``gpus`` fake
    H100s whose utilization follows a training rhythm."""
    clock = ManualClock(0.0)
    fake = from_preset(f"{gpus}xH100-SXM", clock=clock)
    for d in fake.devices:
        d.script("gpu_util_percent", _training)
    for j in range(gpus // gpus_per_job):
        pid = 1000 + j
        d = root / str(pid)
        d.mkdir()
        (d / "stat").write_text(_stat(pid))
        (d / "status").write_text("Name:\ttrain\nUid:\t1000\t1000\t1000\t1000\n")
        (d / "cgroup").write_text("0::/user.slice\n")
        (d / "environ").write_bytes(f"COMPUTEWATCH_TAGS=job=j{j},team=t\0".encode())
        for g in range(gpus_per_job):
            fake.devices[j * gpus_per_job + g].add_process(pid, 40 << 30)
    (root / "loadavg").write_text(f"0 0 0 1/1 {1000 + gpus}\n")
    node = NodeSampler(
        NodeOptions(node="bench", procfs_root=str(root), filesystems=()),
        Attributor(str(root), user_name=lambda u: "u", pod_logs_root=None),
        clock=clock,
    )
    node.gpus = [NvidiaSource(fake, pids=node.pids_view, all_gpus=True, procfs_root=str(root))]
    return node, clock


def classification_ms(gpus: int, gpus_per_job: int, repeats: int) -> tuple[float, int, int]:
    """Median ms to classify one job (its whole window) and the samples per GPU it held."""
    root = Path(tempfile.mkdtemp(prefix="cw-bench-det-"))
    try:
        node, clock = make_node(root, gpus, gpus_per_job)
        det = TrainingDetector(
            DetectOptions(every=1e9, min_seconds=60, window=WINDOW), "bench", background=False
        )
        for _ in range(int(WINDOW / INTERVAL)):
            clock.advance(INTERVAL)
            node.sample()
            det.observe(clock(), node.job_gpus())
        snaps = det._snapshots(clock())
        per_gpu = len(snaps[0].rows[0])
        det.run_round(clock(), snaps[:1])  # warm: the model file loaded once
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            det.run_round(clock(), snaps)
            times.append((time.perf_counter() - t0) / len(snaps))
        node.close()
        return statistics.median(times) * 1e3, per_gpu, len(snaps)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def tick_times(detect: bool, ticks: int) -> tuple[list[float], list[float], int]:
    """Wall ms of each agent tick after a full hour of history (8 GPUs, 8 jobs), detection on
    (every 300 s, on its own thread) or off; and the ticks that started a round."""
    root = Path(tempfile.mkdtemp(prefix="cw-bench-det-"))
    try:
        node, clock = make_node(root, 8, 1)
        det = (
            TrainingDetector(DetectOptions(every=300, min_seconds=600, window=WINDOW), "bench")
            if detect
            else None
        )
        agent = Agent(node, [], INTERVAL, wall=clock, detector=det)
        for _ in range(int(WINDOW / INTERVAL)):  # fill the windows
            clock.advance(INTERVAL)
            agent.tick()
            if det is not None:
                det.wait_idle()
        plain, round_ticks = [], []
        rounds = det.rounds if det else 0
        for _ in range(ticks):
            clock.advance(INTERVAL)
            t0 = time.perf_counter()
            agent.tick()
            dt = (time.perf_counter() - t0) * 1e3
            if det is not None and det.busy:  # this tick started a round
                round_ticks.append(dt)
                det.wait_idle()  # the next tick meets a finished round, as 5 s later would
            else:
                plain.append(dt)
        n = (det.rounds - rounds) if det else 0
        if det:
            det.close()
        node.close()
        return plain, round_ticks, n
    finally:
        shutil.rmtree(root, ignore_errors=True)


def window_bytes(jobs: int) -> tuple[float, int]:
    """Bytes a window holds per GPU sample, counted as if nothing were shared (each row's tuple
    plus each of its float objects: an upper bound), and the samples held after an hour."""
    root = Path(tempfile.mkdtemp(prefix="cw-bench-det-"))
    try:
        node, clock = make_node(root, jobs, 1)
        det = TrainingDetector(
            DetectOptions(every=1e9, min_seconds=60, window=WINDOW), "bench", background=False
        )
        for _ in range(int(WINDOW / INTERVAL)):
            clock.advance(INTERVAL)
            node.sample()
            det.observe(clock(), node.job_gpus())
        rows = [r for snap in det._snapshots(clock()) for g in snap.rows for r in g]
        size = sum(
            sys.getsizeof(r) + sum(sys.getsizeof(v) for v in r if v is not None) for r in rows
        )
        node.close()
        return size / len(rows), det.samples_kept()
    finally:
        shutil.rmtree(root, ignore_errors=True)


def run(quick: bool) -> Section:
    s = Section("Agent training detection: classification per job, tick time on vs off")
    repeats, ticks = (3, 240) if quick else (10, 720)
    one_ms, per_gpu, _ = classification_ms(8, 1, repeats)
    eight_ms, _, _ = classification_ms(8, 8, repeats)
    off, _, _ = tick_times(False, ticks)
    on, on_round, rounds = tick_times(True, ticks)
    per_sample, kept = window_bytes(8)

    def p99(v: list[float]) -> float:
        return sorted(v)[min(len(v) - 1, int(0.99 * len(v)))] if v else float("nan")

    rows: list[list[object]] = [
        [f"classify one 1-GPU job, 1 h window at 5 s ({per_gpu} samples)", f"{one_ms:.1f} ms"],
        ["classify one 8-GPU job, 1 h window at 5 s", f"{eight_ms:.1f} ms"],
        ["tick, detection off: median / p99 (8 GPUs, 8 jobs)",
         f"{statistics.median(off):.2f} / {p99(off):.2f} ms"],
        ["tick, detection on, no round: median / p99",
         f"{statistics.median(on):.2f} / {p99(on):.2f} ms"],
        [f"tick that starts a round (snapshot; {rounds} rounds): median / max",
         f"{statistics.median(on_round):.2f} / {max(on_round):.2f} ms" if on_round else "–"],
        ["window memory per GPU sample (tuple + floats, nothing shared)", f"{per_sample:.0f} B"],
        [f"window memory, 8 jobs × 1 GPU × 1 h ({kept} samples)",
         f"{per_sample * kept / 2**20:.2f} MiB"],
    ]  # fmt: skip
    s.table(("measure", "value"), rows)
    s.add(
        "Recorded /proc and 8 simulated H100s (fake NVML) on a simulated clock; each job's "
        "utilization follows a training rhythm. Classification: `TrainingDetector.run_round` "
        "(features, the forest, the FLOP estimate; no account check) per job with a full hour "
        "of history. Tick time: `Agent.tick()` wall time after an hour of history, detection "
        "every 300 s on its own thread; the tick that starts a round copies the windows.",
        "",
    )
    worst = max(on_round) if on_round else float("nan")
    extra = (statistics.median(on_round) if on_round else float("nan")) - statistics.median(off)
    s.target(
        f"a round adds ≤ {TICK_TARGET_MS:g} ms to the tick that starts it (median)",
        f"{extra:+.2f} ms (worst round tick {worst:.2f} ms)",
        extra <= TICK_TARGET_MS if on_round else None,
    )
    return s


if __name__ == "__main__":
    cli_main(run, __doc__)
