"""compare() of two summaries, and the CSV / JSON Lines / Parquet exports of a stored run."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

import pytest

from computewatch.analysis.compare import COMPARED, compare, lookup
from computewatch.analysis.export import COLUMNS, iter_rows, write_csv, write_jsonl, write_parquet
from computewatch.readings import Kind, labels
from computewatch.store import COMPLETED, RunRow, Store, StoreError

T0 = 1_700_000_000.0
MONO0 = 800.0


# -- compare ------------------------------------------------------------------------------------
def summary(run_id: str, **over: Any) -> dict[str, Any]:
    s: dict[str, Any] = {
        "id": run_id,
        "name": "train",
        "status": "completed",
        "exit_code": 0,
        "duration_seconds": 10.0,
        "cpu": {"seconds_total": 8.0, "utilization_mean": 0.4, "utilization_max": 0.9},
        "memory": {"peak_rss_bytes": 1000, "peak_host_used_bytes": None},
        "disk": {"read_bytes": 0, "write_bytes": 500},
        "network": {"recv_bytes": 10, "sent_bytes": 20},
        "steps": {"count": 0},
    }
    for path, v in over.items():
        cur = s
        *parents, leaf = path.split("__")
        for p in parents:
            cur = cur.setdefault(p, {})
        cur[leaf] = v
    return s


def rows_by_field(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["field"]: r for r in result["fields"]}


def test_compare_differences_and_ratios() -> None:
    a = summary("aaaa")
    b = summary(
        "bbbb",
        status="failed",
        exit_code=1,
        duration_seconds=15.0,
        cpu__seconds_total=4.0,
        memory__peak_rss_bytes=1500,
        disk__read_bytes=300,
        steps__count=12,
        steps__steps_per_second=3.0,
    )
    out = compare(a, b)
    assert out["schema_version"] == 1
    assert out["a"] == {"id": "aaaa", "name": "train"}
    assert out["b"] == {"id": "bbbb", "name": "train"}
    f = rows_by_field(out)
    assert f["status"] == {
        "field": "status",
        "unit": "",
        "a": "completed",
        "b": "failed",
        "difference": None,
        "ratio": None,
    }
    assert f["exit_code"]["difference"] == 1
    assert f["exit_code"]["ratio"] is None  # a == 0
    assert f["duration_seconds"] == {
        "field": "duration_seconds",
        "unit": "seconds",
        "a": 10.0,
        "b": 15.0,
        "difference": 5.0,
        "ratio": 1.5,
    }
    assert f["cpu.seconds_total"]["difference"] == -4.0
    assert f["cpu.seconds_total"]["ratio"] == 0.5
    assert f["cpu.utilization_mean"]["difference"] == 0.0
    assert f["cpu.utilization_mean"]["ratio"] == 1.0
    assert f["memory.peak_rss_bytes"]["difference"] == 500
    assert f["memory.peak_rss_bytes"]["unit"] == "bytes"
    assert f["disk.read_bytes"]["difference"] == 300
    assert f["disk.read_bytes"]["ratio"] is None  # zero denominator
    assert f["steps.count"]["ratio"] is None  # 0 steps in a
    # One side missing: the row is kept without arithmetic.
    assert f["steps.steps_per_second"] == {
        "field": "steps.steps_per_second",
        "unit": "per_second",
        "a": None,
        "b": 3.0,
        "difference": None,
        "ratio": None,
    }
    # Missing on both sides: skipped.
    assert "memory.peak_host_used_bytes" not in f
    assert "steps.tokens_per_second" not in f
    assert "steps.step_time_seconds.p50" not in f
    # Order follows COMPARED.
    order = [p for p, _ in COMPARED]
    assert [r["field"] for r in out["fields"]] == sorted(f, key=order.index)


def test_compare_ignores_booleans_and_nested_non_dicts() -> None:
    a = summary("a", exit_code=True, steps=5)
    b = summary("b", exit_code=False)
    f = rows_by_field(compare(a, b))
    assert f["exit_code"]["difference"] is None
    assert lookup(a, "steps.count") is None  # "steps" is not a dict
    assert f["steps.count"]["a"] is None and f["steps.count"]["b"] == 0


def test_compare_identical_summaries() -> None:
    out = compare(summary("x"), summary("x"))
    for r in out["fields"]:
        if isinstance(r["a"], int | float) and not isinstance(r["a"], bool):
            assert r["difference"] == 0
            assert r["ratio"] in (1.0, None)


# -- export -------------------------------------------------------------------------------------
def stored_run(store: Store, run_id: str = "feed01") -> RunRow:
    rk = store.create_run(
        run_id=run_id,
        name=None,
        tags={},
        command=[],
        cwd=None,
        mode="run",
        started_at=T0,
        interval_seconds=0.5,
        host={},
    )
    store.write_batch(
        rk,
        series=[
            (0, "tree_cpu_seconds_total", (), Kind.COUNTER),
            (1, "tree_resident_memory_bytes", (), Kind.GAUGE),
            (2, "host_network_receive_bytes_total", labels(interface="eth0"), Kind.COUNTER),
            (3, "tree_processes", (), Kind.GAUGE),
        ],
        ticks=[(0, MONO0, T0 + 0.1), (1, MONO0 + 0.5, T0 + 0.6), (2, MONO0 + 1.5, T0 + 1.6)],
        samples=[
            (rk, 0, 0, 1.0),
            (rk, 0, 1, 100.0),
            (rk, 0, 2, 1000.0),
            (rk, 1, 0, 1.5),
            (rk, 1, 1, 200.0),
            (rk, 1, 2, 1500.0),
            (rk, 1, 3, 2.0),
            (rk, 2, 0, 3.0),
            (rk, 2, 1, 50.0),
        ],
    )
    store.update_run(rk, status=COMPLETED, ended_at=T0 + 2)
    return store.run_by_key(rk)


ETH0 = {"interface": "eth0"}
EXPECTED = [
    ("feed01", T0 + 0.1, 0.0, "tree_cpu_seconds_total", {}, "counter", "seconds", 1.0, None),
    ("feed01", T0 + 0.1, 0.0, "tree_resident_memory_bytes", {}, "gauge", "bytes", 100.0, None),
    (
        "feed01",
        T0 + 0.1,
        0.0,
        "host_network_receive_bytes_total",
        ETH0,
        "counter",
        "bytes",
        1000.0,
        None,
    ),
    ("feed01", T0 + 0.6, 0.5, "tree_cpu_seconds_total", {}, "counter", "seconds", 1.5, 1.0),
    ("feed01", T0 + 0.6, 0.5, "tree_resident_memory_bytes", {}, "gauge", "bytes", 200.0, None),
    (
        "feed01",
        T0 + 0.6,
        0.5,
        "host_network_receive_bytes_total",
        ETH0,
        "counter",
        "bytes",
        1500.0,
        1000.0,
    ),
    ("feed01", T0 + 0.6, 0.5, "tree_processes", {}, "gauge", "", 2.0, None),
    ("feed01", T0 + 1.6, 1.5, "tree_cpu_seconds_total", {}, "counter", "seconds", 3.0, 1.5),
    ("feed01", T0 + 1.6, 1.5, "tree_resident_memory_bytes", {}, "gauge", "bytes", 50.0, None),
]


def test_iter_rows(store: Store) -> None:
    rows = list(iter_rows(store, stored_run(store)))
    assert len(rows) == len(EXPECTED)
    for got, want in zip(rows, EXPECTED, strict=True):
        assert got[:7] == want[:7]
        assert got[7] == want[7]
        assert got[8] == (None if want[8] is None else pytest.approx(want[8]))
    assert all(len(r) == len(COLUMNS) for r in rows)


def test_write_csv(store: Store) -> None:
    out = io.StringIO()
    n = write_csv(iter_rows(store, stored_run(store)), out)
    assert n == len(EXPECTED)
    lines = out.getvalue().splitlines()
    assert lines[0] == ",".join(COLUMNS)
    parsed = list(csv.DictReader(io.StringIO(out.getvalue())))
    assert len(parsed) == n
    assert parsed[0]["labels"] == "" and parsed[0]["rate_per_second"] == ""
    assert parsed[2]["labels"] == '{"interface":"eth0"}'
    assert float(parsed[5]["rate_per_second"]) == pytest.approx(1000.0)
    assert float(parsed[0]["time_unix_seconds"]) == T0 + 0.1
    assert [p["kind"] for p in parsed[:2]] == ["counter", "gauge"]


def test_write_jsonl_parses_back(store: Store) -> None:
    out = io.StringIO()
    n = write_jsonl(iter_rows(store, stored_run(store)), out)
    back = [json.loads(line) for line in out.getvalue().splitlines()]
    assert n == len(back) == len(EXPECTED)
    for got, want in zip(back, EXPECTED, strict=True):
        w = dict(zip(COLUMNS, want, strict=True))
        assert {k: v for k, v in got.items() if k != "rate_per_second"} == {
            k: v for k, v in w.items() if k != "rate_per_second"
        }
        assert got["rate_per_second"] == (
            None if w["rate_per_second"] is None else pytest.approx(w["rate_per_second"])
        )


def test_write_parquet_reads_back(store: Store) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    buf = io.BytesIO()
    n = write_parquet(iter_rows(store, stored_run(store)), buf)
    assert n == len(EXPECTED)
    table = pq.read_table(io.BytesIO(buf.getvalue()))
    assert table.column_names == list(COLUMNS)
    back = table.to_pylist()
    assert back[2]["labels"] == '{"interface":"eth0"}'
    assert back[0]["labels"] == ""
    for got, want in zip(back, EXPECTED, strict=True):
        assert got["metric"] == want[3]
        assert got["value"] == want[7]
        assert got["elapsed_seconds"] == want[2]
        assert got["rate_per_second"] == (None if want[8] is None else pytest.approx(want[8]))


def test_write_parquet_of_an_empty_run(store: Store) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    rk = store.create_run(
        run_id="empty1",
        name=None,
        tags={},
        command=[],
        cwd=None,
        mode="run",
        started_at=T0,
        interval_seconds=1.0,
        host={},
    )
    buf = io.BytesIO()
    assert write_parquet(iter_rows(store, store.run_by_key(rk)), buf) == 0
    table = pq.read_table(io.BytesIO(buf.getvalue()))
    assert table.num_rows == 0
    assert table.column_names == list(COLUMNS)


def test_export_of_a_collected_run_is_refused(store: Store) -> None:
    run = stored_run(store)
    store.delete_samples_before(T0 + 100)
    gone = store.run_by_key(run.key)
    with pytest.raises(StoreError, match="deleted by gc"):
        list(iter_rows(store, gone))
