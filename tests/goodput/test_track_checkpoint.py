"""``run.checkpoint(step)``, ``track(start_step=N)`` and ``step(n=...)`` in a real tracked run,
read back by goodput; ``run --start-step`` through the real CLI."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

import computewatch
from computewatch.goodput import local_goodput
from computewatch.store import Store


def test_checkpoints_and_steps_of_a_tracked_run(tmp_path: Path) -> None:
    db = tmp_path / "cw.db"
    with computewatch.track(name="resumed", db=db, model="m1", start_step=10) as run:
        for n in (11, 12, 13):
            time.sleep(0.02)
            run.step(n=n)
        with run.checkpoint(13):  # timed around the save
            time.sleep(0.1)
        run.checkpoint(13, seconds=0.25)  # marked after a save timed elsewhere
        run.step(n=14)
    store = Store.open(db)
    try:
        (p,) = local_goodput(store, model="m1").runs
    finally:
        store.close()
    r = p.run
    assert (r.start_step, r.last_step, r.last_checkpoint_step) == (10, 14, 13)
    assert r.checkpoints == 2
    assert r.checkpoint_seconds >= 0.1 + 0.25
    assert r.steps == 4


@pytest.mark.parametrize("bad", [-1, 1.5, True, "3"])
def test_bad_steps_are_refused_at_the_call(tmp_path: Path, bad: object) -> None:
    with pytest.raises((TypeError, ValueError), match="start_step"):
        computewatch.track(name="x", db=tmp_path / "cw.db", start_step=bad)  # type: ignore[arg-type]


def test_run_start_step_is_recorded(cw, tmp_path: Path) -> None:
    cw.ok("run", "--quiet", "--model", "m2", "--start-step", "40", "--", sys.executable, "-c",
          "pass")  # fmt: skip
    doc = json.loads(cw.ok("goodput", "--model", "m2", "--json").stdout)
    assert doc["runs"][0]["start_step"] == 40
    page = tmp_path / "report.html"
    cw.ok("report", "last", "-o", page)  # the run's report: its model's goodput
    html = page.read_text()
    assert 'id="section-goodput"' in html and "model m2" in html
    r = cw("run", "--start-step", "-3", "--", sys.executable, "-c", "pass")
    assert r.returncode == 2 and "must be at least 0" in r.stderr
