"""``bench inference`` as LoadGen users run it: an offline run sized by the rate queries are
really answered (not by one warm call of a function that does nothing), LoadGen's own scenario
spellings, and SingleStream's early-stopping estimate in the JSON."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

DURATION = 1.0
START_UP = 5.0
"""Seconds allowed beyond the issue's bound, max(2 D, 10 s), for the interpreter's start and
a loaded test machine: the check is on the bound, not on speed."""


@pytest.mark.slow
def test_offline_is_sized_by_the_sustained_rate(bench_cw: Any) -> None:
    r = bench_cw.ok("bench", "inference", "bench_targets:instant", "--scenario", "Offline",
                    "--duration", str(DURATION), "--json")  # fmt: skip
    lg = json.loads(r.stdout)["loadgen"]
    assert lg["scenario"] == "offline"
    issued = lg["samples_per_query"]  # LoadGen issues the whole offline run as one query
    achieved = lg["qps"]
    # the samples issued are about what the achieved rate answers in the duration (1.1x by
    # LoadGen's own margin), not 58 times more (a warm call's rate)
    assert issued <= 3 * achieved * DURATION, (issued, achieved)


@pytest.mark.slow
def test_single_stream_reports_the_early_stopping_estimate(bench_cw: Any) -> None:
    r = bench_cw.ok("bench", "inference", "bench_targets:fast", "--scenario", "SingleStream",
                    "--duration", "0.5", "--json")  # fmt: skip
    lg = json.loads(r.stdout)["loadgen"]
    assert lg["scenario"] == "single-stream"
    assert lg["early_stopping_percentile"] == 90.0
    assert lg["early_stopping_latency_seconds"] >= lg["latency_seconds"]["p50"]


def test_no_knee_from_one_point() -> None:
    from computewatch.bench.sweep import find_knee

    assert find_knee([120.0]) is None
    assert find_knee([None, 120.0, None]) is None
    assert find_knee([100.0, 101.0]) == 0


@pytest.mark.slow
def test_json_says_the_error_too(bench_cw: Any) -> None:
    r = bench_cw("bench", "inference", "bench_targets:raises", "--duration", "0.3", "--json")
    assert r.returncode == 1 and "model exploded" in r.stderr
    doc = json.loads(r.stdout)
    assert "model exploded" in doc["error"] and doc["exit_code"] == 1
    r = bench_cw("bench", "inference", "nosuchmodule:f", "--json")
    assert r.returncode != 0 and json.loads(r.stdout)["exit_code"] == r.returncode


@pytest.mark.slow
@pytest.mark.parametrize(
    "scenario",
    [
        ("--scenario", "server", "--latency-bound-ms", "50"),  # the QPS search: 22.7 s before
        ("--scenario", "server", "--target-qps", "200"),
        ("--scenario", "offline"),
        ("--scenario", "single-stream"),
        ("--scenario", "multi-stream"),
    ],
    ids=["server-search", "server", "offline", "single-stream", "multi-stream"],
)
def test_every_scenario_ends_within_twice_its_duration(
    bench_cw: Any, scenario: tuple[str, ...]
) -> None:
    duration = 2.0
    t0 = time.monotonic()
    r = bench_cw.ok("bench", "inference", "bench_targets:fast", *scenario,
                    "--duration", str(duration), "--json", timeout=120)  # fmt: skip
    took = time.monotonic() - t0
    assert took < max(2 * duration, 10.0) + START_UP, (took, json.loads(r.stdout).get("search"))
