"""End-to-end tests of the ``computewatch`` command line on real child processes.

Every figure is checked against a ground truth the child itself measures (its CPU time from
``time.process_time``/``os.times``, its RSS from ``/proc/self/status``), never against timing.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import closing
from datetime import datetime
from typing import Any

import pexpect
import pytest

from computewatch.sampling.sampler import FLUSH_SECONDS

PY = sys.executable
MiB = 1024 * 1024

BURN = """
import sys, time

# Burn until this process has used exactly argv[1] CPU-seconds in all (start-up included).
target = float(sys.argv[1])
while time.process_time() < target:
    pass
"""

RSS = """
def status_kib(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)
"""


def _epoch(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def _no_traceback(r: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in r.stderr, r.stderr
    assert "Traceback" not in r.stdout, r.stdout


def _integrity_problems(db: os.PathLike[str]) -> list[str]:
    """``PRAGMA integrity_check`` findings, less the false "NULL value in T.C" reports that
    SQLite 3.40.0-3.41.0 gives on WITHOUT ROWID tables whose primary key is not their first
    columns (``processes``); for those the columns are checked for NULLs directly."""
    with closing(sqlite3.connect(db)) as conn:
        found = [r[0] for r in conn.execute("PRAGMA integrity_check")]
        if found == ["ok"]:
            return []
        if (3, 40, 0) <= sqlite3.sqlite_version_info < (3, 41, 1):
            false = re.compile(r"^NULL value in (\w+)\.(\w+)$")
            real = []
            for msg in found:
                m = false.match(msg)
                if m is None:
                    real.append(msg)
                    continue
                table, column = m.groups()
                nulls = conn.execute(f"SELECT count(*) FROM {table} WHERE {column} IS NULL")
                if nulls.fetchone()[0]:
                    real.append(msg)
            return real
        return found


# --- CPU ---------------------------------------------------------------------------------------


def test_cpu_seconds_of_a_burner(cw, make_script):
    burner = make_script("burn.py", BURN)
    cw.ok("run", "--quiet", "--", PY, burner, "1.5")
    s = cw.show()
    assert s["status"] == "completed"
    assert s["exit_code"] == 0
    assert s["cpu"]["seconds_total"] == pytest.approx(1.5, rel=0.10)


def test_cpu_seconds_of_a_process_tree_are_summed(cw, make_script):
    burner = make_script("burn.py", BURN)
    parent = make_script(
        "parent.py",
        f"""
        import subprocess, sys, time
        child = subprocess.Popen([sys.executable, {str(burner)!r}, "1.0"])
        while time.process_time() < 1.0:
            pass
        child.wait()
        """,
    )
    cw.ok("run", "--quiet", "--interval", "0.2", "--", PY, parent)
    s = cw.show()
    assert s["cpu"]["seconds_total"] == pytest.approx(2.0, rel=0.10)


def test_short_lived_workers_are_counted(cw, make_script, tmp_path):
    """20 workers that each live less than one interval: their CPU reaches the summary through
    the parent's cutime/cstime."""
    burner = make_script("burn.py", BURN)
    truth = tmp_path / "truth.txt"
    parent = make_script(
        "workers.py",
        f"""
        import os, subprocess, sys
        for _ in range(20):
            subprocess.run([sys.executable, {str(burner)!r}, "0.1"], check=True)
        t = os.times()
        with open({str(truth)!r}, "w") as f:
            f.write(repr(t.user + t.system + t.children_user + t.children_system))
        """,
    )
    cw.ok("run", "--quiet", "--interval", "1", "--", PY, parent)
    expected = float(truth.read_text())
    assert expected >= 2.0
    assert cw.show()["cpu"]["seconds_total"] == pytest.approx(expected, rel=0.10)


# --- memory ------------------------------------------------------------------------------------


def test_peak_rss_of_a_known_allocation(cw, make_script, tmp_path):
    """Expected peak: the interpreter's own RSS just before allocating, plus the 200 MiB."""
    out = tmp_path / "rss.json"
    script = make_script(
        "alloc.py",
        RSS
        + f"""
import json, time
base = status_kib("VmRSS") * 1024
data = bytearray(b"\\x01") * (200 * 1024 * 1024)  # filled, so every page is resident
time.sleep(1.5)
with open({str(out)!r}, "w") as f:
    json.dump({{"base": base, "hwm": status_kib("VmHWM") * 1024}}, f)
""",
    )
    cw.ok("run", "--quiet", "--interval", "0.2", "--", PY, script)
    truth = json.loads(out.read_text())
    peak = cw.show()["memory"]["peak_rss_bytes"]
    assert peak == pytest.approx(truth["base"] + 200 * MiB, rel=0.10)
    assert peak == pytest.approx(truth["hwm"], rel=0.05)


def test_peak_rss_is_the_commands_not_the_supervisors(cw, make_script, tmp_path):
    """A small command's peak is its own high-water mark. (``ru_maxrss`` from wait4 also holds
    the memory of the process that spawned it, here the supervisor: the kernel folds the old
    address space's peak into it at exec.)"""
    out = tmp_path / "hwm.txt"
    script = make_script(
        "small.py",
        RSS
        + f"""
import time
time.sleep(1.0)
with open({str(out)!r}, "w") as f:
    f.write(str(status_kib("VmHWM") * 1024))
""",
    )
    cw.ok("run", "--quiet", "--interval", "0.2", "--", PY, script)
    hwm = int(out.read_text())
    assert cw.show()["memory"]["peak_rss_bytes"] == pytest.approx(hwm, rel=0.10)


@pytest.mark.parametrize("after", [0.0, 2.5], ids=["exits-at-once", "lives-on"])
def test_short_memory_spike_is_caught(cw, make_script, tmp_path, after):
    """150 MiB held for well under the 2 s interval (filling it takes a few hundred ms, more on
    a loaded machine): caught by VmHWM at the next tick when the process lives on, or by
    ``ru_maxrss`` at exit when it does not."""
    out = tmp_path / "spike.json"
    script = make_script(
        "spike.py",
        RSS
        + f"""
import json, time
base = status_kib("VmRSS") * 1024
time.sleep(0.3)
t0 = time.monotonic()
data = bytearray(b"\\x01") * (150 * 1024 * 1024)
del data
held = time.monotonic() - t0
time.sleep({after})
with open({str(out)!r}, "w") as f:
    json.dump({{"base": base, "held": held}}, f)
""",
    )
    cw.ok("run", "--quiet", "--interval", "2", "--", PY, script)
    truth = json.loads(out.read_text())
    assert truth["held"] < 1.0  # a spike, far shorter than the interval
    peak = cw.show()["memory"]["peak_rss_bytes"]
    assert peak == pytest.approx(truth["base"] + 150 * MiB, rel=0.10)


# --- exit status and signals -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "expected", "status"),
    [
        (0, 0, "completed"),
        (3, 3, "failed"),
        (42, 42, "failed"),
        (-signal.SIGKILL, 137, "interrupted"),
    ],
    ids=["0", "3", "42", "SIGKILL"],
)
def test_exit_status_passthrough(cw, code, expected, status):
    prog = f"import os, sys; c = {code}; os.kill(os.getpid(), -c) if c < 0 else sys.exit(c)"
    r = cw("run", "--quiet", "--interval", "0.2", "--", PY, "-c", prog)
    assert r.returncode == expected, r.stderr
    _no_traceback(r)
    s = cw.show()
    assert s["exit_code"] == expected
    assert s["status"] == status
    assert cw.json("runs")[0]["status"] == status


HANDLES_INTERRUPT = """
import pathlib, sys, time
try:
    pathlib.Path(sys.argv[1]).write_text("ready")
    time.sleep(60)
    print("child: not interrupted", flush=True)
except KeyboardInterrupt:
    print("child: caught KeyboardInterrupt", flush=True)
    sys.exit(130)
"""


def _proc_state(pid: int) -> str:
    """One process's threads as /proc shows them: name, state, what each blocks, what waits."""
    lines = []
    try:
        tids = sorted(os.listdir(f"/proc/{pid}/task"), key=int)
    except OSError as e:
        return f"  {pid}: {e}"
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                fields = dict(ln.split(":", 1) for ln in f if ":" in ln)
        except OSError:
            continue
        keys = ("Name", "State", "SigBlk", "SigIgn", "SigCgt", "SigPnd", "ShdPnd")
        lines.append(
            f"  {pid}/{tid}: " + " ".join(f"{k}={fields.get(k, '?').strip()}" for k in keys)
        )
    return "\n".join(lines)


def _communicate_or_describe(p: subprocess.Popen[str], timeout: float) -> tuple[str, str]:
    """``p.communicate(timeout)``; past it, the test fails with the supervisor's and its
    children's threads (state, signals blocked, caught and pending) and everything they wrote,
    so that a run that hangs says where (it once hung past 60 s in a loaded suite)."""
    try:
        return p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        children = []
        for entry in os.listdir("/proc"):
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == p.pid:
                        children.append(int(entry))
            except (OSError, ValueError, IndexError):
                continue
        state = "\n".join(_proc_state(pid) for pid in [p.pid, *children])
        p.kill()
        out, err = p.communicate()
        pytest.fail(f"no exit within {timeout:g} s\n{state}\nstdout:\n{out}\nstderr:\n{err}")


@pytest.mark.parametrize(
    ("sig", "expected"),
    [(signal.SIGINT, 130), (signal.SIGTERM, 128 + signal.SIGTERM)],
    ids=["SIGINT", "SIGTERM"],
)
def test_signal_to_supervisor_is_forwarded(cw, make_script, tmp_path, sig, expected):
    """``kill -INT``/``kill -TERM`` of the supervisor reaches the command once; the run is
    stored as interrupted with the command's exit status."""
    ready = tmp_path / "ready"
    script = make_script("wait.py", HANDLES_INTERRUPT)
    p = cw.popen("run", "--interval", "0.2", "--", PY, script, ready)
    cw.wait_for(ready.exists, what="the command to start")
    p.send_signal(sig)
    out, err = _communicate_or_describe(p, 60)
    assert p.returncode == expected, err
    assert "Traceback" not in err
    if sig == signal.SIGINT:
        assert "child: caught KeyboardInterrupt" in out
    assert "not interrupted" not in out
    s = cw.show()
    assert s["status"] == "interrupted"
    assert s["exit_code"] == expected
    assert s["ended_at"] is not None
    assert any(signal.Signals(sig).name in n for n in s["notes"]), s["notes"]


COUNTS_SIGINT = """
import signal, sys, time
count = 0

def on_sigint(signum, frame):
    global count
    count += 1

signal.signal(signal.SIGINT, on_sigint)
print("CHILD-READY", flush=True)
give_up = time.monotonic() + 60
while not count and time.monotonic() < give_up:
    time.sleep(0.02)
time.sleep(1.0)  # any second copy of the signal would arrive in this second
print(f"sigint_count={count}", flush=True)
sys.exit(130)
"""


def test_ctrl_c_in_a_terminal_reaches_the_command_once(cw, make_script):
    """Ctrl-C goes to the whole foreground process group; the supervisor must not send the
    command a second SIGINT."""
    script = make_script("count.py", COUNTS_SIGINT)
    child = pexpect.spawn(
        PY,
        ["-m", "computewatch", "run", "--interval", "0.2", "--", PY, str(script)],
        env=cw.env(),
        cwd=str(cw.tmp),
        dimensions=(30, 120),
        encoding="utf-8",
        codec_errors="replace",
        timeout=60,
    )
    try:
        child.expect("CHILD-READY")
        child.sendintr()
        child.expect(r"sigint_count=(\d+)")
        count = int(child.match.group(1))
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert count == 1
    assert child.exitstatus == 130
    s = cw.show()
    assert s["status"] == "interrupted"
    assert s["exit_code"] == 130


# --- commands that cannot start ----------------------------------------------------------------


@pytest.mark.parametrize("name", ["computewatch-no-such-command-xyz", "./no-such-file", ""])
def test_missing_command_exits_127(cw, name):
    r = cw("run", "--", name, "arg")
    assert r.returncode == 127
    _no_traceback(r)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert name in lines[0]
    assert "not found" in lines[0]
    assert cw.json("runs") == []


def test_non_executable_file_exits_126(cw, tmp_path):
    f = tmp_path / "not-executable.sh"
    f.write_text("#!/bin/sh\necho hi\n")
    f.chmod(0o644)
    r = cw("run", "--", f)
    assert r.returncode == 126
    _no_traceback(r)
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert str(f) in r.stderr
    assert cw.json("runs") == []


# --- a killed supervisor -----------------------------------------------------------------------


@pytest.mark.slow
def test_kill_9_of_the_supervisor_loses_at_most_the_last_seconds(cw, make_script, tmp_path):
    pid_file = tmp_path / "child.pid"
    script = make_script(
        "sleeper.py",
        """
        import os, sys, time
        with open(sys.argv[1], "w") as f:
            f.write(str(os.getpid()))
        time.sleep(120)
        """,
    )
    interval = 0.2
    try:
        p = cw.popen(
            "run", "--quiet", "--interval", interval, "--", PY, script, pid_file,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        runs = cw.wait_for(lambda: cw.json("runs") if cw.db.exists() else None, what="the run")
        started = _epoch(runs[0]["started_at"])
        time.sleep(2.5)
        p.kill()
        killed_at = time.time()
        p.wait(timeout=30)
        elapsed = killed_at - started

        s = cw.show("last")
        assert s["id"] == runs[0]["id"]
        assert s["status"] == "interrupted"
        # What is lost is the tail since the last flush (every second): the run's end is the
        # last stored data's time (store.reconcile), which is at most that flush period, a tick
        # and a loaded machine's scheduling delay (1 s more) before the kill. The tick rate
        # itself is not asserted: a loaded machine skips ticks.
        assert s["samples"]["count"] >= 2, s["samples"]
        assert _epoch(s["ended_at"]) >= killed_at - FLUSH_SECONDS - interval - 1.0, (
            s["ended_at"],
            killed_at,
            elapsed,
        )
        assert any("killed" in n and "last stored sample" in n for n in s["notes"]), s["notes"]
        assert s["cpu"]["seconds_total"] is not None
        assert _integrity_problems(cw.db) == []
        assert cw.json("runs")[0]["status"] == "interrupted"
    finally:
        cw.wait_for(pid_file.exists, timeout=30, what="the child's pid file")
        cw.kill_pid_file(pid_file)


# --- many runs at once -------------------------------------------------------------------------


@pytest.mark.slow
def test_eight_runs_at_once_share_one_new_database(cw):
    assert not cw.db.exists()
    command = [PY, "-c", "import time; time.sleep(2)"]
    procs = [
        cw.popen("run", "--interval", "0.1", "--name", f"par{i}", "--", *command) for i in range(8)
    ]
    results = [p.communicate(timeout=120) for p in procs]
    for p, (_out, err) in zip(procs, results, strict=True):
        assert p.returncode == 0, err
        assert "locked" not in err, err
        assert "Traceback" not in err, err
        assert "cannot write" not in err, err

    runs = cw.json("runs")
    assert sorted(r["name"] for r in runs) == [f"par{i}" for i in range(8)]
    assert _integrity_problems(cw.db) == []
    with closing(sqlite3.connect(cw.db)) as conn:
        for key, rid, summary_text in conn.execute("SELECT key, id, summary FROM runs"):
            summary = json.loads(summary_text)
            ticks = conn.execute("SELECT count(*) FROM ticks WHERE run_key=?", (key,)).fetchone()
            assert ticks[0] == summary["samples"]["count"] >= 10, rid
            # Series of the run as a whole (tree_*, host_*) have a sample at every tick; the
            # per-process series stop when their process has exited (the final tick).
            whole = [
                idx
                for idx, name in conn.execute(
                    "SELECT idx, name FROM series WHERE run_key=?", (key,)
                )
                if not name.startswith("process_")
            ]
            per_tick = conn.execute(
                f"SELECT seq, count(*) FROM samples WHERE run_key=? "
                f"AND series IN ({','.join('?' * len(whole))}) GROUP BY seq ORDER BY seq",
                (key, *whole),
            ).fetchall()
            assert len(per_tick) == ticks[0], rid
            assert {n for _, n in per_tick} == {len(whole)}, rid
            totals = [
                n
                for _, n in conn.execute(
                    "SELECT seq, count(*) FROM samples WHERE run_key=? GROUP BY seq ORDER BY seq",
                    (key,),
                )
            ]
            # The job's own series are there from the first tick until it exits, then gone for
            # good: no gap in between. (On a loaded machine the sampler may tick more than once
            # between the job's exit and the end of the run, so more than the last tick can
            # lack them.)
            kept = next((i for i, n in enumerate(totals) if n != totals[0]), len(totals))
            assert kept >= 1 and totals[0] > len(whole), (rid, totals)
            assert set(totals[kept:]) <= {len(whole)}, (rid, totals)


# --- reading the store: runs, show, compare, export, gc ----------------------------------------


@pytest.fixture(scope="module")
def three_runs(tmp_path_factory, cli_class) -> Iterator[tuple[Any, dict[str, str]]]:
    """alpha (0.3 CPU-s, team=red), beta (0.6 CPU-s, team=blue), alpha again (team=red)."""
    tmp = tmp_path_factory.mktemp("three")
    cli = cli_class(tmp / "home", tmp)
    burner = tmp / "burn.py"
    burner.write_text(BURN)
    ids = {}
    for key, name, team, cpu in (
        ("a", "alpha", "red", "0.3"),
        ("b", "beta", "blue", "0.6"),
        ("c", "alpha", "red", "0.3"),
    ):
        cli.ok(
            "run", "--quiet", "--interval", "0.1", "--name", name, "--tag", f"team={team}",
            "--tag", f"run={key}", "--", PY, burner, cpu,
        )  # fmt: skip
        ids[key] = cli.json("runs")[0]["id"]
    yield cli, ids
    cli.cleanup()


def test_runs_lists_newest_first_with_limit_and_tags(three_runs):
    cli, ids = three_runs
    runs = cli.json("runs")
    assert [r["id"] for r in runs] == [ids["c"], ids["b"], ids["a"]]
    assert runs[1]["name"] == "beta"
    assert runs[1]["tags"] == {"team": "blue", "run": "b"}
    assert all(r["status"] == "completed" and r["exit_code"] == 0 for r in runs)
    assert all(r["duration_seconds"] > 0 for r in runs)
    assert [r["id"] for r in cli.json("runs", "--limit", "2")] == [ids["c"], ids["b"]]
    assert [r["id"] for r in cli.json("runs", "--tag", "team=red")] == [ids["c"], ids["a"]]
    assert [r["id"] for r in cli.json("runs", "--tag", "team=red", "--tag", "run=a")] == [ids["a"]]
    assert cli.json("runs", "--tag", "team=green") == []
    text = cli.ok("runs").stdout
    assert text.index(ids["c"]) < text.index(ids["b"]) < text.index(ids["a"])
    r = cli.ok("runs", "--tag", "team=green")
    assert "no runs" in r.stderr


def test_show_by_id_prefix_name_and_last(three_runs):
    cli, ids = three_runs
    assert cli.show(ids["b"])["id"] == ids["b"]
    assert cli.show(ids["a"][:7])["id"] == ids["a"]
    assert cli.show("beta")["id"] == ids["b"]
    assert cli.show("alpha")["id"] == ids["c"]  # a name means its newest run
    assert cli.show("last")["id"] == ids["c"]
    text = cli.ok("show", ids["b"]).stdout
    assert ids["b"] in text
    assert "beta" in text


def test_show_unknown_or_ambiguous_run_is_a_clear_error(three_runs, tmp_path):
    cli, ids = three_runs
    r = cli("show", "no-such-run")
    assert r.returncode == 1
    _no_traceback(r)
    assert "no-such-run" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1

    # Two ids sharing a prefix, in a copy of the database.
    copy = tmp_path / "copy.db"
    with closing(sqlite3.connect(cli.db)) as src, closing(sqlite3.connect(copy)) as dst:
        src.backup(dst)
        dst.execute("UPDATE runs SET id='abcd00000001' WHERE id=?", (ids["a"],))
        dst.execute("UPDATE runs SET id='abcd00000002' WHERE id=?", (ids["b"],))
        dst.commit()
    r = cli("show", "abcd", "--db", copy)
    assert r.returncode == 1
    _no_traceback(r)
    assert "ambiguous" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    r = cli.ok("show", "abcd00000002", "--db", copy, "--json")
    assert json.loads(r.stdout)["name"] == "beta"


def test_compare_json_differences(three_runs):
    cli, ids = three_runs
    a, b = cli.show(ids["a"]), cli.show(ids["b"])
    result = cli.json("compare", ids["a"], ids["b"])
    assert result["a"] == {"id": ids["a"], "name": "alpha"}
    assert result["b"] == {"id": ids["b"], "name": "beta"}
    fields = {f["field"]: f for f in result["fields"]}
    cpu = fields["cpu.seconds_total"]
    assert cpu["unit"] == "seconds"
    assert cpu["a"] == a["cpu"]["seconds_total"]
    assert cpu["b"] == b["cpu"]["seconds_total"]
    assert cpu["difference"] == pytest.approx(cpu["b"] - cpu["a"])
    assert cpu["difference"] == pytest.approx(0.3, rel=0.25)
    assert cpu["ratio"] == pytest.approx(2.0, rel=0.25)
    assert fields["status"]["a"] == fields["status"]["b"] == "completed"
    assert fields["status"]["difference"] is None
    r = cli.ok("compare", ids["a"], ids["b"])
    assert "cpu.seconds_total" in r.stdout


EXPORT_COLUMNS = [
    "run_id",
    "time_unix_seconds",
    "elapsed_seconds",
    "metric",
    "labels",
    "kind",
    "unit",
    "value",
    "rate_per_second",
]


def test_export_csv_jsonl_and_parquet(three_runs, tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    cli, ids = three_runs
    rid = ids["b"]
    rows = list(csv.reader(io.StringIO(cli.ok("export", rid, "--format", "csv").stdout)))
    assert rows[0] == EXPORT_COLUMNS
    data = [dict(zip(EXPORT_COLUMNS, r, strict=True)) for r in rows[1:]]
    assert data
    assert {d["run_id"] for d in data} == {rid}
    metrics = {d["metric"] for d in data}
    assert {"tree_cpu_seconds_total", "tree_resident_memory_bytes"} <= metrics
    seen: set[tuple[str, str]] = set()
    for d in data:
        key = (d["metric"], d["labels"])
        if d["kind"] == "gauge":
            assert d["rate_per_second"] == ""
        elif key in seen:  # a counter has a rate from its second sample on
            float(d["rate_per_second"])
        seen.add(key)
    assert {d["unit"] for d in data if d["metric"] == "tree_cpu_seconds_total"} == {"seconds"}
    cpu = [float(d["value"]) for d in data if d["metric"] == "tree_cpu_seconds_total"]
    assert cpu[-1] == pytest.approx(cli.show(rid)["cpu"]["seconds_total"], abs=1e-3)
    rates = [
        float(d["rate_per_second"])
        for d in data
        if d["metric"] == "tree_cpu_seconds_total" and d["rate_per_second"]
    ]
    assert max(rates) > 0.3  # the burner keeps about one core busy

    lines = cli.ok("export", rid, "--format", "jsonl").stdout.splitlines()
    assert len(lines) == len(data)
    first = json.loads(lines[0])
    assert list(first) == EXPORT_COLUMNS
    assert isinstance(first["labels"], dict)

    out = tmp_path / "run.parquet"
    cli.ok("export", rid, "--format", "parquet", "-o", out)
    table = pq.read_table(out)
    assert table.column_names == EXPORT_COLUMNS
    assert table.num_rows == len(data)
    assert set(table.column("run_id").to_pylist()) == {rid}


def test_gc_keeps_summaries_and_export_says_samples_are_gone(cw):
    cw.ok("run", "--quiet", "--interval", "0.1", "--name", "old", "--", PY, "-c", "pass")
    before = cw.show("old")
    r = cw.ok("gc", "--older-than", "0s", "--dry-run")
    assert before["id"] in r.stdout
    assert cw.ok("export", "old").stdout.count("\n") > 1  # dry run deleted nothing
    r = cw.ok("gc", "--older-than", "0s")
    assert "1 run(s)" in r.stdout
    assert cw.show("old") == before
    assert before["id"] in cw.ok("show", "old").stdout
    with closing(sqlite3.connect(cw.db)) as conn:
        assert conn.execute("SELECT count(*) FROM samples").fetchone()[0] == 0
    r = cw("export", "old", "--format", "csv")
    assert r.returncode == 1
    _no_traceback(r)
    assert "deleted" in r.stderr
    r = cw.ok("gc", "--older-than", "0s")
    assert "0 run(s)" in r.stdout


def test_run_json_file_holds_the_summary(cw, tmp_path):
    out = tmp_path / "summary.json"
    cw.ok("run", "--quiet", "--json", out, "--name", "to-file", "--", PY, "-c", "pass")
    written = json.loads(out.read_text())
    assert written["name"] == "to-file"
    assert written == cw.show("to-file")


# --- bad input ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "--bogus"], "unrecognized arguments"),
        (["runs", "--bogus"], "unrecognized arguments"),
        (["run", "--interval", "0.01"], "between"),
        (["run", "--interval", "abc"], "not a number"),
        (["run", "--tag", "novalue"], "KEY=VALUE"),
    ],
    ids=["run-flag", "runs-flag", "interval-small", "interval-text", "tag"],
)
def test_bad_arguments_are_one_readable_error(cw, tmp_path, args, message):
    marker = tmp_path / "ran"
    cmd = ["--", PY, "-c", f"open({str(marker)!r}, 'w').close()"] if args[0] == "run" else []
    r = cw(*args, *cmd)
    assert r.returncode == 2
    _no_traceback(r)
    assert message in r.stderr
    assert "error:" in r.stderr
    assert not marker.exists()


# `run` with a corrupt database runs the job and spools the run: tests/faults/test_store_broken.py
@pytest.mark.parametrize("command", ["show", "runs"])
def test_corrupt_database_is_reported_and_left_alone(cw, tmp_path, command):
    cw.home.mkdir()
    garbage = b"this is not a database, just some bytes\n" * 200
    cw.db.write_bytes(garbage)
    marker = tmp_path / "ran"
    args = {
        "show": ["show", "last"],
        "runs": ["runs"],
        "run": ["run", "--", PY, "-c", f"open({str(marker)!r}, 'w').close()"],
    }[command]
    r = cw(*args)
    assert r.returncode != 0
    _no_traceback(r)
    assert str(cw.db) in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert cw.db.read_bytes() == garbage
    assert not marker.exists()


def test_db_in_a_missing_directory(cw, tmp_path):
    missing = tmp_path / "no" / "such" / "dir" / "cw.db"
    r = cw("show", "last", "--db", missing)
    assert r.returncode == 1
    _no_traceback(r)
    assert str(missing) in r.stderr
    assert not missing.parent.exists()


def test_run_json_into_a_missing_directory_fails_before_running(cw, tmp_path):
    marker = tmp_path / "ran"
    r = cw(
        "run", "--json", "/nonexistent/dir/x.json", "--",
        PY, "-c", f"open({str(marker)!r}, 'w').close()",
    )  # fmt: skip
    assert r.returncode != 0
    _no_traceback(r)
    assert "/nonexistent/dir" in r.stderr
    assert not marker.exists()


# --- the live view -----------------------------------------------------------------------------


@pytest.mark.slow
def test_plain_live_lines_when_stderr_is_not_a_terminal(cw):
    r = cw.ok("run", "--interval", "0.2", "--", PY, "-c", "import time; time.sleep(6)")
    live = [ln for ln in r.stderr.splitlines() if ln.startswith("[computewatch]")]
    assert live, r.stderr
    assert "\x1b" not in r.stderr


def test_quiet_leaves_only_the_commands_output(cw):
    prog = "import sys, time; sys.stderr.write('own stderr\\n'); print('own stdout'); time.sleep(1)"
    r = cw.ok("run", "--quiet", "--interval", "0.2", "--", PY, "-c", prog)
    assert r.stderr == "own stderr\n"
    assert r.stdout == "own stdout\n"
    assert os.path.exists(cw.db)
