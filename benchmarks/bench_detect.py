"""Training-run detection and trace import: jobs classified per second on 1 Hz one-hour traces
(one GPU and eight), and rows per second read from an nvidia-smi log and imported into the
store.

Run: ``python benchmarks/bench_detect.py [--quick]``.
"""

from __future__ import annotations

import math
import random
import tempfile
import time
from pathlib import Path

from common import Section, cli_main

from computewatch.detect import (
    CALIBRATED_FILE,
    MODEL_FILE,
    GpuTelemetry,
    classify_series,
    load_model,
)
from computewatch.store import Store
from computewatch.traces import read_nvidia_smi
from computewatch.traces.importer import import_trace


def _gpu(rng: random.Random, seconds: int) -> GpuTelemetry:
    period = rng.randint(3, 30)
    util = [
        min(1.0, max(0.0, (0.95 if i % period < period * 0.8 else 0.3) + rng.gauss(0, 0.03)))
        for i in range(seconds)
    ]
    return GpuTelemetry(
        [1.7e9 + i for i in range(seconds)],
        {
            "gpu_utilization_ratio": util,
            "gpu_memory_used_bytes": [6e10 + rng.gauss(0, 1e7) for _ in range(seconds)],
            "gpu_power_watts": [300 + 300 * u for u in util],
        },
    )


def _detect_rate(gpus: int, jobs: int, seconds: int, shipped: str = MODEL_FILE) -> float:
    rng = random.Random(7)
    model = load_model(shipped=shipped)
    traces = [[_gpu(rng, seconds) for _ in range(gpus)] for _ in range(jobs)]
    names = ["NVIDIA H100 80GB HBM3"] * gpus
    t0 = time.perf_counter()
    for t in traces:
        classify_series(t, gpu_names=names, model=model)
    return jobs / (time.perf_counter() - t0)


def _smi_log(path: Path, seconds: int, gpus: int) -> int:
    with path.open("w") as f:
        f.write(
            "timestamp, index, name, utilization.gpu [%], utilization.memory [%], "
            "memory.used [MiB], memory.total [MiB], power.draw [W], temperature.gpu, "
            "clocks.current.sm [MHz]\n"
        )
        for s in range(seconds):
            hh, rem = divmod(s, 3600)
            mm, ss = divmod(rem, 60)
            for g in range(gpus):
                u = 50 + 45 * math.sin(s / 7 + g)
                f.write(
                    f"2024/01/31 {hh:02d}:{mm:02d}:{ss:02d}.{g:03d}, {g}, NVIDIA H100 80GB HBM3, "
                    f"{u:.0f} %, 30 %, 40000 MiB, 81559 MiB, {300 + 3 * u:.2f} W, 60, 1980 MHz\n"
                )
    return seconds * gpus


def run(quick: bool) -> Section:
    s = Section("Training-run detection and trace import")
    hour = 600 if quick else 3600
    jobs = 5 if quick else 30
    one = _detect_rate(1, jobs, hour)
    eight = _detect_rate(8, max(jobs // 4, 2), hour)
    one_cal = _detect_rate(1, jobs, hour, CALIBRATED_FILE)
    eight_cal = _detect_rate(8, max(jobs // 4, 2), hour, CALIBRATED_FILE)
    with tempfile.TemporaryDirectory() as d:
        log = Path(d) / "smi.csv"
        rows = _smi_log(log, hour, 8)
        t0 = time.perf_counter()
        trace = read_nvidia_smi(log, utc=True)
        t_read = time.perf_counter() - t0
        with Store.open(Path(d) / "cw.db") as store:
            t0 = time.perf_counter()
            import_trace(store, trace, name="bench")
            t_store = time.perf_counter() - t0
    label = f"{hour // 60}-minute"
    s.table(
        ("measure", "value"),
        [
            [f"detect, 1 GPU, {label} 1 Hz trace (jobs/s), model 1.0.0", f"{one:.1f}"],
            [f"detect, 8 GPUs, {label} 1 Hz trace (jobs/s), model 1.0.0", f"{eight:.1f}"],
            [f"detect, 1 GPU, {label} 1 Hz trace (jobs/s), calibrated 2.0.0", f"{one_cal:.1f}"],
            [
                f"detect, 8 GPUs, {label} 1 Hz trace (jobs/s), calibrated 2.0.0",
                f"{eight_cal:.1f}",
            ],
            [
                f"read nvidia-smi log, 8 GPUs × {hour} s ({rows} rows, rows/s)",
                f"{rows / t_read:,.0f}",
            ],
            ["write the imported run to the store (rows/s)", f"{rows / t_store:,.0f}"],
            ["import end to end, read + store (rows/s)", f"{rows / (t_read + t_store):,.0f}"],
        ],
    )
    s.add(
        "Detection: `classify_series` with each shipped model (1.0.0: the library's and the "
        "agent's; 2.0.0: `detect`'s) on synthetic 1 Hz series (utilization with a step rhythm, "
        "memory, power): features, the forest, the per-job evidence (tree-path "
        "contributions), the calibration, the compute ceiling and the FLOP estimate included. "
        "Import: `read_nvidia_smi` then `import_trace` (series, ticks, samples, polled "
        "energy) into a fresh SQLite store; the summary and accounting are not included.",
        "",
    )
    return s


if __name__ == "__main__":
    cli_main(run, __doc__)
