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
    assert s["steps"]["count"] == 200
    assert s["tags"] == {"model": "linear"}
    phases = s["phases"]["by_name"]
    assert set(phases) == {"data", "compute"}
    assert phases["compute"]["steps"] == 200
    assert s["forecast"]["complete"] is True and s["forecast"]["steps_done"] == 200
    assert isinstance(s["diagnosis"], dict) and "findings" in s["diagnosis"]
    page = tmp_path / "example-report.html"
    cw.ok("report", "example", "-o", page)
    assert page.stat().st_size > 10_000
