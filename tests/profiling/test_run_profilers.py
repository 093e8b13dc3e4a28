"""``run --profile-steps A:B`` and ``run.profile(steps=N)`` (the real PyTorch Profiler),
``run --cprofile`` and ``run --nsys``: files stored with the run and listed by ``show``."""

from __future__ import annotations

import json
import os
import pstats
import stat
import sys
from pathlib import Path
from typing import Any

import pytest

TORCH_JOB = """
import torch, computewatch
model = torch.nn.Linear(64, 64)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
with computewatch.track() as run:
    {extra}
    for _ in range(8):
        x = torch.randn(32, 64)
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        run.step(samples=32)
"""


def torch_artifact(shown: dict[str, Any]) -> dict[str, Any]:
    (art,) = [a for a in shown["artifacts"] if a["tool"] == "torch-profiler"]
    trace = json.loads(Path(art["files"]["chrome_trace"]).read_text())
    assert trace["traceEvents"]
    assert any(e.get("name", "").startswith("aten::") for e in trace["traceEvents"])
    ops = json.loads(Path(art["files"]["operators"]).read_text())
    names = {r["name"] for r in ops}
    assert {"aten::addmm", "aten::mm"} & names
    mm = [r for r in ops if r["name"] in ("aten::addmm", "aten::mm")]
    assert all(r["flops"] > 0 and r["cpu_time_total_us"] > 0 for r in mm)  # time and FLOPs
    assert any(r["cpu_memory_bytes"] != 0 for r in ops)  # memory
    assert "Self CPU" in Path(art["files"]["operators_table"]).read_text()
    return art


@pytest.mark.slow
def test_run_profile_steps_window(cw: Any, make_script: Any) -> None:
    job = make_script("train.py", TORCH_JOB.format(extra="pass"))
    cw.ok("run", "--quiet", "--profile-steps", "3:5", "--", sys.executable, str(job))
    shown = cw.json("show", "last")
    art = torch_artifact(shown)
    assert art["trigger"] == "steps" and art["note"] == "steps 3 to 5"
    assert Path(art["files"]["chrome_trace"]).parent == cw.home / "artifacts" / shown["id"]
    trace = json.loads(Path(art["files"]["chrome_trace"]).read_text())
    # steps 3..5: the profiled window saw 3 optimizer steps, not 8
    steps = [e for e in trace["traceEvents"] if e.get("name") == "Optimizer.step#SGD.step"]
    assert len(steps) == 3
    assert not list((cw.home / "artifacts" / shown["id"]).glob("*.artifact.json"))


@pytest.mark.slow
def test_run_profile_in_a_standalone_track(cw: Any, make_script: Any) -> None:
    job = make_script("train.py", TORCH_JOB.format(extra="run.profile(steps=2)"))
    env = cw.env()
    import subprocess
    import sys

    done = subprocess.run([sys.executable, str(job)], env=env, capture_output=True, text=True,
                          timeout=120, check=False, cwd=cw.tmp)  # fmt: skip
    assert done.returncode == 0, done.stderr
    art = torch_artifact(cw.json("show", "last"))
    assert art["note"] == "steps 1 to 2"


def test_cprofile(cw: Any, make_script: Any) -> None:
    job = make_script(
        "plain.py",
        """
        import sys
        def hot():
            return sum(i * i for i in range(200000))
        for _ in range(3):
            hot()
        sys.exit(3)
        """,
    )
    r = cw("run", "--cprofile", "--", sys.executable, str(job))
    assert r.returncode == 3  # the command's status, under cProfile too
    (art,) = cw.json("show", "last")["artifacts"]
    assert art["tool"] == "cprofile" and art["trigger"] == "run"
    stats = pstats.Stats(art["files"]["pstats"])
    assert any(fn == "hot" for (_, _, fn) in stats.stats)  # type: ignore[attr-defined]
    assert "hot" in Path(art["files"]["text"]).read_text()
    report = cw.tmp / "report.html"
    cw.ok("report", "last", "-o", str(report))
    html = report.read_text()
    assert 'id="section-profiles"' in html and art["files"]["pstats"] in html


def test_cprofile_of_a_module(cw: Any, tmp_path: Path) -> None:
    (tmp_path / "mymod.py").write_text("def f():\n    return sum(range(10**5))\nf()\n")
    cw.ok("run", "--quiet", "--cprofile", "--", sys.executable, "-m", "mymod")
    (art,) = cw.json("show", "last")["artifacts"]
    assert Path(art["files"]["pstats"]).exists()


def test_nsys_missing_is_a_usage_error(cw: Any) -> None:
    r = cw("run", "--nsys", "--", "true")
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        "computewatch: --nsys: nsys (NVIDIA Nsight Systems) is not on the PATH"
    ]


def test_nsys_wraps_the_command_and_links_its_report(cw: Any, tmp_path: Path) -> None:
    """No Nsight Systems here (it needs NVIDIA's installer): a stand-in ``nsys`` on the PATH that
    does what ``nsys profile --output BASE --force-overwrite true CMD`` does to the command
    (runs it, writes BASE.nsys-rep) checks the wrapping and the linking."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "nsys"
    fake.write_text(
        "#!/bin/sh\n"
        '[ "$1" = profile ] || exit 9\n'
        'shift; [ "$1" = --output ] || exit 9\n'
        'base="$2"; shift 2\n'
        '[ "$1" = --force-overwrite ] && shift 2\n'
        'echo report > "$base.nsys-rep"\n'
        'exec "$@"\n'
    )
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    env = cw.env(PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "computewatch", "run", "--quiet", "--nsys", "--",
                        "sh", "-c", "exit 4"], env=env, capture_output=True, text=True,
                       timeout=120, check=False, cwd=cw.tmp)  # fmt: skip
    assert r.returncode == 4, r.stderr
    (art,) = cw.json("show", "last")["artifacts"]
    assert art["tool"] == "nsys"
    assert Path(art["files"]["nsys_report"]).read_text() == "report\n"


def test_profile_steps_on_a_job_without_steps_says_so(cw: Any) -> None:
    r = cw("run", "--profile-steps", "3:5", "--", "true")
    assert r.returncode == 0
    assert (
        "computewatch: --profile-steps 3:5: no PyTorch Profiler window: the job reported 0 steps"
        in r.stderr
    )
    assert "artifacts" not in cw.show()
