"""Resource gates: the check's logic on known numbers, and ``computewatch check`` on real runs
(a regression detected, noise not flagged, a baseline file written and read back)."""

from __future__ import annotations

import json
import random
import sys

import pytest

from computewatch.bench.gate import (
    BaselineError,
    Limit,
    Measurements,
    baseline_document,
    check,
    mann_whitney_greater,
    parse_baseline,
    parse_limit,
)

STEPS = """
import os, time, computewatch
delay = float(os.environ["STEP_DELAY"])
with computewatch.track(name=os.environ["RUN_NAME"], interval=0.1) as run:
    for _ in range(20):
        time.sleep(delay)
        run.step(samples=4)
"""
# Each run sleeps at its own moment under its own load: a few ms of late wake-ups must stay far
# inside the +25% limit (12.5 ms on a 50 ms step), while the slow run's steps are twice as long.
# 19 step times a side: the 2x shift is still significant far beyond alpha 0.01 (p ~ 1e-7).
BASE_DELAY = 0.05
SLOW_DELAY = 0.1


def test_parse_limit() -> None:
    assert parse_limit("step_time_p50=+10%") == Limit("step_time_p50", 0.10, "max")
    assert parse_limit("throughput=-5%", "min") == Limit("throughput", -0.05, "min")
    for bad in ("step_time_p50=10", "nope=+10%", "step_time_p50", "x=+a%"):
        with pytest.raises(BaselineError):
            parse_limit(bad)


def test_mann_whitney() -> None:
    rng = random.Random(1)
    a = [1.0 + rng.random() * 0.1 for _ in range(50)]
    b = [1.0 + rng.random() * 0.1 for _ in range(50)]
    assert mann_whitney_greater(a, b) > 0.01  # the same distribution
    slower = [x * 1.3 for x in a]
    assert mann_whitney_greater(slower, b) < 1e-6
    assert mann_whitney_greater([1.0] * 10, [1.0] * 10) > 0.4  # all tied
    assert mann_whitney_greater([], [1.0]) == 1.0


def test_check_values_and_distributions() -> None:
    lim = [Limit("step_time_p50", 0.10, "max"), Limit("throughput", -0.05, "min")]
    base = Measurements({"step_time_p50": 1.0, "throughput": 100.0}, source="base")
    ok = check(Measurements({"step_time_p50": 1.05, "throughput": 97.0}), base, lim)
    assert not ok.regressed and [r.status for r in ok.rows] == ["ok", "ok"]
    bad = check(Measurements({"step_time_p50": 1.2, "throughput": 90.0}), base, lim)
    assert bad.regressed and [r.status for r in bad.rows] == ["regression", "regression"]
    missing = check(Measurements({"step_time_p50": 1.0}), base, lim)
    assert missing.missing and not missing.regressed
    # noise: a few slow outliers move the p50 of a small sample past +10%; the distributions
    # are the same, so the noise-aware mode does not flag it
    rng = random.Random(7)
    samples = [rng.uniform(0.8, 1.2) for _ in range(40)]
    noisy_b = Measurements({"step_time_p50": 1.0}, samples[:20])
    noisy_c = Measurements({"step_time_p50": 1.12}, samples[20:])
    one = [Limit("step_time_p50", 0.10, "max")]
    assert check(noisy_c, noisy_b, one, noise_aware=False).regressed  # single numbers: flagged
    assert not check(noisy_c, noisy_b, one, noise_aware=True).regressed
    shifted = Measurements({"step_time_p50": 1.5}, [x * 1.5 for x in samples[20:]])
    r = check(shifted, noisy_b, one, noise_aware=True)
    assert r.regressed and r.rows[0].test == "distribution" and r.rows[0].p_value < 0.01


def test_baseline_document_round_trip() -> None:
    m = Measurements({"step_time_p50": 0.5, "peak_memory": 1e9, "qps": None}, [0.5, 0.6])
    doc = baseline_document(m, tests={"t::a": m})
    run, tests = parse_baseline(json.dumps(doc))
    assert run is not None and run.metrics == {"step_time_p50": 0.5, "peak_memory": 1e9}
    assert run.step_times_seconds == [0.5, 0.6] and tests["t::a"].metrics == run.metrics
    bad_docs = [
        "[]",
        "{}",
        '{"computewatch_baseline": 2}',
        "nope",
        '{"computewatch_baseline": 1, "metrics": {"peak_memory": "x"}}',
        '{"computewatch_baseline": 1, "metrics": {}, "step_times_seconds": [-1]}',
    ]
    for bad in bad_docs:
        with pytest.raises(BaselineError):
            parse_baseline(bad)


@pytest.mark.slow
def test_check_cli_regression_noise_and_file(cw, tmp_path) -> None:  # type: ignore[no-untyped-def]
    script = tmp_path / "steps.py"
    script.write_text(STEPS)

    def make(name: str, delay: float) -> None:
        import subprocess

        env = cw.env(STEP_DELAY=str(delay), RUN_NAME=name)
        subprocess.run([sys.executable, str(script)], env=env, check=True, timeout=120)

    make("base", BASE_DELAY)
    make("same", BASE_DELAY)
    make("slow", SLOW_DELAY)
    limit = ["--max", "step_time_p50=+25%"]
    r = cw("check", "same", "--baseline", "base", *limit, "--noise-aware")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "within limits" in r.stdout
    r = cw("check", "slow", "--baseline", "base", *limit, "--noise-aware")
    assert r.returncode == 1 and "REGRESSION" in r.stdout and "step_time_p50" in r.stdout
    doc = json.loads(cw("check", "slow", "--baseline", "base", *limit, "--json").stdout)
    assert doc["regressed"] is True and doc["rows"][0]["change"] > 0.25
    # a committed baseline file
    base_file = tmp_path / "baseline.json"
    cw.ok("check", "base", "--write-baseline", base_file)
    assert len(json.loads(base_file.read_text())["step_times_seconds"]) == 19
    assert cw("check", "same", "--baseline", base_file, *limit, "--noise-aware").returncode == 0
    assert cw("check", "slow", "--baseline", base_file, *limit, "--noise-aware").returncode == 1
