"""Small versions of the scenario jobs of benchmarks/bench_diagnosis.py (one cause injected
into a real PyTorch job on CPU, under the real CLI): the top finding is the injected cause,
its saving lies inside its own range and within the run, and the healthy job has no finding
with a saving above 5% of it. The causes that live on a GPU (a synchronisation every step, an
idle allocation, a throttled device) run on a fake GPU that follows the job's simulated device.
Nothing is timed against a target here (the benchmark measures the fixed variants)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCH))

import bench_diagnosis  # noqa: E402

pytest.importorskip("torch")

SCALE = 0.25


def _check(doc: dict[str, Any]) -> None:
    duration = doc["run"]["duration_seconds"]
    for f in doc["findings"]:
        s = f["saving"]
        assert 0 <= s["low_seconds"] <= s["seconds"] <= s["high_seconds"] <= duration, f
    assert doc["saving"]["seconds"] <= duration


@pytest.mark.slow
@pytest.mark.parametrize(
    "name",
    ["serial_loader", "io_waits", "blocking_checkpoint", "tiny_batch", "device_sync",
     "idle_allocation", "throttled_gpu"],
)  # fmt: skip
def test_the_top_finding_is_the_injected_cause(name: str, tmp_path: Path) -> None:
    doc, others = _diagnosed(name, tmp_path)
    _check(doc)
    ranked = [(f["id"], f["saving"]["seconds"], f["saving"].get("part")) for f in doc["findings"]]
    said = f"{ranked}; other processes kept {others:.2f} cores busy"
    # A step-time regression is what another job arriving on a shared machine produces in any
    # job (the suite's machine is one): the injected cause must lead the other findings. With
    # other processes keeping half a core or more busy meanwhile (the suite's other workers),
    # stalled steps are what sharing produces too (as in the healthy job's test below).
    # (Never the injected cause itself: a blocking checkpoint's finding is its stalled steps.)
    expected = bench_diagnosis.EXPECTED[name]
    # Per-tick CPU time cannot tell a step waiting for a CPU from one waiting for I/O, so
    # sharing reads as I/O too (a fresh-clone run: io_bound 2.0 s beside 1.08 busy cores).
    shared = (
        {"step_regression", "outlier_steps", "io_bound"} if others >= 0.5 else {"step_regression"}
    )
    found = [f for f in doc["findings"] if f["id"] not in shared - {expected}]
    assert found, said
    mine = [f for f in found if f["id"] == expected]
    assert mine, said
    # At this small scale the run's start-up (importing PyTorch, single-threaded) is most of
    # the run, so a finding about the whole run's CPU (cpu_bound, Amdahl over the single-core
    # stretches) may outrank the loop's: the injected cause must lead the findings about its
    # own part of the run (the benchmark, at full scale, checks the whole ranking).
    part = mine[0]["saving"].get("part")
    top = next(f for f in found if f["saving"].get("part") == part)
    if top["id"] != expected:
        # A loader on a machine whose other processes take the core beside the loop: a worker
        # wins nothing there (the estimate is 0, so the finding ranks last), and the finding
        # must still be there, its range saying what a free core would give (checked below).
        same = [f for f in found if f["id"] == expected]
        assert expected == "data_starvation" and same, said
        assert same[0]["saving"]["seconds"] == 0, said
        top = same[0]
    # On a machine whose other processes take the free core, a loader worker wins nothing
    # (the estimate is 0 then): the range still says what a free core would give.
    assert top["saving"]["high_seconds"] > 0 and top["saving"]["fix"], f"{top}; {said}"


def _diagnosed(name: str, tmp_path: Path) -> tuple[dict[str, Any], float]:
    """The scenario's diagnosis, and the cores other processes kept busy meanwhile (the
    machine's busy time less this test's children's, from /proc/stat)."""
    t0, busy0, own0 = time.monotonic(), _busy_seconds(), os.times()
    doc = bench_diagnosis.diagnose_slow(name, SCALE, tmp_path)
    own1 = os.times()
    own = (own1.children_user - own0.children_user) + (own1.children_system - own0.children_system)
    return doc, max(_busy_seconds() - busy0 - own, 0.0) / (time.monotonic() - t0)


def _busy_seconds() -> float:
    """CPU-seconds the whole machine has spent busy (every mode but idle and iowait)."""
    with open("/proc/stat") as f:
        fields = [float(v) for v in f.readline().split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


@pytest.mark.slow
def test_the_healthy_job_has_nothing_to_win(tmp_path: Path) -> None:
    doc, others = _diagnosed("healthy", tmp_path)
    _check(doc)
    big = [f for f in doc["findings"] if (f["saving"]["fraction"] or 0) > 0.05]
    if others >= 0.5:
        # Other processes (the suite's other workers) kept cores busy meanwhile: slower and
        # stalled steps are what sharing the machine produces in any job, and per-tick CPU time
        # does not always show it in the steps' span (docs/diagnosis.md). The rest must hold.
        big = [f for f in big if f["id"] not in ("step_regression", "outlier_steps")]
    assert not big, (big, f"other processes kept {others:.2f} cores busy")
