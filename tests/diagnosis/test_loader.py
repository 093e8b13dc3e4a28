"""What the rules get from the store: a long run thinned to every Nth tick, read at a cost that
does not grow with the run; step times computed once."""

from __future__ import annotations

import pytest

import computewatch.diagnosis.loader as loader
from computewatch.diagnosis.loader import RunData
from computewatch.readings import Kind, labels
from computewatch.store import COMPLETED, RunRow, Store

T0 = 1_700_000_000.0
MONO0 = 500.0


def long_run(store: Store, ticks: int, run_id: str) -> RunRow:
    """``ticks`` ticks at 1 s of two GPU series and one host series, a step per tick."""
    rk = store.create_run(
        run_id=run_id, name=None, tags={}, command=["x"], cwd=None, mode="run",
        started_at=T0, interval_seconds=1.0, host={"allowed_cores": 1.0},
    )  # fmt: skip
    series = [
        (0, "gpu_utilization_ratio", labels(gpu="GPU-a"), Kind.GAUGE),
        (1, "gpu_power_watts", labels(gpu="GPU-a"), Kind.GAUGE),
        (2, "host_cpu_seconds_total", labels(mode="user"), Kind.COUNTER),
        (3, "process_threads", labels(pid=1), Kind.GAUGE),  # not read by the rules
    ]
    for first in range(0, ticks, 1000):
        seqs = range(first, min(first + 1000, ticks))
        store.write_batch(
            rk,
            series=series if first == 0 else (),
            ticks=[(q, MONO0 + q, T0 + 0.5 + q) for q in seqs],
            samples=[(rk, q, i, float(q % 97 + i)) for q in seqs for i in range(4)],
            steps=[(7, MONO0 + q + 0.5, T0 + q + 1.0, None, None) for q in seqs],
        )
    store.update_run(rk, status=COMPLETED, ended_at=T0 + ticks, data_until=T0 + ticks)
    return store.run_by_key(rk)


def test_a_long_run_is_thinned_to_every_nth_tick_and_its_last(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(loader, "MAX_POINTS", 100)
    run = long_run(store, 1_050, "long00000000")
    data = RunData.load(store, run, {"duration_seconds": 1050.0})
    stride = 11  # 1050 ticks / 100 points, rounded up
    util = data.of("gpu_utilization_ratio")[0].points
    assert util == [(MONO0 + q, float(q % 97)) for q in range(0, 1050, stride)]
    assert set(data.series) == {
        "gpu_utilization_ratio",
        "gpu_power_watts",
        "host_cpu_seconds_total",
    }
    assert data.ticks == [MONO0 + q for q in range(0, 1050, stride)] + [MONO0 + 1049]
    assert data.start_mono == pytest.approx(MONO0 - 0.5)  # from the first tick's two clocks
    assert len(data.steps) == 1050  # steps are not thinned
    assert data.step_times() is data.step_times()


def test_many_series_share_one_budget_of_points(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(loader, "MAX_LOADED_POINTS", 300)  # 3 series: 100 points each
    run = long_run(store, 1_000, "many00000000")
    data = RunData.load(store, run, {"duration_seconds": 1000.0})
    assert [len(s.points) for ss in data.series.values() for s in ss] == [100, 100, 100]


def _vm_steps(store: Store, run: RunRow) -> int:
    """SQLite virtual-machine steps (in thousands) taken by loading ``run``."""
    steps = [0]

    def count() -> int:
        steps[0] += 1
        return 0

    store.conn.set_progress_handler(count, 1000)
    try:
        RunData.load(store, run, {"duration_seconds": 1.0})
    finally:
        store.conn.set_progress_handler(None, 1000)
    return steps[0]


def test_reading_the_samples_costs_the_kept_points_not_the_run(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Without steps (which the rules read whole), a run 10x longer thinned to the same number
    # of points costs about the same SQLite work; a full scan would cost 10x.
    monkeypatch.setattr(loader, "MAX_POINTS", 200)
    short = long_run(store, 2_000, "short0000000")
    long = long_run(store, 20_000, "long11111111")
    for run in (short, long):
        store.conn.execute("DELETE FROM steps WHERE run_key=?", (run.key,))
    a, b = _vm_steps(store, short), _vm_steps(store, long)
    assert b < 2 * a, (a, b)
