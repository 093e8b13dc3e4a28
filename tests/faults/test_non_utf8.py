"""Fault case 2: bytes that are not UTF-8 in a run's name, tags and command line.

The command runs with its exact bytes; everything stored and shown writes each undecodable
byte as ``\\xNN`` (computewatch.escape), in text, JSON, CSV, JSONL, HTML and Prometheus labels.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import urllib.request
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

CW = [sys.executable.encode(), b"-m", b"computewatch"]


def _cw(cw: Any, *args: bytes | str, timeout: float = 120) -> subprocess.CompletedProcess[bytes]:
    """The real CLI with raw byte arguments (what a shell passes for ``$'\\xff'``)."""
    argv = [a if isinstance(a, bytes) else a.encode() for a in args]
    return subprocess.run(
        [*CW, *argv], env=cw.env(), cwd=cw.tmp, capture_output=True, timeout=timeout, check=False
    )


def _text(data: bytes) -> str:
    return data.decode("utf-8")  # strict: every output is valid UTF-8


def test_name_tag_and_argument_reach_every_reader_escaped(cw: Any, tmp_path: Path) -> None:
    out = tmp_path / "argument"
    r = _cw(
        cw, "run", "--quiet", "--name", b"bad\xff", "--tag", b"k\xfe=v\xff", "--",
        "sh", "-c", 'printf %s "$1" > "$0"', str(out), b"arg\xff",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert out.read_bytes() == b"arg\xff"  # the command got its exact bytes
    assert _text(r.stderr) == ""

    runs = json.loads(_text(_cw(cw, "runs", "--json").stdout))
    assert [(x["name"], x["tags"], x["status"]) for x in runs] == [
        ("bad\\xff", {"k\\xfe": "v\\xff"}, "completed")
    ]
    assert runs[0]["command"][-1] == "arg\\xff"
    listing = _cw(cw, "runs")
    assert listing.returncode == 0 and "bad\\xff" in _text(listing.stdout)

    # the name as typed, bytes and all, finds the run
    shown = _cw(cw, "show", b"bad\xff")
    assert shown.returncode == 0, shown.stderr
    assert "bad\\xff" in _text(shown.stdout) and "arg\\xff" in _text(shown.stdout)
    assert json.loads(_text(_cw(cw, "show", b"bad\xff", "--json").stdout))["id"] == runs[0]["id"]

    report = tmp_path / "report.html"
    r = _cw(cw, "report", "last", "-o", str(report))
    assert r.returncode == 0, r.stderr
    html = _text(report.read_bytes())
    assert "bad\\xff" in html and "arg\\xff" in html and "k\\xfe" in html

    for fmt in ("csv", "jsonl"):
        r = _cw(cw, "export", b"bad\xff", "--format", fmt)
        assert r.returncode == 0, r.stderr
        text = _text(r.stdout)
        assert text.count("\n") > 1
        if fmt == "jsonl":
            assert all(json.loads(line)["run_id"] == runs[0]["id"] for line in text.splitlines())


def test_a_reference_that_matches_nothing_says_so_with_the_escape(cw: Any) -> None:
    cw.ok("run", "--quiet", "--", "true")
    r = _cw(cw, "show", b"\xff")
    assert r.returncode == 1
    assert _text(r.stderr) == (
        "computewatch: no run matches '\\xff' (an id, id prefix, name or 'last')\n"
    )


def test_process_names_from_proc_are_escaped(cw: Any, tmp_path: Path) -> None:
    """A process whose executable's name is not UTF-8: ``/proc/PID/comm`` and ``cmdline``
    are bytes; the stored process list holds the escape."""
    exe = bytes(tmp_path) + b"/x\xff"
    os.symlink(b"/bin/sleep", exe)
    r = _cw(cw, "run", "--quiet", "--interval", "0.1", "--", exe, "0.5")
    assert r.returncode == 0, r.stderr
    shown = json.loads(_text(_cw(cw, "show", "last", "--json").stdout))
    assert shown["command"] == [str(tmp_path) + "/x\\xff", "0.5"]
    with closing(sqlite3.connect(f"file:{cw.db}?mode=ro", uri=True)) as db:
        rows = db.execute("SELECT name, cmdline FROM processes").fetchall()
    assert ("x\\xff", json.dumps([str(tmp_path) + "/x\\xff", "0.5"])) in rows


def test_prometheus_labels_carry_the_escape(
    cw: Any, make_script: Callable[[str, str], Path], free_port: Callable[[], int]
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    stop = cw.tmp / "stop"
    p = subprocess.Popen(
        [
            *CW, b"run", b"--quiet", b"--interval", b"0.2", b"--prometheus",
            f"127.0.0.1:{port}".encode(), b"--name", b"bad\xff", b"--tag", b"team=ml\xff",
            b"--tag", b"project=p\xfe", b"--", b"sh", b"-c",
            b'while [ ! -e "$0" ]; do sleep 0.1; done', bytes(stop),
        ],
        env=cw.env(), cwd=cw.tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:

        def scrape() -> str | None:
            try:
                with urllib.request.urlopen(url, timeout=5) as r:
                    text = _text(r.read())
            except OSError:
                return None
            return text if "computewatch_job_info" in text else None

        text = cw.wait_for(scrape, timeout=60, what="the run's metrics")
    finally:
        stop.touch()
        _, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    labels = [
        s.labels
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "computewatch_job_info"
    ]
    assert labels and labels[0]["team"] == "ml\\xff" and labels[0]["project"] == "p\\xfe"
