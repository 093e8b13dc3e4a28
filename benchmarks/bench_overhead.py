"""Overhead on the job: a fixed-work training-like loop, bare and under each monitor.

Variants, interleaved round-robin so that drifts of a shared machine hit them alike:
bare; ``computewatch run --quiet --interval 1``; the same at 0.1 s; the same at 0.1 s with the
package as it was at ``common.BASELINE_REF`` (*before*); CodeCarbon's
``OfflineEmissionsTracker`` started inside the script. Every tree is compiled to bytecode first,
as installing does. For each: the loop's own time (measured in the child), the whole wall time
with start-up, and CPU seconds. Run twice: with the job on one core (OpenBLAS single-threaded:
the monitor has a core to itself) and on every core (the monitor takes its CPU from the job).

    python benchmarks/bench_overhead.py [--quick]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from common import (
    BASELINE_REF,
    HERE,
    Section,
    baseline_src,
    child_env,
    children_cpu,
    cli_main,
    compile_tree,
    computewatch_cli,
    median,
    spread,
)

TARGET_RATIO = 1.01
NOISE_LIMIT = 0.03  # bare median this far above bare min: the run is too noisy to decide
TARGET_WORK_SECONDS = 4.0


@dataclass
class Variant:
    name: str
    prefix: list[str]
    extra: list[str] = field(default_factory=list)
    pythonpath: Path | None = None  # another tree of the package (the baseline)
    work: list[float] = field(default_factory=list)
    work_cpu: list[float] = field(default_factory=list)
    wall: list[float] = field(default_factory=list)
    cpu_total: list[float] = field(default_factory=list)  # every process of the variant
    cpu_job: list[float] = field(default_factory=list)  # the job's own process
    errors: list[str] = field(default_factory=list)


def _variants(base: Path | None) -> list[Variant]:
    cw = computewatch_cli()
    at_01 = [*cw, "run", "--quiet", "--interval", "0.1", "--"]
    out = [
        Variant("bare", []),
        Variant("computewatch run --interval 1", [*cw, "run", "--quiet", "--interval", "1", "--"]),
        Variant("computewatch run --interval 0.1", at_01),
        Variant("CodeCarbon offline tracker (1 s)", [], ["--codecarbon"]),
    ]
    if base is not None:
        out.insert(3, Variant(f"computewatch run --interval 0.1, before ({BASELINE_REF})", at_01,
                              pythonpath=base))  # fmt: skip
    return out


def _calibrate(env: dict[str, str]) -> int:
    """Steps for about TARGET_WORK_SECONDS of work with this thread setting (the fastest of
    three short runs: a busy neighbour only ever makes a run slower)."""
    probe = 300
    per_step = float("inf")
    for _ in range(3):
        out = subprocess.run(
            [sys.executable, str(HERE / "workload.py"), "--steps", str(probe)],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        per_step = min(per_step, _parse(out)["work_seconds"] / probe)
    return max(200, round(TARGET_WORK_SECONDS / per_step))


def _parse(stdout: str) -> dict[str, float]:
    for line in stdout.splitlines():
        if line.startswith("WORKLOAD "):
            parsed: dict[str, float] = json.loads(line[9:])
            return parsed
    raise RuntimeError(f"the workload printed no result: {stdout[-500:]!r}")


def _run_once(v: Variant, steps: int, env: dict[str, str]) -> None:
    cmd = [*v.prefix, sys.executable, str(HERE / "workload.py"), "--steps", str(steps), *v.extra]
    if v.pythonpath is not None:
        # a home of its own: the current tree's store has a schema the old package refuses
        home = os.path.join(env["COMPUTEWATCH_HOME"], "before")
        env = {**env, "PYTHONPATH": str(v.pythonpath), "COMPUTEWATCH_HOME": home}
    c0 = children_cpu()
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, check=False, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    cpu = children_cpu() - c0
    if proc.returncode != 0:
        v.errors.append(f"exit {proc.returncode}: {proc.stderr.strip()[-300:]}")
        return
    res = _parse(proc.stdout)
    if "codecarbon_error" in res:
        v.errors.append(str(res["codecarbon_error"]))
    v.work.append(res["work_seconds"])
    v.work_cpu.append(res["work_cpu_seconds"])
    v.wall.append(wall)
    v.cpu_total.append(cpu)
    v.cpu_job.append(res["cpu_seconds"])


def measure(threads: int, reps: int, home: str, base: Path | None) -> tuple[int, list[Variant]]:
    env = child_env(COMPUTEWATCH_HOME=home)
    env["OPENBLAS_NUM_THREADS"] = env["OMP_NUM_THREADS"] = str(threads)
    steps = _calibrate(env)
    variants = _variants(base)
    for i in range(reps):
        # Round-robin, the starting variant rotated each repetition.
        for k in range(len(variants)):
            _run_once(variants[(i + k) % len(variants)], steps, env)
    return steps, variants


def _report(s: Section, label: str, threads: int, steps: int, variants: list[Variant]) -> None:
    bare = variants[0]
    b_work, b_wall, b_cpu = median(bare.work), median(bare.wall), median(bare.cpu_total)
    b_min, b_loop_cpu = min(bare.work), median(bare.work_cpu)
    rows = []
    for v in variants:
        if not v.work:
            rows.append([v.name, *["–"] * 9, "failed: " + "; ".join(v.errors[:1])])
            continue
        work, wall = median(v.work), median(v.wall)
        monitor_cpu = [t - j for t, j in zip(v.cpu_total, v.cpu_job, strict=True)]
        note = f"{len(v.work)} runs"
        if v.errors:
            note += f"; {len(v.errors)} error(s): {v.errors[0][:120]}"
        rows.append(
            [
                v.name,
                work,
                f"{work / b_work:.3f}×",
                f"{min(v.work) / b_min:.3f}×",
                spread(v.work),
                f"{median(v.work_cpu) / b_loop_cpu:.3f}×",
                wall,
                f"{wall / b_wall:.3f}×",
                median(v.cpu_total) - b_cpu,
                median(monitor_cpu) if v.prefix else "–",
                note,
            ]
        )
    s.add(f"### Job on {label} ({steps} steps, `OPENBLAS_NUM_THREADS={threads}`)", "")
    s.table(
        (
            "variant",
            "loop s (median)",
            "loop ratio (median)",
            "loop ratio (min)",
            "loop s min–max",
            "loop CPU ratio",
            "wall s (median)",
            "wall ratio",
            "extra CPU s vs bare",
            "supervisor CPU s",
            "notes",
        ),
        rows,
    )
    # How far a typical bare run sits above the least disturbed one: when that exceeds the
    # margin being tested several times over, the medians cannot decide the target.
    noise = b_work / b_min - 1.0
    v = variants[2]
    if v.work:
        ratio = median(v.work) / b_work
        s.target(
            f"overhead at 0.1 s, job on {label} (loop ratio ≤ {TARGET_RATIO})",
            f"median {ratio:.3f}×, min {min(v.work) / b_min:.3f}×, loop CPU "
            f"{median(v.work_cpu) / b_loop_cpu:.3f}× (wall {median(v.wall) / b_wall:.3f}×; "
            f"bare median {noise:.1%} above bare min)",
            ratio <= TARGET_RATIO,
            inconclusive=f"bare runs vary {noise:.0%}" if noise > NOISE_LIMIT else None,
        )
        cpu_ratio = median(v.work_cpu) / b_loop_cpu
        cpu_noise = b_loop_cpu / min(bare.work_cpu) - 1.0
        s.target(
            f"in-job CPU at 0.1 s, job on {label} (loop CPU ratio ≤ {TARGET_RATIO})",
            f"{cpu_ratio:.3f}× (bare median {cpu_noise:.1%} above bare min)",
            cpu_ratio <= TARGET_RATIO,
            inconclusive=f"bare runs vary {cpu_noise:.0%}" if cpu_noise > NOISE_LIMIT else None,
        )
    before = next((x for x in variants if x.pythonpath is not None and x.work), None)
    if v.work and before is not None:

        def supervisor(x: Variant) -> float:
            return median([t - j for t, j in zip(x.cpu_total, x.cpu_job, strict=True)])

        a, b = supervisor(v), supervisor(before)
        s.target(
            f"supervisor CPU per run at 0.1 s, job on {label}, no more than before",
            f"{a:.3f} s (before {b:.3f} s)",
            a <= b,
        )


def run(quick: bool) -> Section:
    s = Section("1. Overhead on the job")
    reps = 3 if quick else 5
    cores = len(os.sched_getaffinity(0))
    settings = [(1, "one core")] if quick else [(1, "one core"), (cores, f"all {cores} cores")]
    s.add(
        "A numpy matmul loop of fixed work (384×384 float64, one `step(32)` per iteration "
        f"when monitored by computewatch), about 4 s bare. Variants run round-robin, {reps} "
        "repetitions each.",
        "",
        "- *loop*: `perf_counter` around the loop inside the child; ratio of medians, and "
        "ratio of minimums (the least disturbed run of each: more robust on a shared machine).",
        "- *loop CPU*: `process_time` around the loop, every thread of the job: the in-job "
        "cost (`step()`, the spool writer thread, CodeCarbon's threads) without scheduling "
        "noise.",
        "- *wall*: the whole child from spawn to exit, with interpreter and monitor start-up "
        "and the final summary.",
        "- *extra CPU*: CPU seconds of every process of the variant (`RUSAGE_CHILDREN` delta) "
        "minus bare's.",
        "- *supervisor CPU*: that delta minus the job's own CPU (`RUSAGE_SELF` printed by the "
        "job): the `computewatch run` process alone, start-up and final summary included. "
        "CodeCarbon runs inside the job, so its CPU shows only in *extra CPU*.",
        "",
    )
    compile_tree(HERE.parent / "src")
    base = baseline_src()
    if isinstance(base, str):
        s.add(f"*{base}: the before variant is left out.*", "")
    with tempfile.TemporaryDirectory(prefix="cw-bench-overhead-") as home:
        for threads, label in settings:
            steps, variants = measure(threads, reps, home, base if isinstance(base, Path) else None)
            _report(s, label, threads, steps, variants)
    if quick:
        s.add("*Quick mode: job on one core only, 3 repetitions.*", "")
    return s


if __name__ == "__main__":
    cli_main(run, __doc__)
