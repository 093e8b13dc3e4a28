"""Store: write throughput of ``Store.write_batch``, then the readers on a stored day-long run.

1. Points per second through ``write_batch`` with the batches the sampler makes: 60 series ×
   10 ticks (``--interval 0.1``, flush every 1 s), 60 × 1 (``--interval 1``), 500 × 1 (a big
   process tree). Rows are built outside the timed call, as the sampler builds them in tick().
2. A stored 24-hour run at 1 s (86,400 ticks × 62 series, one step per tick), written through
   ``write_batch``, then ``computewatch show RUN --json`` and ``computewatch export`` (CSV,
   Parquet) timed as real child processes. ``--quick`` uses a 2-hour run.

    python benchmarks/bench_store.py [--quick]
"""

from __future__ import annotations

import random
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from common import Section, cli_main, computewatch_cli, fmt_bytes, median

from computewatch.analysis.summary import build_summary
from computewatch.readings import Kind, Labels, labels
from computewatch.store import COMPLETED, Store

TARGET_POINTS_PER_SECOND = 300_000
SeriesDef = tuple[str, Labels, Kind]


def _run(store: Store, run_id: str, started: float, interval: float) -> int:
    return store.create_run(
        run_id=run_id, name=run_id, tags={"bench": "store"}, command=["python", "train.py"],
        cwd="/tmp", mode="run", started_at=started, interval_seconds=interval,
        host={"logical_cpus": 2, "allowed_cores": 2.0, "cpu_model": "synthetic"},
    )  # fmt: skip


# -- 1. write throughput --------------------------------------------------------------------


def measure_writes(root: Path, n_series: int, ticks_per_batch: int, points: int) -> float:
    """Points per second through ``write_batch`` (median over the batches' own times)."""
    store = Store.open(root / f"write-{n_series}x{ticks_per_batch}.db")
    try:
        rk = _run(store, f"w{n_series}x{ticks_per_batch}", time.time(), 1.0)
        series = [(i, f"metric_{i}_total", labels(pid=i), Kind.COUNTER) for i in range(n_series)]
        rng = random.Random(0)
        batches = max(20, points // (n_series * ticks_per_batch))
        seq = 0
        times: list[float] = []
        for b in range(batches):
            ticks = [(seq + t, 1000.0 + seq + t, 1.7e9 + seq + t) for t in range(ticks_per_batch)]
            samples = [
                (rk, seq + t, i, rng.random() * 1e6)
                for t in range(ticks_per_batch)
                for i in range(n_series)
            ]
            seq += ticks_per_batch
            t0 = time.perf_counter()
            store.write_batch(
                rk,
                series=series if b == 0 else (),
                ticks=ticks,
                samples=samples,
                heartbeat_at=time.time(),
                data_until=ticks[-1][2],
            )
            times.append(time.perf_counter() - t0)
        # Whole-run rate (checkpoints included) rather than the median batch: the sustained
        # figure is what a long run sees.
        return batches * n_series * ticks_per_batch / sum(times)
    finally:
        store.close()


# -- 2. a stored long run -------------------------------------------------------------------


def day_series() -> list[SeriesDef]:
    """The ~60 series of a 4-process job on a 2-core host, as the real sources name them."""
    c, g = Kind.COUNTER, Kind.GAUGE
    out: list[SeriesDef] = [
        ("tree_cpu_seconds_total", (), c),
        ("tree_resident_memory_bytes", (), g),
        ("tree_process_peak_resident_memory_bytes", (), g),
        ("tree_processes", (), g),
        ("tree_threads", (), g),
        ("tree_read_bytes_total", (), c),
        ("tree_written_bytes_total", (), c),
    ]
    for pid, name in ((4001, "python"), (4010, "pt_data_worker"), (4011, "pt_data_worker"),
                      (4012, "pt_data_worker")):  # fmt: skip
        lbl = labels(pid=pid, name=name)
        out += [
            ("process_cpu_seconds_total", lbl, c),
            ("process_resident_memory_bytes", lbl, g),
            ("process_threads", lbl, g),
            ("process_read_bytes_total", lbl, c),
            ("process_written_bytes_total", lbl, c),
        ]
    modes = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
    out += [("host_cpu_seconds_total", labels(cpu=n, mode=m), c) for n in (0, 1) for m in modes]
    out += [
        ("host_memory_total_bytes", (), g),
        ("host_memory_available_bytes", (), g),
        ("host_memory_used_bytes", (), g),
        ("host_swap_total_bytes", (), g),
        ("host_swap_used_bytes", (), g),
    ]
    disk = labels(device="vda")
    out += [
        (n, disk, c)
        for n in (
            "host_disk_reads_total",
            "host_disk_read_bytes_total",
            "host_disk_writes_total",
            "host_disk_written_bytes_total",
        )
    ]
    for iface in ("lo", "eth0"):
        lbl = labels(interface=iface)
        out += [
            ("host_network_receive_bytes_total", lbl, c),
            ("host_network_transmit_bytes_total", lbl, c),
        ]
    out += [("host_load1", (), g), ("host_load5", (), g), ("host_load15", (), g)]
    out += [
        ("cgroup_memory_current_bytes", (), g),
        ("cgroup_memory_max_bytes", (), g),
        ("cgroup_cpu_seconds_total", (), c),
    ]
    return out


def _values(defs: list[SeriesDef], rng: random.Random) -> Iterator[list[float]]:
    """Each tick's values: counters grow by a random rate, gauges wander around a level."""
    n = len(defs)
    level = [rng.uniform(1.0, 8e9) if k == Kind.GAUGE else 0.0 for _, _, k in defs]
    rate = [rng.uniform(0.0, 1e6) if k == Kind.COUNTER else 0.0 for _, _, k in defs]
    for i, (name, _, _) in enumerate(defs):
        if name.endswith("_seconds_total"):
            rate[i] = rng.uniform(0.0, 1.0)
        elif name in ("tree_processes", "tree_threads", "process_threads"):
            level[i] = float(rng.randint(1, 40))
    cur = [0.0] * n
    counters = [i for i, d in enumerate(defs) if d[2] == Kind.COUNTER]
    gauges = [i for i, d in enumerate(defs) if d[2] == Kind.GAUGE]
    rnd = rng.random
    while True:
        for i in counters:
            cur[i] += rate[i] * (0.5 + rnd())
        for i in gauges:
            cur[i] = level[i] * (0.95 + 0.1 * rnd())
        yield cur


def build_long_run(path: Path, ticks: int) -> dict[str, Any]:
    """Write a finished run of ``ticks`` 1-second ticks; returns its id and write figures."""
    defs = day_series()
    store = Store.open(path)
    try:
        started = time.time() - ticks
        rid = f"day{ticks}"
        rk = _run(store, rid, started, 1.0)
        values = _values(defs, random.Random(1))
        series = [(i, n, lb, k) for i, (n, lb, k) in enumerate(defs)]
        mono0 = 5000.0
        store.write_batch(rk, writers=[(4001, mono0, {"name": rid, "tags": {}, "pid": 4001})])
        per_batch = 600  # ticks per write_batch call
        spent = 0.0
        for first in range(0, ticks, per_batch):
            seqs = range(first, min(first + per_batch, ticks))
            tick_rows = [(s, mono0 + s, started + s) for s in seqs]
            samples = []
            for s in seqs:
                samples += [(rk, s, i, v) for i, v in enumerate(next(values))]
            steps = [(4001, mono0 + s + 0.5, started + s + 0.5, 32.0, None) for s in seqs]
            t0 = time.perf_counter()
            store.write_batch(
                rk,
                series=series if first == 0 else (),
                ticks=tick_rows,
                samples=samples,
                steps=steps,
                data_until=tick_rows[-1][2],
            )
            spent += time.perf_counter() - t0
        store.update_run(
            rk, status=COMPLETED, exit_code=0, ended_at=started + ticks,
            data_until=started + ticks - 1,
        )  # fmt: skip
        t0 = time.perf_counter()
        summary = build_summary(store, store.run_by_key(rk))
        summary_s = time.perf_counter() - t0
        store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        store.close()
    points = ticks * len(defs)
    return {
        "id": rid,
        "series": len(defs),
        "points": points,
        "write_s": spent,
        "summary_s": summary_s,
        "summary": summary,
        "db_bytes": path.stat().st_size,
    }


def _time_cli(args: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run([*computewatch_cli(), *args], check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def _set_summary(path: Path, rid: str, summary: dict[str, Any] | None) -> None:
    with Store.open(path) as store:
        store.update_run(store.find_run(rid).key, summary=summary)


def run(quick: bool) -> Section:
    s = Section("4. Store: writes, and readers on a long run")
    write_points = 300_000 if quick else 1_200_000
    hours = 2 if quick else 24
    reps = 1 if quick else 3
    with tempfile.TemporaryDirectory(prefix="cw-bench-store-") as tmp:
        root = Path(tmp)
        configs = [(60, 10), (60, 1), (500, 1)]
        rates = {cfg: measure_writes(root, *cfg, write_points) for cfg in configs}
        s.add(
            f"`Store.write_batch` into a fresh WAL database on the temp filesystem, about "
            f"{write_points:,} points per configuration; points per second over every batch "
            "(WAL checkpoints included). A batch also carries its tick rows and the run's "
            "heartbeat update, as the sampler's do.",
            "",
        )
        s.table(
            ("batch", "as the sampler at", "points/s"),
            [
                ["60 series × 10 ticks", "--interval 0.1, flush 1 s", rates[(60, 10)]],
                ["60 series × 1 tick", "--interval 1, flush 1 s", rates[(60, 1)]],
                ["500 series × 1 tick", "~95-process tree, --interval 1", rates[(500, 1)]],
            ],
        )
        for cfg in ((60, 10), (500, 1)):
            r = rates[cfg]
            s.target(
                f"write_batch {cfg[0]}×{cfg[1]} ≥ {TARGET_POINTS_PER_SECOND:,} points/s",
                f"{r:,.0f} points/s",
                r >= TARGET_POINTS_PER_SECOND,
            )

        db = root / "home" / "computewatch.db"
        day = build_long_run(db, hours * 3600)
        rid = day["id"]
        dbarg = ["--db", str(db)]
        startup = median([_time_cli(["--version"]) for _ in range(reps)])
        show_computed = median([_time_cli(["show", rid, "--json", *dbarg]) for _ in range(reps)])
        _set_summary(db, rid, day["summary"])
        show_stored = median([_time_cli(["show", rid, "--json", *dbarg]) for _ in range(reps)])
        exports = []
        for fmt, ext in (("csv", "csv"), ("parquet", "parquet")):
            out = root / f"export.{ext}"
            t = _time_cli(["export", rid, "--format", fmt, "-o", str(out), *dbarg])
            exports.append((fmt, t, out.stat().st_size))
            out.unlink()
    pts = day["points"]
    s.add(
        f"A stored {hours}-hour run at 1 s: {hours * 3600:,} ticks × {day['series']} series "
        f"= {pts:,} points, plus one step per tick, written in batches of 600 ticks in "
        f"{day['write_s']:.1f} s ({pts / day['write_s']:,.0f} points/s). Database file "
        f"{fmt_bytes(day['db_bytes'])} ({day['db_bytes'] / pts:.1f} bytes per point). CLI "
        f"commands run as child processes; median of {reps}.",
        "",
    )
    if quick:
        s.add("*Quick mode: a 2-hour run, not 24 hours.*", "")
    rows: list[list[object]] = [
        ["`computewatch --version` (start-up floor)", startup, "–", "–"],
        ["`show RUN --json`, summary computed from samples", show_computed, "–", "–"],
        ["`show RUN --json`, summary stored at run end", show_stored, "–", "–"],
        [
            "`build_summary()` in-process, from the samples (an old run without a stored "
            "summary; the end of a run no longer does this: section 8)",
            day["summary_s"],
            "–",
            "–",
        ],
    ]
    for fmt, t, size in exports:
        rows.append([f"`export RUN --format {fmt} -o FILE`", t, fmt_bytes(size), f"{pts / t:,.0f}"])
    s.table(("command", "seconds", "file size", "rows/s"), rows)
    return s


if __name__ == "__main__":
    cli_main(run, __doc__)
