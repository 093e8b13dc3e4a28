"""Region prices and the energy method label: the cost of loading and validating the price table,
of pricing every region of the grid table at once, and of one agent tick's GPU samples with the
energy ``method`` label.

- Price table: ``parse_electricity_prices`` of the package's ``data/electricity_prices.csv``
  (each row validated against the grid table, which is parsed once beforehand). Best of repeats.
- Every region: ``compare_regions`` over every code of ``data/grid_intensity.csv`` (world,
  countries, states, cloud regions) with the table's prices, as ``where --regions`` with all of
  them would; the share priced is printed.
- GPU samples: ``gpu_samples`` for 8 GPUs, one tick, with the energy method label and without
  (the same readings), to show what the label costs the agent per tick.

    python benchmarks/bench_prices.py [--quick]
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from importlib import resources

from common import Section, cli_main

from computewatch.carbon.regions import compare_regions
from computewatch.catalog.reference import PRICES_FILE, grid_rows, parse_electricity_prices
from computewatch.metrics.families import GpuCounters, gpu_samples
from computewatch.metrics.model import MetricSample

TARGET_PARSE_MS = 50.0  # the table is read once per process: a CLI start-up budget
TARGET_ALL_REGIONS_MS = 50.0
TARGET_LABEL_US = 5.0  # per GPU per tick: the label must not cost the agent anything noticeable


def _best(fn: Callable[[], object], n: int) -> tuple[float, float]:
    times = []
    for _ in range(n):
        a = time.perf_counter()
        fn()
        times.append(time.perf_counter() - a)
    return min(times), statistics.median(times)


def _parse(quick: bool, s: Section) -> None:
    text = resources.files("computewatch").joinpath(PRICES_FILE).read_text(encoding="utf-8")
    grid = grid_rows()
    rows = len(parse_electricity_prices(text, grid=grid))
    best, med = _best(lambda: parse_electricity_prices(text, grid=grid), 20 if quick else 200)
    s.add(
        f"Price table: {rows} rows parsed and validated against the grid table in best "
        f"{best * 1e3:.2f} ms, median {med * 1e3:.2f} ms.",
        "",
    )
    s.target("price table parse < 50 ms", f"{best * 1e3:.2f} ms", best * 1e3 < TARGET_PARSE_MS)


def _regions(quick: bool, s: Section) -> None:
    codes = list(grid_rows())
    figs = compare_regions(codes, 100.0)
    priced = sum(f.usd is not None for f in figs)
    best, med = _best(lambda: compare_regions(codes, 100.0), 5 if quick else 50)
    s.add(
        f"Every region at once: {len(codes)} codes compared in best {best * 1e3:.2f} ms, median "
        f"{med * 1e3:.2f} ms; {priced} of them priced from the table ({priced / len(codes):.0%}), "
        "the rest 'no price'.",
        "",
    )
    s.target(
        "all regions compared < 50 ms", f"{best * 1e3:.2f} ms", best * 1e3 < TARGET_ALL_REGIONS_MS
    )


def _samples(quick: bool, s: Section) -> None:
    gpus = [
        (
            (("gpu", f"GPU-{i}"), ("gpu_index", str(i)), ("gpu_model", "H100"), ("node", "n1")),
            {
                "gpu_utilization_ratio": 0.9,
                "gpu_memory_used_bytes": 7e10,
                "gpu_power_watts": 650.0,
                "gpu_energy_joules_total": 1e6 + i,
                "gpu_temperature_celsius": 60.0,
                "gpu_clock_event_reasons": 0.0,
            },
        )
        for i in range(8)
    ]
    counters = GpuCounters()

    def tick(method: str | None) -> None:
        out: list[MetricSample] = []
        for lbl, values in gpus:
            gpu_samples(
                out, lbl, values, allocated=True, dt=1.0, counters=counters, energy_method=method
            )

    n = 200 if quick else 3000
    with_label, _ = _best(lambda: tick("counter"), n)
    without, _ = _best(lambda: tick(None), n)
    per_gpu_us = (with_label - without) / 8 * 1e6
    s.add(
        f"Agent tick, 8 GPUs' samples: best {with_label * 1e6:.1f} us with the energy method "
        f"label, {without * 1e6:.1f} us without ({per_gpu_us:+.2f} us per GPU).",
        "",
    )
    s.target(
        "energy method label < 5 us per GPU per tick",
        f"{per_gpu_us:+.2f} us",
        per_gpu_us < TARGET_LABEL_US,
    )


def run(quick: bool) -> Section:
    s = Section("Region prices and the energy method label")
    _parse(quick, s)
    _regions(quick, s)
    _samples(quick, s)
    return s


if __name__ == "__main__":
    cli_main(run, __doc__)
