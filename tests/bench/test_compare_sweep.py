"""Model against model and scaling sweeps: the orchestration's pure parts (interleaving, the
Pareto front, the knee, the parameters) and the real thing through the CLI."""

from __future__ import annotations

import json

import pytest

from computewatch.bench.compare import interleaved_order, pareto_front
from computewatch.bench.records import BenchError
from computewatch.bench.sweep import find_knee, parse_param
from computewatch.store import Store
from computewatch.views.html.bench import bench_section


def test_cli_copies_the_scenarios() -> None:
    from computewatch.bench.records import SCENARIOS
    from computewatch.cli.bench import SCENARIOS as CLI_SCENARIOS

    assert CLI_SCENARIOS == SCENARIOS


def test_interleaved_order_puts_each_variant_in_each_place() -> None:
    order = interleaved_order(["a", "b", "c"], 3)
    assert order == [["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"]]
    for place in range(3):
        assert sorted(row[place] for row in order) == ["a", "b", "c"]


def test_pareto_front() -> None:
    # (energy, accuracy): b dominates c; a is cheaper; d is unknown
    pts = [(1.0, 0.7), (2.0, 0.9), (3.0, 0.8), (None, 0.99)]
    assert pareto_front(pts, maximize_y=True) == [True, True, False, False]
    # (energy, latency), both lower is better
    assert pareto_front([(1.0, 5.0), (2.0, 1.0), (2.0, 6.0)], maximize_y=False) == [
        True, True, False,
    ]  # fmt: skip


def test_knee() -> None:
    assert find_knee([100, 190, 350, 360, 355]) == 2
    assert find_knee([100, 200, 400]) is None  # still growing at the end
    assert find_knee([100, None, 105]) == 0
    assert find_knee([None, None]) is None
    assert find_knee([50]) is None  # one point: no knee


def test_parse_param() -> None:
    assert parse_param("batch_size=1,2,4") == ("batch_size", [1, 2, 4])
    assert parse_param("lr=0.1,0.2") == ("lr", [0.1, 0.2])
    assert parse_param("mode=a,b") == ("mode", ["a", "b"])
    for bad in ("batch_size", "=1,2", "batch size=1", "b=", "b=1,,2"):
        with pytest.raises(BenchError):
            parse_param(bad)


@pytest.mark.slow
def test_compare_variants_interleaved_with_a_failure(bench_cw, tmp_path) -> None:  # type: ignore[no-untyped-def]
    html = tmp_path / "cmp.html"
    r = bench_cw.ok(
        "bench", "compare",
        "--variant", "fast=bench_targets:fast",
        "--variant", "slow=bench_targets:slow",
        "--variant", "broken=bench_targets:raises",
        "--accuracy", "bench_targets:accuracy",
        "--repetitions", "2", "--duration", "0.3", "--json", "--html", html,
    )  # fmt: skip
    doc = json.loads(r.stdout)
    by = {v["name"]: v for v in doc["variants"]}
    assert doc["order"] == [["fast", "slow", "broken"], ["slow", "broken", "fast"]]
    assert by["broken"]["status"] == "failed"
    assert "bench_targets:raises" in by["broken"]["error"]
    assert "model exploded" in by["broken"]["error"]
    for name in ("fast", "slow"):
        assert by[name]["status"] == "ok" and len(by[name]["repetitions"]) == 2
        assert by[name]["energy_per_query_joules"] is not None
    # 1 ms against 4 ms per call
    assert by["fast"]["latency_p50_seconds"] < by["slow"]["latency_p50_seconds"]
    assert by["fast"]["accuracy"] == 0.9 and by["slow"]["accuracy"] == 0.95
    assert doc["pareto_axes"] == ["energy_per_query_joules", "accuracy"]
    assert by["broken"]["pareto"] is False
    page = html.read_text()
    assert "<svg" in page and "Pareto" in page and "broken" in page
    runs = bench_cw.json("runs", "--tag", "bench=compare")
    assert len(runs) == 4  # 2 variants x 2 repetitions, each its own stored run


@pytest.mark.slow
def test_sweep_records_the_point_that_runs_out_of_memory(bench_cw, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Each point holds batch_size x 32 MiB; under a 600 MiB address-space limit the points
    up to 8 run and 16 (512 MiB more than the interpreter) runs out: recorded, not fatal."""
    html = tmp_path / "sweep.html"
    r = bench_cw.ok(
        "bench", "sweep", "bench_targets:alloc_factory", "--param", "batch_size=1,2,4,16",
        "--memory-limit", "600MiB", "--steps", "3", "--json", "--html", html,
    )  # fmt: skip
    doc = json.loads(r.stdout)
    status = {p["params"]["batch_size"]: p["status"] for p in doc["points"]}
    assert status == {1: "ok", 2: "ok", 4: "ok", 16: "oom"}
    assert doc["out_of_memory_at"] == [{"batch_size": 16}]
    ok = [p for p in doc["points"] if p["status"] == "ok"]
    assert all(p["samples_per_second"] and p["peak_rss_bytes"] for p in ok)
    # memory grows with the batch
    assert ok[0]["peak_rss_bytes"] < ok[-1]["peak_rss_bytes"]
    assert "uPlot" in html.read_text()
    runs = bench_cw.json("runs", "--tag", "bench=sweep")
    assert len(runs) == 4
    # every point's run keeps the whole sweep, for its report's Benchmark section
    with Store.open(bench_cw.db) as store:
        doc = store.meta(store.find_run(ok[0]["run_id"]).key)["bench"]
    assert doc["kind"] == "sweep-point" and doc["sweep"]["out_of_memory_at"] == [{"batch_size": 16}]
    section = bench_section(doc)
    assert 'id="section-bench"' in section and "cw-sweep" in section
    assert "Out of memory from: batch_size=16" in section


@pytest.mark.slow
def test_sweep_knee_of_a_saturating_step(bench_cw) -> None:  # type: ignore[no-untyped-def]
    """Throughput doubles up to batch 4 (a fixed 80 ms per step), then stays at 50/s."""
    r = bench_cw.ok(
        "bench", "sweep", "bench_targets:saturating_factory",
        "--param", "batch_size=1,2,4,8,16", "--param", "threads=1", "--steps", "5", "--json",
    )  # fmt: skip
    doc = json.loads(r.stdout)
    assert [p["status"] for p in doc["points"]] == ["ok"] * 5
    assert doc["knee"] == [{"batch_size": 4, "threads": 1}]
