"""``export --format chrome-trace``: the steps and phases of every rank of a run on one timeline
(Chrome trace event format), from a real two-rank run under ``computewatch run``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

RANKS = """
import os, subprocess, sys
env = [dict(os.environ, RANK=str(r), WORLD_SIZE="2") for r in range(2)]
procs = [subprocess.Popen([sys.executable, sys.argv[1]], env=e) for e in env]
sys.exit(max(p.wait() for p in procs))
"""

WORKER = """
import os, time, computewatch
rank = int(os.environ["RANK"])
with computewatch.track() as run:
    for _ in range(5):
        with run.phase("forward"):
            time.sleep(0.01)
        with run.phase("comm"):
            time.sleep(0.005 + 0.1 * rank)
        run.step(samples=8)
"""


def test_two_ranks_on_one_timeline(cw: Any, make_script: Any, tmp_path: Path) -> None:
    worker = make_script("worker.py", WORKER)
    launcher = make_script("launch.py", RANKS)
    cw.ok("run", "--quiet", "--name", "ddp", "--", sys.executable, str(launcher), str(worker))
    out = tmp_path / "trace.json"
    cw.ok("export", "ddp", "--format", "chrome-trace", "-o", str(out))
    doc = json.loads(out.read_text())
    events = doc["traceEvents"]
    assert doc["displayTimeUnit"] == "ms"
    assert doc["otherData"]["run_id"] == cw.show("ddp")["id"]
    names = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert {n.split(" (")[0] for n in names} == {"rank 0", "rank 1"}
    complete = [e for e in events if e["ph"] == "X"]
    assert all(e["ph"] in ("X", "B", "E", "M", "i") for e in events)
    for e in complete:
        assert isinstance(e["ts"], (int, float)) and e["ts"] >= 0
        assert isinstance(e["dur"], (int, float)) and e["dur"] >= 0
        assert isinstance(e["pid"], int) and e["tid"] in (1, 2)
    by_rank: dict[int, list[dict[str, Any]]] = {}
    for e in complete:
        by_rank.setdefault(e["pid"], []).append(e)
    assert set(by_rank) == {0, 1}  # one track group per rank
    for evs in by_rank.values():
        steps = [e for e in evs if e["cat"] == "step"]
        comm = [e for e in evs if e["cat"] == "comm"]
        fwd = [e for e in evs if e["name"] == "forward"]
        assert len(steps) == 5 and len(comm) == 5 and len(fwd) == 5
        assert [e["args"]["step"] for e in steps] == [1, 2, 3, 4, 5]
        # microseconds: a 10 ms sleep is about 10 000 µs
        assert all(e["dur"] >= 9_000 for e in fwd)
        # phases sit inside their step
        for s in steps[1:]:
            inside = [p for p in evs if p["tid"] == 2 and s["ts"] <= p["ts"] < s["ts"] + s["dur"]]
            assert {p["name"] for p in inside} == {"forward", "comm"}
    slow = sum(e["dur"] for e in by_rank[1] if e["cat"] == "comm")
    fast = sum(e["dur"] for e in by_rank[0] if e["cat"] == "comm")
    # rank 1 waits 0.5 s longer in comm in all: visible side by side (rank 0's five 5 ms sleeps
    # would each have to wake 100 ms late on a loaded machine to hide it)
    assert slow > fast


def test_chrome_trace_to_stdout_of_a_plain_run(cw: Any, make_script: Any) -> None:
    job = make_script(
        "job.py",
        """
        import computewatch
        with computewatch.track() as run:
            for _ in range(3):
                with run.phase("data"):
                    pass
                run.step()
        """,
    )
    cw.ok("run", "--quiet", "--", sys.executable, str(job))
    doc = json.loads(cw.ok("export", "last", "--format", "chrome-trace").stdout)
    tracks = {e["pid"] for e in doc["traceEvents"] if e["ph"] == "X"}
    assert len(tracks) == 1  # no ranks: the process id
    assert sum(1 for e in doc["traceEvents"] if e.get("cat") == "step") == 3
