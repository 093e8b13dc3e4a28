"""Goodput with what goes wrong in real trainings: a record uploaded by an older or broken
client (read as None: the run then counts as time without steps), runs that overlap (said in a
note, not counted twice), a run that crashed before its first step, and a local run whose
steps are not stored."""

from __future__ import annotations

from pathlib import Path

import pytest

from computewatch.goodput import local_goodput
from computewatch.goodput.model import RunTime, goodput, run_time_from_json
from computewatch.store import Store


@pytest.mark.parametrize(
    "raw",
    [None, "not a mapping", {"run_id": "a"}, {"run_id": "a", "started_at": "x", "ended_at": 1},
     {"run_id": "a", "started_at": 0, "ended_at": 10, "progress": "broken"}],
)  # fmt: skip
def test_a_broken_record_is_none(raw: object) -> None:
    assert run_time_from_json(raw) is None


def test_overlapping_runs_and_a_run_without_steps() -> None:
    a = RunTime("a", None, "failed", 0.0, 100.0, steps=0)  # crashed while starting
    b = RunTime("b", None, "completed", 90.0, 200.0, initialization_seconds=10.0,
                step_seconds=100.0, steps=50, start_step=0, last_step=50,
                progress=((1.0, 2.0), (50.0, 100.0)))  # fmt: skip
    rep = goodput("model m", [b, a])
    assert [p.run.run_id for p in rep.runs] == ["a", "b"]
    assert rep.notes == ["runs a and b overlap by 10.0 s"]
    assert rep.badput["idle"].seconds == pytest.approx(100.0)  # a: no step at all
    assert rep.badput["restart_gap"].seconds == 0.0
    assert rep.goodput.seconds == pytest.approx(100.0)
    assert rep.checkpoint.interval_seconds is None and "no checkpoint" in rep.checkpoint.why


def test_a_local_run_without_steps(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "cw.db")
    try:
        key = store.create_run(
            run_id="r1", name="r1", tags={"job": "j"}, command=["x"], cwd=None, mode="run",
            started_at=1000.0, interval_seconds=1.0, host={},
        )  # fmt: skip
        store.update_run(key, status="failed", ended_at=1030.0)
        rep = local_goodput(store, job="j")
    finally:
        store.close()
    (p,) = rep.runs
    assert p.productive_seconds == 0.0 and p.badput["idle"] == pytest.approx(30.0)
