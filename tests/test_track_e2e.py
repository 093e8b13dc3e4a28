"""End-to-end tests of ``computewatch.track()`` and ``step()`` in real child interpreters.

Each test runs a small script: inside ``computewatch run`` (the script attaches to the
supervisor's run) or on its own (``track()`` starts a sampler subprocess). Step times are set by
the script's own clock, so the expected statistics are known.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from contextlib import closing
from itertools import pairwise
from pathlib import Path
from statistics import median
from typing import Any

import pytest
from tests.track_waits import SOURCE

PY = sys.executable

STEPS = """
import json, sys, time
import computewatch

FORM, WHERE, OUT = sys.argv[1], sys.argv[2], sys.argv[3]
STEP, N = 0.05, 30
NAME = f"steps-{FORM}-{WHERE}"


MARKS = []  # when each step ended, by the script's clock: the truth the summary must match


def loop(step):
    # Deadline-paced sleeps: every step lasts 50 ms on average, whatever one sleep overshoots.
    nxt = time.monotonic()
    MARKS.append(nxt)
    for _ in range(N):
        nxt += STEP
        time.sleep(max(0.0, nxt - time.monotonic()))
        step(samples=16, tokens=128)
        MARKS.append(time.monotonic())


T0 = time.monotonic()  # before track(): the summary's first step is timed from its start
runs = []
if FORM == "with":
    with computewatch.track(name=NAME, tags={"form": FORM}, interval=0.2) as run:
        runs.append(run)
        loop(run.step)
else:
    @computewatch.track(name=NAME, tags={"form": FORM}, interval=0.2)
    def train():
        runs.append(computewatch.current_run())
        loop(computewatch.step)

    train()
run = runs[0]
with open(OUT, "w") as f:
    json.dump(
        {"id": run.id, "attached": run.attached, "summary": run.summary, "marks": MARKS, "t0": T0},
        f,
    )
"""


def _script(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _python(cw, *args: Any, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run a script directly (no supervisor) with the test's data home."""
    return subprocess.run(
        [PY, *map(str, args)],
        capture_output=True,
        text=True,
        env=cw.env(),
        cwd=cw.tmp,
        timeout=timeout,
        check=False,
    )


def _mode(db: Path, run_id: str) -> str:
    with closing(sqlite3.connect(db)) as conn:
        mode: str = conn.execute("SELECT mode FROM runs WHERE id=?", (run_id,)).fetchone()[0]
    return mode


@pytest.mark.parametrize(
    ("form", "where"),
    [("with", "attached"), ("with", "standalone"), ("decorator", "standalone"),
     ("decorator", "attached")],
)  # fmt: skip
def test_step_statistics(cw, tmp_path, form, where):
    script = _script(tmp_path, "steps.py", STEPS)
    out = tmp_path / "out.json"
    if where == "attached":
        cw.ok("run", "--quiet", "--interval", "0.2", "--", PY, script, form, where, out)
    else:
        r = _python(cw, script, form, where, out)
        assert r.returncode == 0, r.stderr
        assert r.stderr == ""
    result = json.loads(out.read_text())
    s = cw.show("last")
    assert s["name"] == f"steps-{form}-{where}"  # an attached run takes track()'s name
    assert s["tags"] == {"form": form}
    assert s["status"] == "completed"
    assert result["attached"] is (where == "attached")
    if where == "attached":
        assert result["summary"] is None  # the supervisor stores it
        assert result["id"] == s["id"]
        assert _mode(cw.db, s["id"]) == "run"
    else:
        assert result["summary"] == s
        assert _mode(cw.db, s["id"]) == "track"

    steps = s["steps"]
    assert steps["count"] == 30
    assert steps["processes"] == 1
    assert steps["samples_total"] == 30 * 16
    assert steps["tokens_total"] == 30 * 128
    # The script's own clock says how long its steps took (50 ms each when the machine keeps
    # up; longer on a loaded one, for the script and the summary alike).
    # The first step is timed from track()'s start, somewhere between T0 and the loop's start:
    # the mean lies between the loop's own mean and one that includes that gap.
    marks = result["marks"]
    times = [b - a for a, b in pairwise(marks)]
    low, high = (marks[-1] - marks[0]) / len(times), (marks[-1] - result["t0"]) / len(times)
    assert steps["step_time_seconds"]["p50"] == pytest.approx(median(times), rel=0.10)
    assert 0.95 * low <= steps["step_time_seconds"]["mean"] <= 1.05 * high
    for key, per_step in (("steps", 1), ("samples", 16), ("tokens", 128)):
        assert 0.9 * per_step / high <= steps[f"{key}_per_second"] <= 1.1 * per_step / low


# The block lasts until the sampler, which may start late on a loaded machine, has stored three
# ticks; the wait sleeps 0.1 s between its light polls, so the CPU figure stays the busy loop's.
STANDALONE = (
    SOURCE
    + """
import json, os, sys, time
import computewatch

out = sys.argv[1]
with computewatch.track(name="solo", tags={"team": "red", "lr": 0.1}, interval=0.1) as run:
    pid = run.sampler_pid
    inside = computewatch.current_run() is run
    t0 = time.process_time()
    while time.process_time() - t0 < 0.5:
        pass
    time.sleep(0.5)
    wait_for_ticks(run, 3)
with open(out, "w") as f:
    json.dump(
        {
            "id": run.id,
            "inside": inside,
            "after": computewatch.current_run() is None,
            "sampler_pid": pid,
            "sampler_alive": os.path.exists(f"/proc/{pid}"),
            "status": run.status,
            "summary": run.summary,
        },
        f,
    )
"""
)


def test_track_standalone_stores_a_run(cw, tmp_path):
    out = tmp_path / "out.json"
    r = _python(cw, _script(tmp_path, "solo.py", STANDALONE), out)
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    res = json.loads(out.read_text())
    assert res["inside"] and res["after"]
    assert res["sampler_pid"] is not None
    assert not res["sampler_alive"]
    assert res["status"] == "completed"
    s = res["summary"]
    assert s is not None
    assert s["id"] == res["id"]
    assert s["name"] == "solo"
    assert s["tags"] == {"team": "red", "lr": "0.1"}
    assert s["status"] == "completed"
    assert s["exit_code"] is None
    assert s["samples"]["count"] >= 3
    assert s["notes"] == []
    # Loose: CPU used before the sampler's first tick (its start-up) is not counted.
    assert s["cpu"]["seconds_total"] == pytest.approx(0.5, abs=0.25)
    assert cw.show("solo") == s
    assert _mode(cw.db, res["id"]) == "track"
    runs = cw.json("runs")
    assert [(x["id"], x["status"]) for x in runs] == [(res["id"], "completed")]
    assert not (cw.home / "spool" / res["id"]).exists()


SAMPLER_KILLED = """
import json, os, signal, sqlite3, sys, time
from contextlib import closing
from itertools import pairwise
import computewatch

db, out = sys.argv[1], sys.argv[2]


def stored_steps(run_id):
    try:
        with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as c:
            return c.execute(
                "SELECT count(*) FROM steps JOIN runs ON runs.key = steps.run_key "
                "WHERE runs.id = ?",
                (run_id,),
            ).fetchone()[0]
    except sqlite3.Error:
        return 0


with computewatch.track(name="sampler-killed", interval=0.1) as run:
    for _ in range(10):
        time.sleep(0.01)
        run.step(samples=1)
    give_up = time.monotonic() + 60
    while stored_steps(run.id) < 10 and time.monotonic() < give_up:
        time.sleep(0.05)
    stored_before = stored_steps(run.id)
    os.kill(run.sampler_pid, signal.SIGKILL)
    for _ in range(10):
        time.sleep(0.01)
        run.step(samples=1)
print("user code finished", flush=True)
with open(out, "w") as f:
    json.dump({"summary": run.summary, "stored_before": stored_before}, f)
"""


def test_killed_sampler_does_not_stop_user_code(cw, tmp_path):
    out = tmp_path / "out.json"
    r = _python(cw, _script(tmp_path, "killed.py", SAMPLER_KILLED), cw.db, out)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    assert "user code finished" in r.stdout
    res = json.loads(out.read_text())
    assert res["stored_before"] == 10
    s = res["summary"]
    assert s is not None
    assert s["status"] == "completed"
    assert any("sampler" in n and "data stops" in n for n in s["notes"]), s["notes"]
    # the 10 steps the sampler stored and the 10 it never saw, each counted once
    assert s["steps"]["count"] == 20
    assert s["steps"]["samples_total"] == 20
    assert cw.show("sampler-killed") == s


# The process dies once its background thread has written the 5 steps to the spool (a fixed
# sleep could end before a late thread ran, and the steps would die with the process).
TRACKED_DIES = (
    SOURCE
    + """
import os, signal, sys, time
import computewatch

run = computewatch.track(name="owner-died", interval=0.1).start()
for _ in range(5):
    time.sleep(0.02)
    run.step()
with open(sys.argv[1], "w") as f:
    f.write(str(run.sampler_pid))
wait_for_spooled_steps(run, 5)
os.kill(os.getpid(), signal.SIGKILL)
"""
)


def test_sampler_stores_the_run_when_the_tracked_process_dies(cw, tmp_path):
    pid_file = tmp_path / "sampler.pid"
    r = _python(cw, _script(tmp_path, "dies.py", TRACKED_DIES), pid_file)
    assert r.returncode == -9, r.stderr
    assert pid_file.exists()

    def stored() -> bool:
        with closing(sqlite3.connect(cw.db)) as conn:
            row = conn.execute("SELECT summary FROM runs WHERE name='owner-died'").fetchone()
        return row is not None and row[0] is not None

    cw.wait_for(stored, what="the sampler to store the run")
    s = cw.show("owner-died")
    assert s["status"] == "interrupted"
    assert any("without closing the run" in n for n in s["notes"]), s["notes"]
    assert s["steps"]["count"] == 5
