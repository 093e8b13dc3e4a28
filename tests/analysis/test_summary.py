"""The run summary, against a run written into a store by hand with hand-computed answers."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest

from computewatch.analysis.retention import collect, expired_runs
from computewatch.analysis.summary import (
    SUMMARY_SCHEMA_VERSION,
    build_summary,
    iso,
    percentile,
    step_stats,
)
from computewatch.readings import Kind, Labels, labels
from computewatch.store import COMPLETED, INTERRUPTED, RunRow, Store

T0 = 1_700_000_000.0  # 2023-11-14T22:13:20Z
MONO0 = 5000.0
MIB = 1024 * 1024

# Seven ticks half a second apart.
TICK_MONO = [MONO0 + 0.5 * i for i in range(7)]
# tree CPU: windows of >= 1 s are [0, 1] s (1.5 CPU-s), [1, 2] s (0.7), [2, 3] s (1.7).
CPU = [0.0, 0.5, 1.5, 2.0, 2.2, 2.4, 3.9]
RSS = [100 * MIB, 250 * MIB, 300 * MIB, 280 * MIB, 200 * MIB, 150 * MIB, 120 * MIB]
PEAK = [100 * MIB, 250 * MIB, 260 * MIB, 260 * MIB, 260 * MIB, 260 * MIB, 260 * MIB]
HOST_USED = [4e9, 5e9, 6.5e9, 6e9, 5.5e9, 5e9, 4.5e9]


def lin(start: float, step: float) -> list[float]:
    return [start + step * i for i in range(7)]


SERIES: list[tuple[str, Labels, Kind, list[float]]] = [
    ("tree_cpu_seconds_total", (), Kind.COUNTER, CPU),
    ("tree_resident_memory_bytes", (), Kind.GAUGE, RSS),
    ("tree_process_peak_resident_memory_bytes", (), Kind.GAUGE, PEAK),
    ("tree_read_bytes_total", (), Kind.COUNTER, lin(0, 1000)),
    ("tree_written_bytes_total", (), Kind.COUNTER, lin(0, 4096)),
    ("host_memory_used_bytes", (), Kind.GAUGE, HOST_USED),
    ("host_memory_total_bytes", (), Kind.GAUGE, [16e9] * 7),
    ("host_disk_read_bytes_total", labels(device="sda"), Kind.COUNTER, lin(1e6, 100)),
    ("host_disk_read_bytes_total", labels(device="nvme0n1"), Kind.COUNTER, lin(5e6, 1000)),
    ("host_disk_written_bytes_total", labels(device="sda"), Kind.COUNTER, lin(2e6, 10)),
    ("host_disk_written_bytes_total", labels(device="nvme0n1"), Kind.COUNTER, lin(7e6, 20)),
    ("host_network_receive_bytes_total", labels(interface="eth0"), Kind.COUNTER, lin(1e8, 50)),
    ("host_network_receive_bytes_total", labels(interface="wlan0"), Kind.COUNTER, lin(3e8, 5)),
    ("host_network_receive_bytes_total", labels(interface="lo"), Kind.COUNTER, lin(9e9, 1e6)),
    ("host_network_transmit_bytes_total", labels(interface="eth0"), Kind.COUNTER, lin(2e8, 7)),
    ("host_network_transmit_bytes_total", labels(interface="lo"), Kind.COUNTER, lin(9e9, 1e6)),
    ("process_cpu_seconds_total", labels(pid=42, name="python"), Kind.COUNTER, CPU),
]


def write_run(
    store: Store,
    run_id: str = "0a0a0a0a0a0a",
    *,
    series: list[tuple[str, Labels, Kind, list[float]]] = SERIES,
    host: dict[str, Any] | None = None,
    ended_at: float | None = T0 + 4.0,
    status: str = COMPLETED,
    steps: list[tuple[int, float, float, float | None, float | None]] = (),  # type: ignore[assignment]
    writers: list[tuple[int, float, dict[str, Any]]] = (),  # type: ignore[assignment]
) -> RunRow:
    rk = store.create_run(
        run_id=run_id,
        name="train",
        tags={"team": "ml"},
        command=["python", "train.py"],
        cwd="/work",
        mode="run",
        started_at=T0,
        interval_seconds=0.5,
        host={"allowed_cores": 2.0, "logical_cpus": 8} if host is None else host,
    )
    store.write_batch(
        rk,
        series=[(i, n, lb, k) for i, (n, lb, k, _) in enumerate(series)],
        ticks=[(seq, m, T0 + 0.25 + (m - MONO0)) for seq, m in enumerate(TICK_MONO)],
        samples=[
            (rk, seq, i, v)
            for i, (_, _, _, vals) in enumerate(series)
            for seq, v in enumerate(vals)
        ],
        steps=steps,
        writers=writers,
        data_until=T0 + 0.25 + 3.0,
    )
    store.update_run(rk, status=status, exit_code=0, ended_at=ended_at, notes=["a note"])
    return store.run_by_key(rk)


def test_every_field_of_a_hand_computed_run(store: Store) -> None:
    run = write_run(store)
    s = build_summary(store, run)
    assert s["schema_version"] == SUMMARY_SCHEMA_VERSION
    assert s["id"] == "0a0a0a0a0a0a"
    assert s["name"] == "train"
    assert s["tags"] == {"team": "ml"}
    assert s["command"] == ["python", "train.py"]
    assert s["cwd"] == "/work"
    assert s["exit_code"] == 0
    assert s["status"] == COMPLETED
    assert s["started_at"] == "2023-11-14T22:13:20.000Z"
    assert s["ended_at"] == "2023-11-14T22:13:24.000Z"
    assert s["duration_seconds"] == 4.0
    assert s["host"] == {"allowed_cores": 2.0, "logical_cpus": 8}
    assert s["cpu"] == {
        "seconds_total": 3.9,
        "utilization_mean": pytest.approx(3.9 / 4.0 / 2.0),  # 0.4875
        "utilization_max": pytest.approx(1.7 / 2.0),  # the [2, 3] s window
        "allowed_cores": 2.0,
        "method": "process tree",
    }
    assert s["memory"] == {
        "peak_rss_bytes": 300 * MIB,  # the tree's summed RSS peak beats any one process's HWM
        "peak_host_used_bytes": int(6.5e9),
        "host_total_bytes": int(16e9),
    }
    assert s["disk"] == {
        "read_bytes": 6000,
        "write_bytes": 6 * 4096,
        "host_read_bytes": 6 * 100 + 6 * 1000,
        "host_write_bytes": 6 * 10 + 6 * 20,
    }
    assert s["network"] == {  # lo excluded
        "recv_bytes": 6 * 50 + 6 * 5,
        "sent_bytes": 6 * 7,
        "scope": "host",
    }
    assert s["gpus"] == []
    assert s["steps"] == {"count": 0}
    assert s["samples"] == {
        "count": 7,
        "interval_seconds": 0.5,
        "series": len(SERIES),
        "data_until": "2023-11-14T22:13:23.250Z",
    }
    assert s["notes"] == ["a note"]


def test_process_peak_wins_when_higher_than_the_tree_sum(store: Store) -> None:
    series = [x for x in SERIES if x[0] != "tree_process_peak_resident_memory_bytes"]
    series.append(("tree_process_peak_resident_memory_bytes", (), Kind.GAUGE, [512.0 * MIB] * 7))
    s = build_summary(store, write_run(store, series=series))
    assert s["memory"]["peak_rss_bytes"] == 512 * MIB


def test_a_run_with_no_samples(store: Store) -> None:
    s = build_summary(store, write_run(store, series=[], host={}))
    assert s["cpu"] == {
        "seconds_total": None,
        "utilization_mean": None,
        "utilization_max": None,
        "allowed_cores": 1.0,  # neither allowed_cores nor logical_cpus: 1
        "method": None,
    }
    assert s["memory"] == {
        "peak_rss_bytes": None,
        "peak_host_used_bytes": None,
        "host_total_bytes": None,
    }
    assert s["disk"] == {
        "read_bytes": None,
        "write_bytes": None,
        "host_read_bytes": None,
        "host_write_bytes": None,
    }
    assert s["network"]["recv_bytes"] is None
    assert s["samples"]["count"] == 7
    assert s["samples"]["series"] == 0


def test_logical_cpus_when_allowed_cores_missing(store: Store) -> None:
    s = build_summary(store, write_run(store, host={"logical_cpus": 4}))
    assert s["cpu"]["allowed_cores"] == 4.0
    assert s["cpu"]["utilization_mean"] == pytest.approx(3.9 / 4.0 / 4.0, abs=5e-5)  # 4 places
    assert s["cpu"]["utilization_max"] == pytest.approx(1.7 / 4.0)


def test_a_run_shorter_than_one_window(store: Store) -> None:
    series = [("tree_cpu_seconds_total", (), Kind.COUNTER, CPU)]
    rk = store.create_run(
        run_id="b0b0",
        name=None,
        tags={},
        command=[],
        cwd=None,
        mode="run",
        started_at=T0,
        interval_seconds=0.1,
        host={"allowed_cores": 1.0},
    )
    ticks = [(i, MONO0 + 0.1 * i, T0 + 0.1 * i) for i in range(3)]
    store.write_batch(
        rk,
        series=[(0, *series[0][:3])],
        ticks=ticks,
        samples=[(rk, i, 0, v) for i, v in enumerate([0.0, 0.05, 0.15])],
    )
    store.update_run(rk, status=COMPLETED, ended_at=T0 + 0.25)
    s = build_summary(store, store.run_by_key(rk))
    assert s["cpu"]["utilization_max"] == pytest.approx(0.75)  # 0.15 CPU-s over 0.2 s
    assert s["cpu"]["utilization_mean"] == pytest.approx(0.6)  # 0.15 / 0.25 s


def test_an_interrupted_run_ends_at_its_data(store: Store) -> None:
    run = write_run(store, ended_at=None, status=INTERRUPTED)
    s = build_summary(store, run)
    assert s["ended_at"] is None
    assert s["duration_seconds"] == 3.25  # data_until - started_at
    assert s["cpu"]["utilization_mean"] == pytest.approx(3.9 / 3.25 / 2.0, abs=1e-4)


def test_a_collected_run_returns_its_stored_summary(store: Store) -> None:
    run = write_run(store)
    before = build_summary(store, run)
    assert [r.id for r in expired_runs(store, T0 + 10)] == [run.id]
    assert [r.id for r in collect(store, T0 + 10)] == [run.id]
    gone = store.run_by_key(run.key)
    assert gone.samples_deleted_at is not None
    assert store.ticks(run.key) == []
    assert build_summary(store, gone) == before
    assert expired_runs(store, T0 + 10) == []


# -- steps --------------------------------------------------------------------------------------
# Two writer processes: pid 11 starts at 100.0, pid 22 at 100.2.
STEPS = [
    (11, 100.5, T0 + 0.5, 32.0, None),
    (11, 101.0, T0 + 1.0, 32.0, None),
    (11, 101.6, T0 + 1.6, 32.0, None),
    (22, 100.6, T0 + 0.6, 32.0, 1000.0),
    (22, 101.4, T0 + 1.4, 32.0, 1000.0),
]
WRITERS = [(11, 100.0, {"name": "rank0"}), (22, 100.2, {"name": "rank1"})]
DURATIONS = [0.5, 0.5, 0.6, 0.4, 0.8]  # each writer from its own start


def test_step_stats_over_two_writers(store: Store) -> None:
    run = write_run(store, steps=STEPS, writers=WRITERS)
    st = step_stats(store, run)
    span = 101.6 - 100.0  # first writer start to last step
    d = sorted(DURATIONS)  # 0.4 0.5 0.5 0.6 0.8
    assert st == {
        "count": 5,
        "processes": 2,
        "step_time_seconds": {
            "mean": pytest.approx(2.8 / 5),
            "p50": pytest.approx(0.5),
            "p90": pytest.approx(0.6 + (0.8 - 0.6) * 0.6),  # pos 3.6
            "p99": pytest.approx(0.6 + (0.8 - 0.6) * 0.96),  # pos 3.96
            "max": pytest.approx(0.8),
        },
        "steps_per_second": pytest.approx(5 / span),
        "samples_total": 160.0,
        "samples_per_second": pytest.approx(160 / span),
        "tokens_total": 2000.0,
        "tokens_per_second": pytest.approx(2000 / span),
    }
    np = pytest.importorskip("numpy")
    for q, key in ((50, "p50"), (90, "p90"), (99, "p99")):
        assert st["step_time_seconds"][key] == pytest.approx(
            float(np.percentile(d, q, method="linear")), abs=1e-6
        )
    assert build_summary(store, run)["steps"] == st


def test_steps_without_writer_rows_skip_the_first_duration(store: Store) -> None:
    run = write_run(store, steps=STEPS, writers=[])
    st = step_stats(store, run)
    assert st["count"] == 5
    # Known durations only: 11: 0.5, 0.6; 22: 0.8. The span starts at the first step.
    assert st["step_time_seconds"]["mean"] == pytest.approx((0.5 + 0.6 + 0.8) / 3)
    assert st["step_time_seconds"]["max"] == pytest.approx(0.8)
    assert st["steps_per_second"] == pytest.approx(5 / (101.6 - 100.5), abs=1e-4)
    assert "tokens_total" in st and "samples_total" in st


@pytest.mark.parametrize("missing", [11, 22])
def test_span_does_not_depend_on_which_writer_lacks_a_start(store: Store, missing: int) -> None:
    # One writer's metadata never arrived: the span starts at the earliest time known, the other
    # writer's start (100.0 or 100.2) or the first step of the one without (100.5 or 100.6).
    writers = [w for w in WRITERS if w[0] != missing]
    run = write_run(store, steps=STEPS, writers=writers)
    first = min([w[1] for w in writers] + [s[1] for s in STEPS if s[0] == missing])
    st = step_stats(store, run)
    assert st["steps_per_second"] == pytest.approx(5 / (101.6 - first), abs=1e-4)


def test_a_single_step(store: Store) -> None:
    run = write_run(store, steps=[(11, 100.5, T0, None, None)], writers=[(11, 100.0, {})])
    assert step_stats(store, run) == {
        "count": 1,
        "processes": 1,
        "step_time_seconds": {"mean": 0.5, "p50": 0.5, "p90": 0.5, "p99": 0.5, "max": 0.5},
        "steps_per_second": 2.0,
    }
    run2 = write_run(store, "0b0b", steps=[(11, 100.5, T0, None, None)], writers=[])
    assert step_stats(store, run2) == {"count": 1, "processes": 1, "steps_per_second": None}


# -- helpers ------------------------------------------------------------------------------------
def test_percentile_edge_cases() -> None:
    assert math.isnan(percentile([], 0.5))
    assert percentile([7.0], 0.0) == 7.0
    assert percentile([7.0], 0.99) == 7.0
    assert percentile([1.0, 2.0], 0.0) == 1.0
    assert percentile([1.0, 2.0], 1.0) == 2.0
    assert percentile([1.0, 2.0], 0.5) == 1.5
    assert percentile([1.0, 2.0, 3.0, 4.0], 0.25) == 1.75
    assert percentile([0.0, 10.0, 20.0], 0.9) == pytest.approx(18.0)


def test_percentile_matches_numpy_linear() -> None:
    np = pytest.importorskip("numpy")
    rng = random.Random(1234)
    for n in (1, 2, 3, 10, 101):
        values = sorted(rng.uniform(0, 5) for _ in range(n))
        for q in (0.0, 0.01, 0.25, 0.5, 0.9, 0.99, 1.0):
            assert percentile(values, q) == pytest.approx(
                float(np.percentile(values, q * 100, method="linear")), rel=1e-12, abs=1e-12
            )


def test_iso() -> None:
    assert iso(None) is None
    assert iso(0.0) == "1970-01-01T00:00:00.000Z"
    assert iso(T0) == "2023-11-14T22:13:20.000Z"
    assert iso(T0 + 0.25) == "2023-11-14T22:13:20.250Z"
    assert iso(T0 + 0.9999) == "2023-11-14T22:13:20.999Z"  # truncated to milliseconds
