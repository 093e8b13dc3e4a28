"""HTML report: ``computewatch report`` on a stored 24-hour, 8-GPU run at 1 s, then the page
opened in headless Chromium.

The run is written through ``Store.write_batch``: 86,400 ticks × (the ~60 host and process-tree
series of ``bench_store``, plus 11 ``gpu_*`` series for each of 8 GPUs), one step per second.
``computewatch report RUN -o FILE`` is timed as a child process (median of repetitions), the
file's size is read, and the page is loaded from ``file://`` in Debian's Chromium through
Playwright with every non-file request aborted: the load time is from the start of navigation
to the last chart drawn (``window.computewatchDrawnAt``), median of fresh loads.
``--quick`` uses a 2-hour run.

    python benchmarks/bench_report.py [--quick]
"""

from __future__ import annotations

import random
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench_store import day_series
from common import Section, cli_main, computewatch_cli, fmt_bytes, median

from computewatch.analysis.aggregates import RunAggregates
from computewatch.analysis.summary import summary_of
from computewatch.readings import Kind, Labels, labels
from computewatch.store import COMPLETED, Store

TARGET_BYTES = 5 * 1024 * 1024
TARGET_LOAD_SECONDS = 2.0
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip
GPUS = 8
GPU_SERIES = (
    ("gpu_utilization_ratio", Kind.GAUGE),
    ("gpu_memory_utilization_ratio", Kind.GAUGE),
    ("gpu_memory_used_bytes", Kind.GAUGE),
    ("gpu_memory_total_bytes", Kind.GAUGE),
    ("gpu_power_watts", Kind.GAUGE),
    ("gpu_power_limit_watts", Kind.GAUGE),
    ("gpu_energy_joules_total", Kind.COUNTER),
    ("gpu_temperature_celsius", Kind.GAUGE),
    ("gpu_sm_clock_hertz", Kind.GAUGE),
    ("gpu_memory_clock_hertz", Kind.GAUGE),
    ("gpu_clock_event_reasons", Kind.GAUGE),
)
SeriesDef = tuple[str, Labels, Kind]


def _uuid(g: int) -> str:
    return f"GPU-{g:08x}-bench-0000-0000-{g:012x}"


def series_defs() -> list[SeriesDef]:
    out: list[SeriesDef] = list(day_series())
    for g in range(GPUS):
        lb = labels(gpu=_uuid(g))
        out += [
            (name, labels(gpu=_uuid(g), method="counter") if kind == Kind.COUNTER else lb, kind)
            for name, kind in GPU_SERIES
        ]
    return out


def _values(defs: list[SeriesDef], rng: random.Random) -> Iterator[list[float]]:
    """Each tick's values: counters grow, gauges wander, GPUs train with an evaluation pause
    every hour and an occasional one-second spike or dip (which the report must keep)."""
    n = len(defs)
    cur = [0.0] * n
    rate = [rng.uniform(0.0, 1e6) for _ in range(n)]
    level = [rng.uniform(1e6, 8e9) for _ in range(n)]
    for i, (name, _, kind) in enumerate(defs):
        if name.endswith("_seconds_total"):
            rate[i] = rng.uniform(0.0, 1.0)
        elif name == "gpu_energy_joules_total":
            rate[i] = 600.0
        elif name.endswith("_ratio"):
            level[i] = 0.9
        elif name == "gpu_power_watts":
            level[i] = 600.0
        elif name == "gpu_memory_used_bytes":
            level[i] = 70e9
        elif name == "gpu_memory_total_bytes":
            level[i] = 80e9
        elif name == "gpu_power_limit_watts":
            level[i] = 700.0
        elif name == "gpu_temperature_celsius":
            level[i] = 65.0
        elif name.endswith("_hertz"):
            level[i] = 1.98e9
        elif name == "gpu_clock_event_reasons":
            level[i] = 0.0
        elif kind == Kind.GAUGE and name in ("tree_processes", "tree_threads", "process_threads"):
            level[i] = float(rng.randint(1, 40))
    counters = [i for i, d in enumerate(defs) if d[2] == Kind.COUNTER]
    gauges = [i for i, d in enumerate(defs) if d[2] == Kind.GAUGE]
    rnd = rng.random
    t = 0
    while True:
        busy = 0.05 if t % 3600 >= 3300 else 1.0  # five minutes of evaluation every hour
        for i in counters:
            cur[i] += rate[i] * (0.5 + rnd()) * (busy if defs[i][0].startswith("gpu_") else 1.0)
        for i in gauges:
            scale = busy if defs[i][0] in ("gpu_utilization_ratio", "gpu_power_watts") else 1.0
            cur[i] = level[i] * scale * (0.95 + 0.1 * rnd())
        if rnd() < 1e-4:  # a rare spike
            cur[gauges[int(rnd() * len(gauges))]] *= 3.0
        t += 1
        yield cur


def build_run(path: Path, ticks: int, *, finish: bool = True) -> dict[str, Any]:
    """Write a ``ticks``-second run with 8 GPUs in batches of 600 ticks, feeding its aggregates
    a tick at a time as the sampler's 1 s flushes do; with ``finish``, mark it completed and
    store the summary made from them, as the end of `computewatch run` does. Returns its id,
    figures and aggregates."""
    defs = series_defs()
    gpus = [
        {"uuid": _uuid(g), "index": g, "name": "NVIDIA H100 80GB HBM3", "simulated": True}
        for g in range(GPUS)
    ]
    agg = RunAggregates()
    agg_s = 0.0
    store = Store.open(path)
    try:
        started = time.time() - ticks
        rid = f"report{ticks}"
        rk = store.create_run(
            run_id=rid, name=rid, tags={"bench": "report"}, command=["python", "train.py"],
            cwd="/tmp", mode="run", started_at=started, interval_seconds=1.0,
            host={"logical_cpus": 2, "allowed_cores": 2.0, "cpu_model": "synthetic",
                  "gpus": gpus, "gpus_used": [g["uuid"] for g in gpus]},
        )  # fmt: skip
        values = _values(defs, random.Random(3))
        series = [(i, n, lb, k) for i, (n, lb, k) in enumerate(defs)]
        mono0 = 5000.0
        writer = [(4001, mono0, {"name": rid, "tags": {}, "pid": 4001})]
        store.write_batch(rk, writers=writer)
        agg.add_batch(series=series, writers=writer)
        per_batch = 600
        t0 = time.perf_counter()
        for first in range(0, ticks, per_batch):
            seqs = range(first, min(first + per_batch, ticks))
            tick_rows: list[tuple[int, float, float]] = []
            samples: list[tuple[int, int, int, float]] = []
            steps: list[tuple[Any, ...]] = []
            for s in seqs:
                tick = (s, mono0 + s, started + s)
                rows = [(rk, s, i, v) for i, v in enumerate(next(values))]
                step = (4001, mono0 + s + 0.5, started + s + 0.5, 32.0, None)
                c0 = time.thread_time()
                agg.add_batch(ticks=[tick], samples=rows, steps=[step])
                agg_s += time.thread_time() - c0
                tick_rows.append(tick)
                samples += rows
                steps.append(step)
            store.write_batch(
                rk,
                series=series if first == 0 else (),
                ticks=tick_rows,
                samples=samples,
                steps=steps,
                data_until=tick_rows[-1][2],
            )
        write_s = time.perf_counter() - t0 - agg_s  # the aggregates' part is CPU-bound
        summary_s = 0.0
        if finish:
            store.update_run(
                rk, status=COMPLETED, exit_code=0, ended_at=started + ticks,
                data_until=started + ticks - 1,
            )  # fmt: skip
            t0 = time.perf_counter()
            store.update_run(rk, summary=summary_of(store, store.run_by_key(rk), agg))
            summary_s = time.perf_counter() - t0
        store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        store.close()
    return {
        "id": rid,
        "ended": started + ticks,
        "series": len(defs),
        "points": ticks * len(defs),
        "write_s": write_s,
        "summary_s": summary_s,
        "agg_us_per_tick": agg_s / ticks * 1e6,
        "aggregates": agg,
    }


def _time_report(db: Path, rid: str, out: Path) -> float:
    t0 = time.perf_counter()
    subprocess.run(
        [*computewatch_cli(), "report", rid, "--db", str(db), "-o", str(out)],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return time.perf_counter() - t0


def load_in_chromium(page_path: Path, loads: int) -> dict[str, Any] | str:
    """Open the page ``loads`` times in a fresh tab each; the seconds to the last chart drawn
    (the page's own clock, and Playwright's from ``goto`` to charts ready), or why not."""
    if not Path(CHROMIUM).exists():
        return f"no Chromium at {CHROMIUM}"
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return "Playwright is not installed (pip install playwright)"
    drawn: list[float] = []
    outside: list[float] = []
    blocked: list[str] = []
    errors: list[str] = []
    charts = 0
    with sync_playwright() as pw, tempfile.TemporaryDirectory(prefix="cw-chromium-") as prof:
        ctx = pw.chromium.launch_persistent_context(
            prof, executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS,
            viewport={"width": 1400, "height": 900},
        )  # fmt: skip
        try:

            def only_files(r: Any) -> None:
                if r.request.url.startswith("file:"):
                    r.continue_()
                else:
                    blocked.append(r.request.url)
                    r.abort()

            ctx.route("**/*", only_files)
            for _ in range(loads):
                page = ctx.new_page()
                page.on("pageerror", lambda e: errors.append(str(e)))
                t0 = time.perf_counter()
                page.goto(page_path.as_uri(), wait_until="load")
                page.wait_for_function("window.computewatchDrawnAt !== undefined")
                outside.append(time.perf_counter() - t0)
                drawn.append(page.evaluate("window.computewatchDrawnAt") / 1000.0)
                charts = page.evaluate("window.computewatchCharts.length")
                page.close()
        finally:
            ctx.close()
    return {
        "drawn_s": median(drawn),
        "goto_s": median(outside),
        "charts": charts,
        "blocked": blocked,
        "errors": errors,
    }


def run(quick: bool) -> Section:
    s = Section("6. HTML report of a long 8-GPU run")
    hours = 2 if quick else 24
    reps = 1 if quick else 3
    with tempfile.TemporaryDirectory(prefix="cw-bench-report-") as tmp:
        root = Path(tmp)
        db = root / "computewatch.db"
        day = build_run(db, hours * 3600)
        out = root / "report.html"
        build_s = median([_time_report(db, day["id"], out) for _ in range(reps)])
        size = out.stat().st_size
        loaded = load_in_chromium(out, 3 if quick else 5)
    pts = day["points"]
    s.add(
        f"A stored {hours}-hour run at 1 s with 8 GPUs: {hours * 3600:,} ticks × "
        f"{day['series']} series = {pts:,} points (written in {day['write_s']:.0f} s), plus "
        f"one step per second, and its summary stored as at the end of `computewatch run` "
        f"(from the aggregates kept while writing: {day['summary_s']:.2f} s). "
        "`computewatch report RUN -o FILE` as a child process, "
        "median of "
        f"{reps}; the page loaded from `file://` in headless Chromium with the network blocked, "
        "median of fresh tabs; *drawn* is the page's own clock from navigation start to the last "
        "chart drawn, *ready* adds Playwright's round trips.",
        "",
    )
    if quick:
        s.add("*Quick mode: a 2-hour run, not 24 hours.*", "")
    if isinstance(loaded, str):
        drawn_cell: object = f"not measured: {loaded}"
        ready_cell: object = "–"
        charts_cell: object = "–"
    else:
        drawn_cell, ready_cell, charts_cell = loaded["drawn_s"], loaded["goto_s"], loaded["charts"]
    s.table(
        ("measure", "value"),
        [
            ["`computewatch report` (seconds)", build_s],
            ["file size", f"{fmt_bytes(size)} ({size:,} bytes)"],
            ["charts", charts_cell],
            ["page drawn in Chromium (seconds)", drawn_cell],
            ["page ready through Playwright (seconds)", ready_cell],
        ],
    )
    if not isinstance(loaded, str) and (loaded["blocked"] or loaded["errors"]):
        s.add(f"**Requests blocked: {loaded['blocked']}; page errors: {loaded['errors']}**", "")
    label = f"{hours} h × 8 GPUs" if hours != 24 else "24 h × 8 GPUs"
    s.target(f"report of {label} < 5 MiB", fmt_bytes(size), size < TARGET_BYTES)
    if isinstance(loaded, str):
        s.target(f"report of {label} opens in < {TARGET_LOAD_SECONDS:g} s", loaded, None)
    else:
        t = loaded["drawn_s"]
        ok = t < TARGET_LOAD_SECONDS and not loaded["blocked"] and not loaded["errors"]
        s.target(f"report of {label} opens in < {TARGET_LOAD_SECONDS:g} s", f"{t:.2f} s", ok)
    s.add(
        f"The build reads {pts / build_s:,.0f} stored points per second (no target: the "
        "targets are the page's size and how fast it opens).",
        "",
    )
    return s


if __name__ == "__main__":
    cli_main(run, __doc__)
