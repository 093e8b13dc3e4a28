"""The README's main job, shortened: the example runs under `computewatch run`, its summary has
its steps and their two phases, and the report is written."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "train.py"


def test_the_example_job_and_its_report(cw: Any, tmp_path: Path) -> None:
    cw.ok(
        "run", "--name", "example", "--quiet", "--total-steps", "200", "--",
        sys.executable, EXAMPLE, "--epochs", "2", "--steps-per-epoch", "100",
    )  # fmt: skip
    s = cw.show("example")
    # Every figure below follows from the arguments and examples/train.py's constants (batch 64,
    # DIM 128, one training process), exactly: steps, samples and tokens are counted, not timed.
    steps = s["steps"]
    assert steps["count"] == 200 and steps["processes"] == 1
    assert steps["samples_total"] == 200 * 64
    assert steps["tokens_total"] == 200 * 64 * 128
    assert s["tags"] == {"model": "linear"}
    phases = s["phases"]["by_name"]
    assert set(phases) == {"data", "compute"}
    assert phases["compute"]["steps"] == 200 and phases["data"]["steps"] == 200
    assert s["forecast"]["complete"] is True and s["forecast"]["steps_done"] == 200
    # Which rules apply follows from the job (no GPU, one process, no comm phase, no FLOPs); what
    # the host rules find depends on the machine's timing, so only that they ran is checked.
    d = s["diagnosis"]
    assert d["failed"] == {}
    assert set(d["checked"]) == {
        "data_starvation", "cpu_bound", "host_memory_pressure", "io_bound", "step_regression",
        "outlier_steps",
    }  # fmt: skip
    assert set(d["not_applicable"]) == {
        "collective_communication", "gpu_memory_headroom", "gpu_throttling", "idle_allocation",
        "low_gpu_utilization", "low_mfu", "stragglers", "host_device_sync",
    }  # fmt: skip
    assert d["not_applicable"]["low_gpu_utilization"] == "the run used no GPU"
    assert {f["id"] for f in d["findings"]} <= set(d["checked"])
    # What can be won, alone or with every fix applied, never exceeds the run.
    duration = s["duration_seconds"]
    assert all(0 <= f["saving"]["seconds"] <= duration for f in d["findings"])
    assert 0 <= d["saving"]["high_seconds"] <= duration
    assert d["saving"]["seconds"] <= sum(f["saving"]["seconds"] for f in d["findings"]) + 1e-3
    page = tmp_path / "example-report.html"
    cw.ok("report", "example", "-o", page)
    html = page.read_text()
    assert s["id"] in html and "linear" in html
    assert "<td>200 steps from 1 process(es) · " in html
