"""Bad input to the benchmarks: a TARGET that cannot be imported, raises, or answers with the
wrong shape; bad flags and baseline files; a sweep point that crashes. One clear line naming
what is wrong, a non-zero exit, never a traceback; a failing variant or point does not stop
the others."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

TARGETS = Path(__file__).parents[1] / "bench" / "bench_targets.py"


@pytest.fixture
def bcw(cw):  # type: ignore[no-untyped-def]
    shutil.copy(TARGETS, cw.tmp / TARGETS.name)
    return cw


def _one_line(r) -> str:  # type: ignore[no-untyped-def]
    assert "Traceback" not in r.stderr, r.stderr
    lines = [x for x in r.stderr.splitlines() if x.startswith("computewatch:")]
    assert lines, r.stderr
    return lines[-1]


@pytest.mark.parametrize(
    ("target", "words"),
    [
        ("no_such_module:fn", ["no_such_module:fn", "cannot import", "ModuleNotFoundError"]),
        ("bench_targets:no_such_fn", ["bench_targets:no_such_fn", "has no"]),
        ("bench_targets:PER_BATCH", ["not callable"]),
        ("bench_targets:raises", ["bench_targets:raises", "ValueError", "model exploded"]),
        ("bench_targets:wrong_shape", ["wrong_shape", "1 result(s) for a batch of 2"]),
        ("bench_targets:not_a_sequence", ["not_a_sequence", "returned int"]),
        ("not a target", ["expected MODULE:FUNCTION"]),
    ],
)
def test_bad_targets(bcw, target: str, words: list[str]) -> None:  # type: ignore[no-untyped-def]
    r = bcw("bench", "inference", target, "--duration", "0.2")
    assert r.returncode == 1
    line = _one_line(r)
    for w in words:
        assert w in line


def test_bad_flags(bcw) -> None:  # type: ignore[no-untyped-def]
    for args in (
        ["bench", "inference", "bench_targets:fast", "--scenario", "batch"],
        ["bench", "inference", "bench_targets:fast", "--duration", "-1"],
        ["bench", "sweep", "bench_targets:alloc_factory", "--param", "batch_size"],
        [
            "bench",
            "sweep",
            "bench_targets:alloc_factory",
            "--param",
            "b=1",
            "--memory-limit",
            "lots",
        ],
        ["bench", "compare", "--variant", "just-a-name"],
        ["check", "last", "--max", "step_time_p50=10"],
    ):
        r = bcw(*args)
        assert r.returncode == 2, (args, r.stderr)
        assert "Traceback" not in r.stderr
    r = bcw("bench", "inference", "bench_targets:fast", "--scenario", "server")
    assert r.returncode == 1 and "--latency-bound-ms" in _one_line(r)


def test_bad_baseline_file(bcw, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    bcw.ok("bench", "inference", "bench_targets:fast", "--duration", "0.2")
    bad = tmp_path / "baseline.json"
    for text in ("{", '{"computewatch_baseline": 9}', '{"computewatch_baseline": 1, "tests": {}}'):
        bad.write_text(text)
        r = bcw("check", "last", "--baseline", bad)
        assert r.returncode == 2, r.stderr
        assert str(bad) in _one_line(r)
    r = bcw("check", "last", "--baseline", "no-such-run")
    assert r.returncode == 2 and "no-such-run" in _one_line(r)  # as a missing run
    r = bcw("check", "last")
    assert r.returncode == 2 and "--baseline" in _one_line(r)


@pytest.mark.slow
def test_failed_variant_and_crashed_point_do_not_stop_the_others(bcw) -> None:  # type: ignore[no-untyped-def]
    r = bcw("bench", "compare", "--variant", "bad=no_such_module:fn",
            "--variant", "ok=bench_targets:fast", "--repetitions", "1", "--duration", "0.2",
            "--json")  # fmt: skip
    assert r.returncode == 0, r.stderr
    by = {v["name"]: v for v in json.loads(r.stdout)["variants"]}
    assert by["bad"]["status"] == "failed" and "no_such_module" in by["bad"]["error"]
    assert by["ok"]["status"] == "ok"
    r = bcw("bench", "compare", "--variant", "bad=bench_targets:raises", "--repetitions", "1",
            "--duration", "0.2")  # fmt: skip
    assert r.returncode == 1  # every variant failed
    r = bcw("bench", "sweep", "bench_targets:crash_factory", "--param", "batch_size=1,4",
            "--steps", "2", "--json")  # fmt: skip
    assert r.returncode == 0, r.stderr
    points = json.loads(r.stdout)["points"]
    assert [p["status"] for p in points] == ["ok", "crashed"]
    assert "SIGSEGV" in points[1]["error"]
