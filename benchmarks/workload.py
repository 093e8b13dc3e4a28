"""A training-like job of fixed work, the monitored command of ``bench_overhead.py``.

Each step is a numpy matmul (OpenBLAS, all cores by default) and a normalisation. Under
``computewatch run`` it reports every step through ``track()``; with ``--codecarbon`` it runs
CodeCarbon's offline tracker around the loop. It prints one JSON line: the loop's own time
(``time.perf_counter``) and CPU time (``time.process_time``, every thread of the job), the
process's CPU seconds from start to exit, and what went wrong with CodeCarbon, if anything.

    python benchmarks/workload.py --steps 2500 [--codecarbon]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from typing import Any

SIZE = 384


def work(steps: int, step: Any) -> tuple[float, float]:
    """Run the loop; returns its wall seconds and this process's CPU seconds during it."""
    import numpy as np

    rng = np.random.default_rng(0)
    a = rng.standard_normal((SIZE, SIZE))
    b = rng.standard_normal((SIZE, SIZE))
    c0 = time.process_time()
    t0 = time.perf_counter()
    for _ in range(steps):
        c = a @ b
        a = c / np.abs(c).max()
        step(32)
    return time.perf_counter() - t0, time.process_time() - c0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--codecarbon", action="store_true")
    a = ap.parse_args()
    out: dict[str, Any] = {}
    tracker = None
    step: Any = lambda samples: None  # noqa: E731
    run = None
    if os.environ.get("COMPUTEWATCH_RUN_ID"):
        import computewatch

        run = computewatch.track(name="bench-workload").start()
        step = run.step
    if a.codecarbon:
        try:
            from codecarbon import OfflineEmissionsTracker

            tracker = OfflineEmissionsTracker(
                country_iso_code="FRA",
                measure_power_secs=1,
                log_level="error",
                save_to_file=False,
            )
            tracker.start()
        except Exception as e:  # recorded in the results, not raised
            out["codecarbon_error"] = f"{type(e).__name__}: {e}"
            tracker = None
    out["work_seconds"], out["work_cpu_seconds"] = work(a.steps, step)
    if tracker is not None:
        try:
            out["codecarbon_kg"] = tracker.stop()
        except Exception as e:
            out["codecarbon_error"] = f"stop: {type(e).__name__}: {e}"
    if run is not None:
        run.close()
    ru = resource.getrusage(resource.RUSAGE_SELF)
    out["cpu_seconds"] = ru.ru_utime + ru.ru_stime
    sys.stdout.write("WORKLOAD " + json.dumps(out) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
