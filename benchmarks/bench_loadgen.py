"""Our measurement's cost on a LoadGen run: the same MLCommons LoadGen scenario on the same
CPU-bound function, bare (LoadGen alone) and inside a computewatch benchmark run (the sampler
process at the benchmark's 0.2 s interval, and one ``run.step()`` per answered batch), in
interleaved pairs (bare first in even pairs, measured first in odd ones) so that a drift of the
machine hits both alike. The figure is LoadGen's own throughput (``result_qps_with_loadgen_
overhead`` for single-stream, ``result_samples_per_second`` for offline); the cost is one
minus the median of the pairs' measured/bare ratios. Target: at most 1%. Also reported: the CPU
time of the sampler process (our children's CPU time across the measured run, its start-up
and its end-of-run summary included), and the part of it spent inside LoadGen's window (the
benchmark waits for the sampler to start before LoadGen does), each as a share of the CPU time
the bare run spent in LoadGen and the function.

    python benchmarks/bench_loadgen.py [--quick]
"""

from __future__ import annotations

import os
import resource
import statistics
import tempfile
import time

import psutil
from common import Section, cli_main, spread

from computewatch.bench.inference import wait_until_sampling
from computewatch.bench.loadgen import ScenarioSettings, calibrate, run_scenario
from computewatch.tracking import track

TARGET = 0.01
WORK = 20_000  # additions per sample: about 0.5 ms of one core in CPython


def work(batch: list[int]) -> list[int]:
    """A fixed amount of CPU work per sample (the sampler competes for the CPU with it)."""
    out = []
    for x in batch:
        acc = 0
        for i in range(WORK):
            acc += i ^ x
        out.append(acc)
    return out


window_cpu = [0.0]  # the sampler's CPU seconds inside LoadGen's window, last measured run


def _proc_cpu(p: psutil.Process | None) -> float:
    if p is None:
        return 0.0
    try:
        t = p.cpu_times()
    except psutil.Error:
        return 0.0
    return float(t.user + t.system)


def _cpu() -> tuple[float, float]:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, kids.ru_utime + kids.ru_stime


def _qps(settings: ScenarioSettings, per_call: float, db: str | None) -> tuple[float, float, float]:
    """LoadGen's QPS, and our process's and our children's CPU seconds meanwhile."""
    samples = list(range(64))
    own0, kids0 = _cpu()
    if db is None:
        r, _w, _n = run_scenario(work, samples, settings, target="work", per_call_seconds=per_call)
    else:
        with track(name="bench-loadgen", tags={"bench": "overhead"}, interval=0.2, db=db) as run:
            wait_until_sampling(run)
            sampler = psutil.Process(run.sampler_pid) if run.sampler_pid else None
            s0 = _proc_cpu(sampler)
            step = run.step
            r, _w, _n = run_scenario(
                work, samples, settings, target="work", per_call_seconds=per_call,
                on_batch=lambda n: step(samples=n),
            )  # fmt: skip
            window_cpu[0] = _proc_cpu(sampler) - s0
    assert r.qps is not None, "LoadGen reported no throughput"
    own1, kids1 = _cpu()
    return r.qps, own1 - own0, kids1 - kids0


def run(quick: bool) -> Section:
    s = Section("LoadGen: our measurement's cost on a LoadGen run")
    pairs = 3 if quick else 8
    duration = 1.0 if quick else 5.0
    rows = []
    costs = []
    with tempfile.TemporaryDirectory() as tmp:
        db = os.path.join(tmp, "bench.db")
        for scenario, batch in (("single-stream", 1), ("offline", 16)):
            settings = ScenarioSettings(
                scenario=scenario, duration_seconds=duration, min_query_count=16, batch_size=batch
            )
            per_call = calibrate(work, "work", list(range(64)), settings.calls_per_query, 9)
            ratios, bare_q, ours_q, sampler_share, sampler_s, in_window = [], [], [], [], [], []
            for p in range(pairs):
                order = (None, db) if p % 2 == 0 else (db, None)
                got = {}
                for which in order:
                    got[which is not None] = _qps(settings, per_call, which)
                    time.sleep(0.2)
                bare_q.append(got[False][0])
                ours_q.append(got[True][0])
                ratios.append(got[True][0] / got[False][0])
                sampler_s.append(got[True][2])
                in_window.append(window_cpu[0] / got[False][1])
                sampler_share.append(got[True][2] / got[False][1])
            cost = 1.0 - statistics.median(ratios)
            costs.append((scenario, cost, ratios))
            rows.append(
                (scenario, f"{statistics.median(bare_q):,.1f}", f"{statistics.median(ours_q):,.1f}",
                 spread(ratios), f"{cost * 100:+.2f}%", f"{statistics.median(sampler_s):.3f}",
                 f"{statistics.median(sampler_share) * 100:.1f}%",
                 f"{statistics.median(in_window) * 100:.2f}%")
            )  # fmt: skip
    s.add(
        f"{pairs} interleaved pairs per scenario, LoadGen min duration {duration:g} s, "
        f"{WORK:,} additions per sample (CPU-bound, pure Python); the measured run samples "
        "every 0.2 s in its own process and appends one step per answered batch.",
        "",
    )
    s.table(["scenario", "LoadGen alone (QPS)", "with computewatch (QPS)", "ratio spread",
             "cost", "sampler CPU s (whole run)", "sampler CPU / run CPU",
             "in LoadGen's window"], rows)  # fmt: skip
    for scenario, cost, ratios in costs:
        noise = max(ratios) - min(ratios)
        s.target(
            f"{scenario}: cost ≤ {TARGET:.0%}",
            f"{cost * 100:+.2f}% (pair ratios {min(ratios):.3f}–{max(ratios):.3f})",
            cost <= TARGET,
            inconclusive="pair spread wider than the margin" if noise > 4 * TARGET else None,
        )
    return s


if __name__ == "__main__":
    cli_main(run, __doc__)
