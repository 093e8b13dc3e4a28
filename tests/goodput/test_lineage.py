"""Goodput across restarts: a three-run lineage (a crash, a resume, a kill and a resume from a
checkpoint) laid out in a real store, its figures worked out by hand; the JSON's field names
as a contract; the CLI on the same store."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from computewatch.goodput import local_goodput, report_json
from computewatch.store import Store

W0 = 1_700_000_000.0  # wall time of the first run's start
M0 = 10_000.0  # monotonic time at W0 (one clock for the three runs: the same host)
PRICE = 10.0  # USD per run
KWH = 0.5  # kWh per run


def _run(
    store: Store,
    rid: str,
    *,
    start: float,
    init: float,
    steps: int,
    ckpt_at: dict[int, float],
    end: float,
    status: str,
    checkpoint_step: int | None,
    start_step: int | None = None,
    resume_doc: int | None = None,
) -> None:
    """A run of the model ``llm``: started ``start`` s after W0, its first step starting
    ``init`` s later, ``steps`` steps of 2 s each with a 0.5 s data wait, plus a checkpoint of
    ``ckpt_at[i]`` s inside step ``i``; ended at ``end`` s with ``status``."""
    key = store.create_run(
        run_id=rid, name=rid, tags={}, command=["python", "train.py"], cwd="/tmp", mode="run",
        started_at=W0 + start, interval_seconds=1.0, host={"allowed_cores": 2},
    )  # fmt: skip
    store.set_meta(key, "governance", {"model": "llm", "stage": "pretrain"})
    if resume_doc is not None:
        store.set_meta(key, "resume", {"start_step": resume_doc})
    pid = 100 + len(rid)
    meta: dict[str, object] = {"name": rid}
    settings: dict[str, float] = {}
    if checkpoint_step is not None:
        settings["checkpoint_step"] = checkpoint_step
    if settings:
        meta["settings"] = settings
    if start_step is not None:
        meta["start_step"] = start_step
    t = M0 + start + init
    store.write_batch(key, writers=[(pid, M0 + start, meta)])
    rows, phases = [], []
    for i in range(1, steps + 1):
        phases.append((pid, "data", t, t + 0.5, None))
        d = 2.0
        if i in ckpt_at:
            phases.append((pid, "checkpoint", t + 2.0, t + 2.0 + ckpt_at[i], None))
            d += ckpt_at[i]
        t += d
        rows.append((pid, t, W0 + (t - M0), 1.0, None))
    store.write_batch(key, steps=rows, phases=phases)
    summary = {
        "gpus": [{"uuid": "GPU-a"}, {"uuid": "GPU-b"}],
        "energy": {"facility": {"value": KWH}},
        "cost": {"total": {"value": PRICE}},
    }
    store.update_run(key, status=status, ended_at=W0 + end, summary=summary)


STATUS = {"runA": "failed", "runB": "interrupted", "runC": "completed"}
SPAN = {"runA": (0.0, 120.0), "runB": (150.0, 240.0), "runC": (260.0, 325.0)}  # start, end


@pytest.fixture
def lineage(tmp_path: Path) -> Path:
    return make_lineage(tmp_path / "cw.db")


def make_lineage(path: Path) -> Path:
    """The three runs of the model ``llm`` in a store at ``path``."""
    store = Store.open(path)
    # A: from 0 s, 10 s of start-up, 50 steps (checkpoints of 3 s in steps 20 and 40, the
    # last at step 40), last step ends at 10 + 50 x 2 + 6 = 116 s; crashes at 120 s.
    _run(store, "runA", start=0, init=10, steps=50, ckpt_at={20: 3.0, 40: 3.0}, end=120,
         status="failed", checkpoint_step=40)  # fmt: skip
    # B: resumes from step 40 at 150 s (a 30 s gap), 5 s of start-up, steps 41-80 (a 3 s
    # checkpoint in its 30th step, global step 70), last step at 155 + 80 + 3 = 238 s;
    # interrupted at 240 s.
    _run(store, "runB", start=150, init=5, steps=40, ckpt_at={30: 3.0}, end=240,
         status="interrupted", checkpoint_step=70, start_step=40)  # fmt: skip
    # C: `run --start-step 70` at 260 s (a 20 s gap), 4 s of start-up, steps 71-100, last
    # step at 264 + 60 = 324 s; completes at 325 s.
    _run(store, "runC", start=260, init=4, steps=30, ckpt_at={}, end=325, status="completed",
         checkpoint_step=None, resume_doc=70)  # fmt: skip
    store.close()
    return path


def by_hand() -> dict[str, float]:
    # A: step time 116 - 10 = 106 s, data 25 s, checkpoints 6 s: 75 s of work, of which steps
    #    41-50 (10 x 1.5 s = 15 s) are redone by B: 60 s productive; idle 120 - 116 = 4 s.
    # B: step time 238 - 155 = 83 s, data 20 s, checkpoint 3 s: 60 s, steps 71-80 redone by
    #    C (15 s): 45 s productive; idle 2 s.
    # C: step time 60 s, data 15 s: 45 s productive; idle 1 s.
    return {
        "goodput": 60 + 45 + 45,
        "initialization": 10 + 5 + 4,
        "data_wait": 25 + 20 + 15,
        "checkpoint_save": 6 + 3,
        "lost_progress": 15 + 15,
        "restart_gap": 30 + 20,
        "idle": 4 + 2 + 1,
    }


def test_three_runs_with_a_crash_and_resumes(lineage: Path) -> None:
    store = Store.open(lineage)
    try:
        report = local_goodput(store, model="llm")
    finally:
        store.close()
    hand = by_hand()
    assert report.total_seconds == pytest.approx(325.0)
    assert sum(hand.values()) == pytest.approx(325.0)  # the categories cover the whole time
    assert report.goodput.seconds == pytest.approx(hand["goodput"], abs=1e-6)
    assert report.goodput.fraction == pytest.approx(150 / 325)
    for cat, b in report.badput.items():
        assert b.seconds == pytest.approx(hand[cat], abs=1e-6), cat
    a, b, c = report.runs
    assert [r.run.run_id for r in report.runs] == ["runA", "runB", "runC"]
    assert (a.run.last_step, b.run.start_step, b.run.last_step) == (50, 40, 80)
    assert (c.run.start_step, c.run.last_step) == (70, 100)
    assert (a.redone_from_step, b.redone_from_step, c.redone_from_step) == (40, 70, None)
    assert (a.productive_seconds, b.productive_seconds) == pytest.approx((60.0, 45.0))
    # GPU-hours, energy and cost: each run's 2 GPUs, 0.5 kWh and $10 spread over its time.
    assert report.goodput.gpu_hours == pytest.approx(150 * 2 / 3600)
    assert report.goodput.usd == pytest.approx(PRICE * (60 / 120 + 45 / 90 + 45 / 65))
    assert report.goodput.kwh == pytest.approx(KWH * (60 / 120 + 45 / 90 + 45 / 65))
    assert report.badput["restart_gap"].gpu_hours is None  # between runs: nothing held known
    # Young/Daly: 3 saves of 3 s; 2 failures (A failed, B interrupted) over 120 + 90 + 65 s.
    ck = report.checkpoint
    assert (ck.checkpoint_seconds, ck.failures) == (pytest.approx(3.0), 2)
    assert ck.mtbf_seconds == pytest.approx(275 / 2)
    assert ck.interval_seconds == pytest.approx(math.sqrt(2 * 3.0 * 137.5))
    assert ck.current_interval_seconds == pytest.approx((106 + 83 + 60) / 3)

    def overhead(t: float) -> float:
        return 3.0 / t + t / 275

    best = math.sqrt(825)
    assert ck.saving_seconds == pytest.approx((overhead(83) - overhead(best)) * 275)


BREAKDOWN = {"seconds", "fraction", "gpu_hours", "kwh", "usd"}
CATEGORIES = {
    "initialization", "data_wait", "checkpoint_save", "lost_progress", "restart_gap", "idle",
}  # fmt: skip


def test_json_field_names_are_a_contract(lineage: Path) -> None:
    store = Store.open(lineage)
    try:
        doc = report_json(local_goodput(store, model="llm"))
    finally:
        store.close()
    assert set(doc) == {"key", "runs", "total_seconds", "goodput", "badput", "checkpoint", "notes"}
    assert set(doc["goodput"]) == BREAKDOWN
    assert set(doc["badput"]) == CATEGORIES
    assert all(set(b) == BREAKDOWN for b in doc["badput"].values())
    assert set(doc["checkpoint"]) == {
        "checkpoint_seconds", "mtbf_seconds", "failures", "interval_seconds",
        "current_interval_seconds", "saving_seconds", "saving_fraction", "how",
    }  # fmt: skip
    run = doc["runs"][0]
    assert set(run) == {
        "run_id", "name", "status", "started_at", "ended_at", "total_seconds", "start_step",
        "last_step", "last_checkpoint_step", "redone_from_step", "goodput", "badput",
    }  # fmt: skip
    assert set(run["badput"]) == CATEGORIES and set(run["goodput"]) == BREAKDOWN
    assert run["badput"]["lost_progress"]["seconds"] == pytest.approx(15.0)
    json.dumps(doc, allow_nan=False)


def test_the_cli_answers_from_the_local_store(cw, lineage: Path) -> None:
    doc = json.loads(cw.ok("goodput", "--model", "llm", "--json", "--db", lineage).stdout)
    assert doc["goodput"]["seconds"] == pytest.approx(150.0)
    text = cw.ok("goodput", "--model", "llm", "--db", lineage).stdout
    assert "lost_progress" in text and "runA" in text and "Young/Daly" in text
    r = cw("goodput", "--model", "nope", "--db", lineage)
    assert r.returncode == 1 and "no runs of model nope" in r.stderr
    assert "Traceback" not in r.stderr
