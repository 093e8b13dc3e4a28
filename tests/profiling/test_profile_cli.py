"""``computewatch profile RUN|PID``: py-spy samples a real running run, writes a speedscope
profile and an SVG flame graph, and links them to the run; a refused ptrace is one line."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from computewatch.profiling.stacks import SPEEDSCOPE_SCHEMA

BUSY = """
import time, computewatch
def crunch():
    s = 0
    for i in range(20000):
        s += i * i
    return s
def train():
    with computewatch.track() as run:
        while True:
            crunch()
            run.step()
            time.sleep(0.001)
train()
"""

READY = "print('ready', flush=True)\n"  # the interpreter is up: py-spy can find it


def check_speedscope(path: Path, must_have: str) -> None:
    doc = json.loads(path.read_text())
    assert doc["$schema"] == SPEEDSCOPE_SCHEMA
    frames = doc["shared"]["frames"]
    assert all(isinstance(f["name"], str) for f in frames)
    (prof,) = doc["profiles"]
    assert prof["type"] == "sampled" and prof["unit"] == "seconds"
    assert len(prof["samples"]) == len(prof["weights"]) > 0
    for stack in prof["samples"]:
        assert all(0 <= i < len(frames) for i in stack)
    assert prof["endValue"] == pytest.approx(sum(prof["weights"]))
    assert must_have in {f["name"] for f in frames}


def check_svg(path: Path, must_have: str) -> None:
    root = ET.fromstring(path.read_text())
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    titles = [t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}title")]
    assert any(t.startswith(must_have) for t in titles)


@pytest.mark.slow
def test_profile_a_running_run_links_the_files(cw: Any, make_script: Any) -> None:
    job = make_script("busy.py", BUSY)
    p = cw.popen(
        "run", "--quiet", "--name", "busy", "--interval", "0.2", "--", sys.executable, str(job)
    )
    cw.wait_for(
        lambda: cw("runs", "--json").returncode == 0 and cw.json("runs")[0]["status"] == "running",
        what="the run to start",
    )

    def profiled() -> Any:
        r = cw("profile", "busy", "--seconds", "1")
        return r if r.returncode == 0 else None

    r = cw.wait_for(profiled, what="a profile (the run's processes recorded)")
    p.terminate()
    p.communicate(timeout=60)
    lines = dict(line.split(None, 1) for line in r.stdout.splitlines()[1:3])
    speedscope, svg = Path(lines["speedscope"]), Path(lines["flame"].split(None, 1)[1])
    run_id = cw.show("busy")["id"]
    assert speedscope.parent == cw.home / "artifacts" / run_id
    check_speedscope(speedscope, "crunch")
    check_svg(svg, "crunch")
    shown = cw.json("show", "busy")
    (art,) = shown["artifacts"]
    assert art["tool"] == "py-spy" and art["trigger"] == "manual"
    assert art["files"] == {"speedscope": str(speedscope), "svg": str(svg)}
    text = cw.ok("show", "busy").stdout
    assert str(svg) in "".join(text.split())  # the path, folded at the terminal's width


def test_profile_by_pid_to_a_file(cw: Any, make_script: Any, tmp_path: Path) -> None:
    job = make_script(
        "plain.py", READY + BUSY.partition("def train")[0] + "while True:\n    crunch()\n"
    )
    proc = subprocess.Popen([sys.executable, str(job)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        out = tmp_path / "prof.speedscope.json"
        cw.ok("profile", str(proc.pid), "--seconds", "1", "-o", str(out))
        check_speedscope(out, "crunch")
        check_svg(out.with_suffix(".svg"), "crunch")
    finally:
        proc.kill()
        proc.communicate()


def test_bad_targets_are_one_line(cw: Any) -> None:
    r = cw("profile", "nosuchrun")
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1
    r = cw("profile", "123", "--seconds", "0")
    assert r.returncode == 2 and "Traceback" not in r.stderr


def test_an_svg_output_name_keeps_both_files(cw: Any, make_script: Any) -> None:
    """``-o prof.svg``: the flame graph goes there and the speedscope profile beside it, the
    one never written over the other."""
    job = make_script(
        "plain.py", READY + BUSY.partition("def train")[0] + "while True:\n    crunch()\n"
    )
    proc = subprocess.Popen([sys.executable, str(job)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        r = cw.ok("profile", str(proc.pid), "--seconds", "1", "-o", "prof.svg")
    finally:
        proc.kill()
        proc.communicate()
    lines = dict(line.split(None, 1) for line in r.stdout.splitlines()[1:3])
    speedscope, svg = Path(lines["speedscope"]), Path(lines["flame"].split(None, 1)[1])
    assert svg == cw.tmp / "prof.svg" and speedscope == cw.tmp / "prof.speedscope.json"
    check_speedscope(speedscope, "crunch")
    check_svg(svg, "crunch")


@pytest.mark.slow
def test_a_relative_output_is_linked_by_its_full_path(cw: Any, make_script: Any) -> None:
    job = make_script("busy.py", BUSY)
    p = cw.popen(
        "run", "--quiet", "--name", "busy", "--interval", "0.2", "--", sys.executable, str(job)
    )
    cw.wait_for(
        lambda: cw("runs", "--json").returncode == 0 and cw.json("runs")[0]["status"] == "running",
        what="the run to start",
    )

    def profiled() -> Any:
        r = cw("profile", "busy", "--seconds", "1", "-o", "out/busy.json")
        return r if r.returncode == 0 else None

    (cw.tmp / "out").mkdir()
    cw.wait_for(profiled, what="a profile (the run's processes recorded)")
    p.terminate()
    p.communicate(timeout=60)
    (art,) = cw.json("show", "busy")["artifacts"]
    assert art["files"] == {
        "speedscope": str(cw.tmp / "out" / "busy.json"),
        "svg": str(cw.tmp / "out" / "busy.svg"),
    }
    cw.ok("report", "busy", "-o", "r.html")
    html = (cw.tmp / "r.html").read_text()
    section = html.partition('id="section-profiles"')[2].partition("</section>")[0]
    assert (cw.tmp / "out" / "busy.svg").as_uri() in section


def test_a_pid_that_is_not_running_is_named(cw: Any) -> None:
    cw.ok("run", "--quiet", "--", sys.executable, "-c", "pass")  # a store with a run in it
    r = cw("profile", "999999")
    assert r.returncode == 1 and r.stderr.strip().splitlines() == [
        "computewatch: no process 999999 (and no run of that id or name)"
    ]
