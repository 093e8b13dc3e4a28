"""step() cost: ns per ``run.step()`` call in user code, on a run attached to a supervisor.

``COMPUTEWATCH_RUN_ID`` and ``COMPUTEWATCH_SPOOL`` point at a temporary spool, so ``track()``
attaches as it does under ``computewatch run`` and no sampler starts. ``timeit``, best of
several repeats (the least disturbed), against a bare ``list.append`` of a tuple. The writer's
background flush (packing records into the spool file) also runs in the user's interpreter, so
its cost per record is measured too.

    python benchmarks/bench_step.py [--quick]
"""

from __future__ import annotations

import os
import tempfile
import time
import timeit
from collections import deque
from pathlib import Path

from common import Section, cli_main

from computewatch.sampling.channel import ENV_RUN_ID, ENV_SPOOL, StepWriter

TARGET_NS = 2000.0


def _best_ns(stmt: str, ns: dict[str, object], number: int, repeat: int) -> float:
    # Empty the buffers before each repeat: a list grown to millions of tuples measures the
    # allocator and page faults, not the append.
    t = timeit.Timer(stmt, setup="lst.clear(); dq.clear()", globals=ns)
    return min(t.repeat(repeat=repeat, number=number)) / number * 1e9


def _flush_ns_per_record(spool: Path, records: int, repeat: int) -> float:
    """ns per record of ``StepWriter.flush`` (its background thread's work)."""
    w = StepWriter(spool / "flush", {"name": "bench"})
    w._stop.set()  # keep its thread from flushing while we time it
    w._thread.join()
    best = float("inf")
    for _ in range(repeat):
        for _ in range(records):
            w.append((time.monotonic(), 32.0, 4096.0))
        t0 = time.perf_counter()
        w.flush()
        best = min(best, time.perf_counter() - t0)
    w.close()
    return best / records * 1e9


def run(quick: bool) -> Section:
    s = Section("3. step() cost in user code")
    # Short repeats, many of them: best-of discards the ones a noisy neighbour disturbed.
    number, repeat = (20_000, 20) if quick else (20_000, 100)
    saved = {k: os.environ.get(k) for k in (ENV_RUN_ID, ENV_SPOOL)}
    with tempfile.TemporaryDirectory(prefix="cw-bench-step-") as tmp:
        os.environ[ENV_RUN_ID] = "benchstep0000"
        os.environ[ENV_SPOOL] = str(Path(tmp) / "spool")
        try:
            import computewatch

            run = computewatch.track(name="bench-step").start()
            assert run.attached, "track() did not attach to the spool"
            lst: list[tuple[float, float | None, float | None]] = []
            dq: deque[tuple[float, float | None, float | None]] = deque()
            ns = {
                "run": run,
                "computewatch": computewatch,
                "lst": lst,
                "dq": dq,
                "mono": time.monotonic,
            }
            cases = [
                ("run.step()", "run.step()"),
                ("run.step(samples=32, tokens=4096)", "run.step(samples=32, tokens=4096)"),
                ("computewatch.step() (module-level)", "computewatch.step()"),
                ("list.append((1.0, None, None))", "lst.append((1.0, None, None))"),
                ("list.append((mono(), None, None))", "lst.append((mono(), None, None))"),
                ("deque.append((mono(), 32, 4096))", "dq.append((mono(), 32, 4096))"),
            ]
            rows = []
            measured: dict[str, float] = {}
            for label, stmt in cases:
                t = _best_ns(stmt, ns, number, repeat)
                measured[label] = t
                rows.append([f"`{label}`", t])
            run.close()
            flush = _flush_ns_per_record(Path(tmp), 100_000, 5)
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
    bare = measured["list.append((1.0, None, None))"]
    s.add(
        f"`timeit`, best of {repeat} repeats of {number:,} calls; ns per call. The writer's "
        "daemon thread keeps flushing (every 0.25 s) during the `run.step` cases, as it would "
        "in a job.",
        "",
    )
    s.table(
        ("call", "ns per call", "vs bare list.append"),
        [[*r, f"{r[1] / bare:.1f}×"] for r in rows],
    )
    s.table(
        ("background work in the user's interpreter", "ns per step record"),
        [["`StepWriter.flush` (pack + write to the spool file), 100,000 records", flush]],
    )
    for label in ("run.step()", "run.step(samples=32, tokens=4096)"):
        t = measured[label]
        s.target(f"`{label}` ≤ {TARGET_NS:.0f} ns", f"{t:.0f} ns", t <= TARGET_NS)
    return s


if __name__ == "__main__":
    cli_main(run, __doc__)
