"""The run aggregates on their own: the step-time sketch against exact percentiles, steps out of
order, what has the steps sections, and odd inputs the full read used to skip."""

from __future__ import annotations

import itertools
import math
import random

import pytest

import computewatch.analysis.aggregates as agg_mod
from computewatch.analysis.aggregates import (
    STEP_TIME_RELATIVE_ACCURACY,
    RunAggregates,
    aggregates_from_store,
)
from computewatch.analysis.common import percentile
from computewatch.analysis.summary import build_summary, step_stats, summary_of
from computewatch.readings import labels
from computewatch.store import COMPLETED, Store

T0 = 1_700_000_000.0


def steps_of(durations: list[float], pid: int = 1, t0: float = 100.0) -> list[tuple]:
    out, t = [], t0
    for d in durations:
        t += d
        out.append((pid, t, T0 + t, None, None))
    return out


def timed(steps: list[tuple], start: float | None = None) -> list[float]:
    """The step times the rows give (monotonic differences), sorted."""
    monos = [s[1] for s in steps]
    first = [monos[0] - start] if start is not None else []
    return sorted(first + [b - a for a, b in itertools.pairwise(monos)])


@pytest.mark.parametrize(
    "draw",
    [
        lambda r: r.lognormvariate(-3, 0.5),  # step times around 50 ms
        lambda r: r.choice((0.0, 0.01, 0.02)) + r.expovariate(100),  # zeros among them
        lambda r: 2.0 if r.random() < 0.02 else r.uniform(0.1, 0.11),  # rare stalls
    ],
)
def test_sketch_percentiles_are_within_the_stated_accuracy(
    draw: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(agg_mod, "STEP_TIMES_EXACT", 1000)  # switch to the sketch early
    rng = random.Random(5)
    rows = steps_of([draw(rng) for _ in range(20_000)])  # type: ignore[operator]
    a = RunAggregates()
    a.add_steps(rows)
    f = a.step_figures()
    assert f is not None and a._sketch is not None and a._exact is None
    exact = timed(rows)  # the first step has no known start: untimed
    alpha = STEP_TIME_RELATIVE_ACCURACY
    for got, q in ((f.p50, 0.5), (f.p90, 0.9), (f.p99, 0.99)):
        want = percentile(exact, q)
        assert got is not None and abs(got - want) <= alpha * want + 1e-12, (q, got, want)
    assert f.max == max(exact)
    assert f.mean == pytest.approx(math.fsum(exact) / len(exact), rel=1e-12)
    assert f.steps == 20_000 and f.durations == len(exact)


def test_below_the_limit_percentiles_are_exact() -> None:
    rows = steps_of([0.5, 0.1, 0.3, 0.2, 0.4])
    a = RunAggregates()
    a.add_writers([(1, 100.0, {})])
    a.add_steps(rows)
    f = a.step_figures()
    assert f is not None and a._sketch is None
    d = timed(rows, start=100.0)
    assert (f.p50, f.p90, f.p99, f.max) == (
        percentile(d, 0.5),
        percentile(d, 0.9),
        percentile(d, 0.99),
        d[-1],
    )
    assert f.span == pytest.approx(1.5)


def test_a_writer_start_known_only_at_the_end_times_the_first_step() -> None:
    a = RunAggregates()
    a.add_steps(steps_of([0.5, 0.25]))
    assert a.step_figures().durations == 1  # type: ignore[union-attr]
    a.add_writers([(1, 100.0, {"rank": 0})])  # its metadata came after its first steps
    f = a.step_figures()
    assert f is not None and f.durations == 2 and f.max == 0.5
    assert f.span == pytest.approx(0.75)


def test_steps_out_of_order_are_left_to_the_store(store: Store) -> None:
    rk = store.create_run(
        run_id="unordered000", name=None, tags={}, command=["x"], cwd=None, mode="run",
        started_at=T0, interval_seconds=1.0, host={},
    )  # fmt: skip
    rows = [
        (7, 101.0, T0 + 1, None, None),
        (7, 100.5, T0 + 0.5, None, None),
        (7, 102.0, T0 + 2, None, None),
    ]
    store.write_batch(rk, steps=rows)
    store.update_run(rk, status=COMPLETED, ended_at=T0 + 3)
    a = RunAggregates()
    a.add_steps(rows)  # as they arrived
    assert a.steps_unordered
    run = store.run_by_key(rk)
    assert summary_of(store, run, a)["steps"] == step_stats(store, run)
    assert step_stats(store, run)["step_time_seconds"]["max"] == 1.0  # 100.5 → 101 → 102


def test_what_has_the_steps_sections() -> None:
    a = RunAggregates()
    assert not a.has_steps_sections()
    a.phases = 3
    assert not a.has_steps_sections()  # phases without steps: no phases section
    a.add_steps(steps_of([0.1]))
    assert a.has_steps_sections()
    b = RunAggregates()
    b.add_writers([(1, 0.0, {"rank": 0}), (2, 0.0, {"rank": 0})])
    assert not b.has_steps_sections()  # one rank
    b.add_writers([(2, 0.0, {"rank": 1})])
    assert b.has_steps_sections()
    c = RunAggregates()
    c.requests = 1
    assert c.has_steps_sections()


def test_series_it_does_not_summarise_are_counted_and_skipped() -> None:
    a = RunAggregates()
    a.add_series(0, "process_threads", labels(pid=1))
    a.add_series(1, "host_network_receive_bytes_total", labels(interface="lo"))
    a.add_series(2, "gpu_temperature_celsius", labels(gpu="GPU-x"))
    a.add_series(0, "process_threads", labels(pid=1))  # the store ignores it twice
    a.add_samples([(None, 0, 0, 1.0), (None, 0, 1, 2.0), (None, 0, 2, 3.0)], {})
    assert a.series == 3 and a.wanted() == []
    assert a.last("host_network_receive_bytes_total") is None
    assert a.gpu("GPU-x") is None


def test_the_rebuild_reads_the_store_once_per_series_it_needs(store: Store) -> None:
    rk = store.create_run(
        run_id="rebuild00000", name=None, tags={}, command=["x"], cwd=None, mode="run",
        started_at=T0, interval_seconds=1.0, host={"allowed_cores": 1.0},
    )  # fmt: skip
    store.write_batch(
        rk,
        series=[
            (0, "tree_cpu_seconds_total", (), 1),
            (1, "process_threads", labels(pid=3), 0),
        ],
        ticks=[(i, 10.0 + i, T0 + i) for i in range(4)],
        samples=[(rk, i, s, float(i * (s + 1))) for i in range(4) for s in (0, 1)],
    )
    store.update_run(rk, status=COMPLETED, ended_at=T0 + 4)
    run = store.run_by_key(rk)
    a = aggregates_from_store(store, run)
    assert (a.ticks, a.series, a.wanted()) == (4, 2, [0])
    assert a.cpu_seconds() == 3.0 and a.cpu_window_max() == 1.0
    assert summary_of(store, run, a) == build_summary(store, run)
