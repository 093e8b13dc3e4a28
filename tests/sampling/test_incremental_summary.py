"""The summary the sampler keeps as it goes equals the one rebuilt from the stored samples.

The sampler runs over scripted readings (host, process tree, two GPUs shared with other
processes, an energy counter that gives way to polling, throttle masks, processes that come and
go), scripted steps, phases and requests from a fake spool, on a fake clock with uneven ticks;
the store fails for a while and some pending samples are dropped. At the end, the summary from
the sampler's aggregates (what ``finish_run`` uses) must equal ``build_summary`` over the store:
exactly, every field, quantiles included (both come from the same sketch). Both are also
checked against the summary's definition, computed here the plain way from the stored samples
(the full read the end of a run used to do). Then the sketch's quantiles of a long run are
checked against exact percentiles of the stored step times.
"""

from __future__ import annotations

import itertools
import math
import random
import sqlite3
from collections.abc import Callable, Sequence
from typing import Any

import pytest

import computewatch.sampling.sampler as sampler_mod
from computewatch.analysis.aggregates import STEP_TIME_RELATIVE_ACCURACY, STEP_TIMES_EXACT
from computewatch.analysis.common import percentile
from computewatch.analysis.summary import build_summary, summary_of
from computewatch.readings import Reading, counter, gauge, labels
from computewatch.sampling.channel import Event, PhaseRecord, RequestRecord, StepRecord
from computewatch.sampling.lifecycle import finish_run
from computewatch.sampling.sampler import Sampler
from computewatch.sources.nvidia import decode_clock_events
from computewatch.store import COMPLETED, RunRow, Store

T0 = 1_700_000_000.0
A, B = "GPU-aaaaaaaa", "GPU-bbbbbbbb"


class Clock:
    """A monotonic clock the test moves: uneven steps, some shorter than the 1 s CPU window."""

    def __init__(self, rng: random.Random) -> None:
        self.t = 5000.0
        self.rng = rng

    def __call__(self) -> float:
        return self.t

    def advance(self) -> None:
        self.t += self.rng.choice((0.25, 0.5, 1.0, 1.5, 3.0))


class Scripted:
    """A source whose readings are a function of the tick number."""

    def __init__(self, name: str, fn: Callable[[int], Sequence[Reading]]) -> None:
        self.name = name
        self.fn = fn
        self.n = 0

    def read(self) -> Sequence[Reading]:
        out = self.fn(self.n)
        self.n += 1
        return out

    def close(self) -> None:
        pass


class FakeSpool:
    """What ``SpoolReader`` gives the sampler: events and writers' metadata, per poll."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.metas: list[tuple[int, dict[str, Any]]] = []

    def poll(self) -> list[Event]:
        out, self.events = self.events, []
        return out

    def new_metas(self) -> list[tuple[int, dict[str, Any]]]:
        out, self.metas = self.metas, []
        return out


def host_source(rng: random.Random) -> Callable[[int], Sequence[Reading]]:
    state = {"cpu": 0.0, "read": 0.0, "disk": 1e9, "net": 5e8, "lo": 7e9}

    def fn(n: int) -> Sequence[Reading]:
        state["cpu"] += rng.uniform(0.0, 2.0)
        state["read"] += rng.choice((0.0, 4096.0, 1e6))
        state["disk"] += rng.uniform(0, 1e7)
        state["net"] += rng.uniform(0, 1e5)
        state["lo"] += 1e6
        out = [
            counter("tree_cpu_seconds_total", state["cpu"]),
            gauge("tree_resident_memory_bytes", rng.uniform(1e8, 9e8)),
            gauge("tree_process_peak_resident_memory_bytes", 5e8 + n * 1e6),
            counter("tree_read_bytes_total", state["read"]),
            counter("tree_written_bytes_total", 512.0 * n),
            gauge("host_memory_used_bytes", rng.uniform(4e9, 8e9)),
            gauge("host_memory_total_bytes", 16e9),
            counter("host_disk_read_bytes_total", state["disk"], labels(device="sda")),
            counter("host_disk_written_bytes_total", state["disk"] / 3, labels(device="sda")),
            counter("host_network_receive_bytes_total", state["net"], labels(interface="eth0")),
            counter("host_network_receive_bytes_total", state["lo"], labels(interface="lo")),
            counter(
                "host_network_transmit_bytes_total", state["net"] / 2, labels(interface="eth0")
            ),
            gauge("process_threads", 4.0, labels(pid=42, name="python")),  # not summarised
        ]
        if n >= 5:  # a second disk appears later (a series registered mid-run)
            out.append(counter("host_disk_read_bytes_total", 1e6 * n, labels(device="nvme0n1")))
        return out

    return fn


def gpu_source(rng: random.Random) -> Callable[[int], Sequence[Reading]]:
    energy = {A: 1e5, B: 3e5}

    def fn(n: int) -> Sequence[Reading]:
        out: list[Reading] = []
        for uuid in (A, B):
            g = labels(gpu=uuid)
            util = rng.choice((0.0, 0.3, 0.97, 1.0))
            out += [
                gauge("gpu_utilization_ratio", util, g),
                gauge("gpu_power_watts", 80 + 600 * util * rng.random(), g),
                gauge("gpu_sm_active_ratio", util * 0.8, g),
                gauge("gpu_memory_used_bytes", rng.uniform(1e9, 7e10), g),
                gauge("gpu_memory_total_bytes", 8e10, g),
                gauge("gpu_clock_event_reasons", float(rng.choice((0x1, 0x4, 0x4 | 0x40, 0))), g),
                gauge("gpu_temperature_celsius", 60.0, g),  # not summarised
            ]
            energy[uuid] += rng.uniform(10, 700)
            # GPU B's counter stops answering at tick 20: polled energy goes on from there.
            method = "polled" if uuid == B and n >= 20 else "counter"
            out.append(
                counter("gpu_energy_joules_total", energy[uuid], labels(gpu=uuid, method=method))
            )
            for pid in (101, 102, 103):
                if (pid == 102 and n % 7 < 3) or (pid == 103 and n < 10):
                    continue  # processes come and go
                lb = labels(gpu=uuid, pid=pid)
                out.append(gauge("gpu_process_memory_used_bytes", rng.uniform(1e8, 1e10), lb))
                if uuid == A:
                    out.append(gauge("gpu_process_sm_utilization_ratio", rng.random() / 3, lb))
            others = 0 if uuid == A and n < 15 else rng.choice((1, 2))
            out.append(gauge("gpu_other_processes", float(others), g))
            if others:
                out += [
                    gauge("gpu_other_processes_sm_utilization_ratio", rng.random() / 2, g),
                    gauge("gpu_other_processes_memory_used_bytes", rng.uniform(1e9, 2e10), g),
                ]
        rng.shuffle(out)  # order within a tick must not matter
        return out

    return fn


def scripted_run(
    store: Store, *, ticks: int, steps_per_tick: int, seed: int = 7, fail_store: bool = True
) -> tuple[Sampler, int]:
    rng = random.Random(seed)
    clock = Clock(rng)
    rk = store.create_run(
        run_id=f"incr{seed:08d}",
        name="scripted",
        tags={},
        command=["python", "train.py"],
        cwd="/work",
        mode="run",
        started_at=T0,
        interval_seconds=1.0,
        host={},
    )
    spool = FakeSpool()
    sampler = Sampler(
        store,
        rk,
        [Scripted("host", host_source(rng)), Scripted("gpu", gpu_source(rng))],
        interval=1.0,
        spool=spool,  # type: ignore[arg-type]
        flush_seconds=2.0,
        clock=clock,
    )
    last = {11: clock(), 22: clock(), 33: clock()}
    spool.metas.append((11, {"name": "r0", "rank": 0, "started_mono": clock() - 2.0}))
    real_write = store.write_batch
    failing = {"on": False}

    def write(*a: Any, **kw: Any) -> None:
        if failing["on"]:
            raise sqlite3.OperationalError("disk I/O error")
        real_write(*a, **kw)

    store.write_batch = write  # type: ignore[method-assign]
    for n in range(ticks):
        if fail_store:
            failing["on"] = ticks // 3 <= n < ticks // 2
        for pid in (11, 22, 33) if n < ticks - 3 else (11,):
            for _ in range(rng.randint(0, steps_per_tick)):
                last[pid] += rng.expovariate(1 / 0.05) * (3 if pid == 33 else 1)
                spool.events.append(
                    StepRecord(pid, last[pid], 32.0, rng.choice((None, 4096.0)), None)
                )
                if pid == 22 and rng.random() < 0.3:
                    spool.events.append(PhaseRecord(pid, "data", last[pid] - 0.01, last[pid]))
        if n == 4:  # pid 22's writer metadata comes after its first steps
            spool.metas.append((22, {"name": "r1", "rank": 1, "started_mono": 4990.0}))
        if n == 9:
            spool.events.append(RequestRecord(33, "generate", clock() - 0.2, clock(), 12, 80, True))
        sampler.tick()
        clock.advance()
    failing["on"] = False
    sampler.final_tick()
    assert sampler.flush()
    gpus = [
        {"uuid": A, "index": 0, "name": "NVIDIA H100 80GB HBM3"},
        {"uuid": B, "index": 1, "name": "NVIDIA H100 80GB HBM3"},
    ]
    store.update_run(
        rk,
        status=COMPLETED,
        exit_code=0,
        ended_at=T0 + (clock() - 5000.0),
        host={"allowed_cores": 4.0, "logical_cpus": 8, "gpus": gpus, "gpus_used": [A, B]},
    )
    return sampler, rk


# -- the definition, the plain way --------------------------------------------------------------
def reference(store: Store, run: RunRow) -> dict[str, Any]:
    """The cpu, memory, disk, network, samples, gpus and steps sections from every stored
    sample and step (the algorithm of the full read, written out again)."""
    ticks = store.ticks(run.key)
    mono = {seq: m for seq, m, _ in ticks}
    series = store.series(run.key)
    pts = {s.idx: store.points(run.key, s.idx) for s in series}
    tree = {
        "tree_cpu_seconds_total", "tree_resident_memory_bytes", "host_memory_used_bytes",
        "tree_process_peak_resident_memory_bytes", "tree_read_bytes_total",
        "tree_written_bytes_total", "host_memory_total_bytes",
    }  # fmt: skip
    named: dict[str, list[list[tuple[int, float]]]] = {}
    for s in series:
        host_sum = s.name.startswith(("host_disk_", "host_network_")) and s.name.endswith("_total")
        if s.name in tree or (host_sum and s.labels.get("interface") != "lo"):
            named.setdefault(s.name, []).append(pts[s.idx])

    def last(n: str) -> float | None:
        return sum(p[-1][1] for p in named[n] if p) if n in named else None

    def delta(n: str) -> float | None:
        return sum(p[-1][1] - p[0][1] for p in named[n] if p) if n in named else None

    def peak(n: str) -> float | None:
        return max(v for _, v in named[n][0]) if named.get(n) and named[n][0] else None

    duration = run.ended_at - run.started_at
    allowed = run.host["allowed_cores"]
    cpu = named["tree_cpu_seconds_total"][0]
    best = None
    t0, v0 = mono[cpu[0][0]], cpu[0][1]
    for seq, v in cpu[1:]:
        if mono[seq] - t0 >= 1.0:
            r = (v - v0) / (mono[seq] - t0)
            best = r if best is None else max(best, r)
            t0, v0 = mono[seq], v
    best = max(best, cpu[-1][1] / duration)
    out: dict[str, Any] = {
        "cpu": {
            "seconds_total": round(cpu[-1][1], 4),
            "utilization_mean": round(cpu[-1][1] / duration / allowed, 4),
            "utilization_max": round(best / allowed, 4),
            "allowed_cores": allowed,
        },
        "memory": {
            "peak_rss_bytes": int(
                max(
                    peak("tree_resident_memory_bytes"),
                    last("tree_process_peak_resident_memory_bytes"),
                )
            ),
            "peak_host_used_bytes": int(peak("host_memory_used_bytes")),
            "host_total_bytes": int(last("host_memory_total_bytes")),
        },
        "disk": {
            "read_bytes": int(last("tree_read_bytes_total")),
            "write_bytes": int(last("tree_written_bytes_total")),
            "host_read_bytes": int(delta("host_disk_read_bytes_total")),
            "host_write_bytes": int(delta("host_disk_written_bytes_total")),
        },
        "network": {
            "recv_bytes": int(delta("host_network_receive_bytes_total")),
            "sent_bytes": int(delta("host_network_transmit_bytes_total")),
            "scope": "host",
        },
        "samples": {"count": len(ticks), "series": len(series)},
        "gpus": [],
    }
    means = {
        "gpu_utilization_ratio": "utilization_mean", "gpu_power_watts": "power_mean_watts",
        "gpu_sm_active_ratio": "sm_active_mean",
    }  # fmt: skip
    for d in run.host["gpus"]:
        mine = [s for s in series if s.labels.get("gpu") == d["uuid"]]
        g: dict[str, Any] = {}
        proc_mem: dict[int, float] = {}
        proc_sm: dict[int, float] = {}
        other: dict[str, dict[int, float]] = {}
        throttle: dict[str, float] = {}
        for s in mine:
            p, values = pts[s.idx], [v for _, v in pts[s.idx]]
            if s.name in means:
                g[means[s.name]] = round(sum(values) / len(values), 4)
            elif s.name == "gpu_memory_used_bytes":
                g["memory_peak_bytes"] = int(max(values))
            elif s.name == "gpu_memory_total_bytes":
                g["memory_total_bytes"] = int(values[-1])
            elif s.name == "gpu_energy_joules_total":
                g["energy_joules"] = round(g.get("energy_joules", 0.0) + values[-1] - values[0], 3)
                if g.get("energy_method") in (None, "counter"):
                    g["energy_method"] = s.labels["method"]
            elif s.name == "gpu_process_memory_used_bytes":
                for seq, v in p:
                    proc_mem[seq] = proc_mem.get(seq, 0.0) + v
            elif s.name == "gpu_process_sm_utilization_ratio":
                for seq, v in p:
                    proc_sm[seq] = proc_sm.get(seq, 0.0) + v
            elif s.name.startswith("gpu_other_processes"):
                other[s.name] = dict(p)
            elif s.name == "gpu_clock_event_reasons":
                for (seq, mask), (nseq, _) in itertools.pairwise(p):
                    for reason in decode_clock_events(mask):
                        if reason not in ("gpu_idle", "applications_clocks_setting"):
                            throttle[reason] = throttle.get(reason, 0.0) + mono[nseq] - mono[seq]
        g["throttle_seconds"] = {k: round(v, 3) for k, v in sorted(throttle.items())}
        g["process_memory_peak_bytes"] = int(max(proc_mem.values()))
        o_sm = other.get("gpu_other_processes_sm_utilization_ratio", {})
        o_mem = other.get("gpu_other_processes_memory_used_bytes", {})
        ours, theirs = sum(proc_sm.values()), sum(o_sm.get(q, 0.0) for q in proc_sm)
        if ours + theirs <= 0:
            ours, theirs = sum(proc_mem.values()), sum(o_mem.get(q, 0.0) for q in proc_mem)
        g["share"] = round(ours / (ours + theirs), 4)
        out["gpus"].append(g)
    writers = store.writers(run.key)
    steps = store.steps(run.key)
    durations, first, last_t = [], math.inf, -math.inf
    samples_total = tokens_total = 0.0
    for pid in sorted({s.pid for s in steps}):
        monos = [s.mono for s in steps if s.pid == pid]
        start = writers.get(pid, (None, {}))[0]
        prev = start if start is not None and start <= monos[0] else None
        first = min(first, monos[0] if prev is None else prev)
        last_t = max(last_t, monos[-1])
        for m in monos:
            if prev is not None:
                durations.append(m - prev)
            prev = m
    for s in steps:
        samples_total += s.samples or 0.0
        tokens_total += s.tokens or 0.0
    durations.sort()
    span = last_t - first
    out["steps"] = {
        "count": len(steps),
        "processes": len({s.pid for s in steps}),
        "step_time_seconds": {
            "mean": round(math.fsum(durations) / len(durations), 6),
            **{f"p{q}": round(percentile(durations, q / 100), 6) for q in (50, 90, 99)},
            "max": round(durations[-1], 6),
        },
        "steps_per_second": round(len(steps) / span, 4),
        "samples_total": samples_total,
        "samples_per_second": round(samples_total / span, 4),
        "tokens_total": tokens_total,
        "tokens_per_second": round(tokens_total / span, 4),
    }
    return out


def agrees(summary: Any, ref: Any, path: str = "") -> None:
    """Every field of ``ref`` is in ``summary`` with the same value (floats to 1e-9: the
    plain way adds in another order)."""
    if isinstance(ref, dict):
        for k, v in ref.items():
            agrees(summary[k], v, f"{path}.{k}")
    elif isinstance(ref, list):
        assert len(summary) == len(ref), path
        for i, (a, b) in enumerate(zip(summary, ref, strict=True)):
            agrees(a, b, f"{path}[{i}]")
    elif isinstance(ref, float):
        assert summary == pytest.approx(ref, rel=1e-9, abs=1e-9), path
    else:
        assert summary == ref, path


# -- the tests ------------------------------------------------------------------------------------
def test_the_sampler_summary_equals_the_one_rebuilt_from_the_store(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sampler_mod, "MAX_PENDING_ROWS", 300)  # drop samples while it fails
    sampler, rk = scripted_run(store, ticks=60, steps_per_tick=4)
    assert any("oldest pending samples were dropped" in n for n in sampler.notes)
    agg = sampler.aggregates
    assert agg is not None and agg.complete and not agg.steps_unordered
    run = store.run_by_key(rk)
    incremental = summary_of(store, run, agg)
    rebuilt = build_summary(store, run)
    assert incremental == rebuilt
    agrees(incremental, reference(store, run))
    # The run has what each part of the summary reads, so the comparison covers them all.
    assert rebuilt["samples"]["count"] == 61 == len(store.ticks(rk))
    assert rebuilt["steps"]["count"] == len(store.steps(rk)) > 100
    assert rebuilt["steps"]["processes"] == 3
    assert rebuilt["phases"] is not None and rebuilt["ranks"] is not None
    assert rebuilt["requests"] is not None and rebuilt["requests"]["count"] == 1
    a, b = rebuilt["gpus"]
    assert a["energy_method"] == "counter" and b["energy_method"] == "polled"
    assert a["throttle_seconds"] and a["process_memory_peak_bytes"]
    assert a["share_rule"].startswith("shared with other processes: its share of SM use")
    assert b["share_rule"].startswith("shared with other processes: its share of memory")
    assert rebuilt["network"]["recv_bytes"] is not None


def test_without_gpus_phases_or_requests_the_two_agree_too(store: Store) -> None:
    def host_only(n: int) -> Sequence[Reading]:
        return [counter("tree_cpu_seconds_total", 0.1 * n), gauge("host_memory_used_bytes", 1e9)]

    rk = store.create_run(
        run_id="cpuonly00000", name=None, tags={}, command=["x"], cwd=None, mode="run",
        started_at=T0, interval_seconds=1.0, host={"allowed_cores": 1.0},
    )  # fmt: skip
    clock = Clock(random.Random(3))
    s = Sampler(store, rk, [Scripted("h", host_only)], interval=1.0, clock=clock)
    for _ in range(5):
        s.tick()
        clock.advance()
    assert s.flush()
    store.update_run(rk, status=COMPLETED, ended_at=T0 + 10.0)
    run = store.run_by_key(rk)
    assert s.aggregates is not None
    assert summary_of(store, run, s.aggregates) == build_summary(store, run)
    assert build_summary(store, run)["gpus"] == [] and build_summary(store, run)["phases"] is None


def test_a_series_repeated_within_a_tick_leaves_the_summary_to_the_store(store: Store) -> None:
    # The store keeps the last of the two values; the aggregates say they cannot tell.
    rk = store.create_run(
        run_id="dup000000000", name=None, tags={}, command=["x"], cwd=None, mode="run",
        started_at=T0, interval_seconds=1.0, host={},
    )  # fmt: skip
    s = Sampler(
        store, rk, [Scripted("d", lambda n: [gauge("host_memory_used_bytes", n)] * 2)], interval=1.0
    )
    s.tick()
    assert s.flush()
    assert s.aggregates is not None and not s.aggregates.complete


def test_an_error_in_the_aggregates_leaves_the_summary_to_the_store(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*a: Any, **kw: Any) -> None:
        raise ZeroDivisionError("float division by zero")

    sampler, rk = scripted_run(store, ticks=6, steps_per_tick=2, fail_store=False)
    monkeypatch.setattr(sampler.aggregates, "add_samples", broken)
    sampler.tick()
    assert sampler.flush()  # sampling and storing go on
    assert sampler.aggregates is None
    assert sampler.notes[-1] == (
        "the summary is computed from the stored samples (ZeroDivisionError: float division by "
        "zero)"
    )
    outcome = finish_run(store, sampler, rk, COMPLETED, 0, [], None)
    assert outcome.summary is not None
    rebuilt = build_summary(store, store.run_by_key(rk))
    keys = ("cpu", "memory", "disk", "network", "gpus", "steps", "samples", "phases", "ranks")
    assert {k: outcome.summary[k] for k in keys} == {k: rebuilt[k] for k in keys}


def test_long_run_step_times_come_from_the_sketch_within_its_accuracy(store: Store) -> None:
    sampler, rk = scripted_run(
        store, ticks=40, steps_per_tick=STEP_TIMES_EXACT // 40, seed=11, fail_store=False
    )
    agg = sampler.aggregates
    assert agg is not None
    run = store.run_by_key(rk)
    incremental = summary_of(store, run, agg)
    assert incremental == build_summary(store, run)
    st = incremental["steps"]["step_time_seconds"]
    # Exact step times from the stored steps, each process's first timed from its start.
    writers = store.writers(rk)
    by_pid: dict[int, list[float]] = {}
    for s in store.steps(rk):
        by_pid.setdefault(s.pid, []).append(s.mono)
    durations: list[float] = []
    for pid, monos in by_pid.items():
        start = writers.get(pid, (None, {}))[0]
        prev = start if start is not None and start <= monos[0] else None
        for m in monos:
            if prev is not None:
                durations.append(m - prev)
            prev = m
    assert len(durations) > STEP_TIMES_EXACT  # the sketch, not the exact list
    durations.sort()
    alpha = STEP_TIME_RELATIVE_ACCURACY
    for key, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99)):
        exact = percentile(durations, q)
        assert abs(st[key] - exact) <= alpha * exact + 1e-6, (key, st[key], exact)
    assert st["max"] == pytest.approx(durations[-1], abs=1e-6)
    assert st["mean"] == pytest.approx(math.fsum(durations) / len(durations), abs=1e-6)
