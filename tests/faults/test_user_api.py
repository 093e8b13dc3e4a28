"""Fault case 4: mistakes and failures on the user's side of ``track()``.

A wrong value raises at the call that passed it (TypeError for a wrong type, ValueError for a
negative or non-finite count), before anything is queued; a failure in the background thread
or at the end of a ``track()`` block is one warning, and the program keeps its own exit status.
Each script runs in a real interpreter under the real CLI.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.track_waits import SOURCE

MISUSE = """
import json, math, sys, time
import computewatch

results = {}

def attempt(label, call):
    try:
        call()
    except (TypeError, ValueError) as e:
        results[label] = [type(e).__name__, str(e)]
    else:
        results[label] = None

with computewatch.track(name="misuse") as r:
    attempt("samples str", lambda: r.step(samples="32"))
    attempt("samples negative", lambda: r.step(samples=-5))
    attempt("tokens nan", lambda: r.step(tokens=math.nan))
    attempt("flops inf", lambda: r.step(flops=math.inf))
    attempt("samples bool", lambda: r.step(samples=True))
    attempt("module step", lambda: computewatch.step(tokens="many"))
    attempt("phase name", lambda: r.phase(3))
    attempt("module phase name", lambda: computewatch.phase(None))
    attempt("record_phase backwards", lambda: r.record_phase("io", 2.0, 1.0))
    attempt("record_phase start", lambda: r.record_phase("io", "0", 1.0))
    attempt("record_phase accel", lambda: r.record_phase("io", 1.0, 2.0, -1.0))
    attempt("request tokens_in", lambda: r.request("gen", tokens_in=-1))
    attempt("set_flops str", lambda: r.set_flops(per_step="1e9"))
    attempt("set_flops zero", lambda: r.set_flops(per_token=0))
    # integers past what a float holds, and text that is not Unicode (a lone surrogate)
    attempt("samples huge", lambda: r.step(samples=10**400))
    attempt("tokens huge", lambda: r.step(tokens=2**1100))
    attempt("flops huge", lambda: r.step(flops=10**309))
    attempt("set_flops huge", lambda: r.set_flops(per_step=10**400))
    attempt("phase surrogate", lambda: r.phase("\\ud800"))
    attempt("module phase surrogate", lambda: computewatch.phase("a\\udcff"))

    def tokens_out():
        with r.request("gen") as q:
            q.tokens_out = "12"
    attempt("request tokens_out", tokens_out)

    for _ in range(5):
        r.step(samples=32, tokens=4096.0)
    time.sleep(0.3)

print(json.dumps(results))
sys.exit(3)
"""

EXPECTED = {
    "samples str": ("TypeError", "samples must be a number"),
    "samples negative": ("ValueError", "samples must be a finite number >= 0"),
    "tokens nan": ("ValueError", "tokens must be a finite number >= 0"),
    "flops inf": ("ValueError", "flops must be a finite number >= 0"),
    "samples bool": ("TypeError", "samples must be a number"),
    "module step": ("TypeError", "tokens must be a number"),
    "phase name": ("TypeError", "phase name must be a str"),
    "module phase name": ("TypeError", "phase name must be a str"),
    "record_phase backwards": ("ValueError", "a phase ends after it starts"),
    "record_phase start": ("TypeError", "start must be a time.monotonic() reading"),
    "record_phase accel": ("ValueError", "accel_seconds must be a finite number >= 0"),
    "request tokens_in": ("ValueError", "tokens_in must be a finite number >= 0"),
    "set_flops str": ("TypeError", "per_step must be a number"),
    "set_flops zero": ("ValueError", "per_token: FLOPs must be a positive number"),
    "request tokens_out": ("TypeError", "tokens_out must be a number"),
    "samples huge": ("ValueError", "samples must be a finite number >= 0"),
    "tokens huge": ("ValueError", "tokens must be a finite number >= 0"),
    "flops huge": ("ValueError", "flops must be a finite number >= 0"),
    "set_flops huge": ("ValueError", "per_step must be a finite number >= 0"),
    "phase surrogate": ("ValueError", "phase name must be valid Unicode text"),
    "module phase surrogate": ("ValueError", "phase name must be valid Unicode text"),
}


def test_a_bad_value_raises_at_the_call_and_nothing_else_breaks(
    cw: Any, make_script: Callable[[str, str], Path]
) -> None:
    script = make_script("misuse.py", MISUSE)
    r = cw("run", "--quiet", "--", sys.executable, script)
    assert r.returncode == 3, r.stderr  # the program's own status
    assert "Traceback" not in r.stderr and "Exception in thread" not in r.stderr, r.stderr
    results = json.loads(r.stdout.splitlines()[-1])
    got = {k: None if v is None else (v[0], v[1]) for k, v in results.items()}
    for label, (kind, start) in EXPECTED.items():
        assert got[label] is not None, f"{label}: no error at the call"
        assert got[label][0] == kind and got[label][1].startswith(start), (label, got[label])
    summary = cw.show()
    assert summary["status"] == "failed" and summary["exit_code"] == 3
    assert summary["steps"]["count"] == 5  # only the good steps, none of the bad ones
    assert summary["steps"]["samples_total"] == 160


def test_a_pue_past_the_configurations_range_is_refused(cw: Any) -> None:
    # The configuration file takes 1 to 10: the flag is held to the same.
    for value in ("1e308", "11", "0.9"):
        r = cw("run", "--pue", value, "--", "true")
        assert r.returncode == 2, (value, r.stderr)
        assert "PUE" in r.stderr and "10" in r.stderr and "Traceback" not in r.stderr
    assert cw("run", "--quiet", "--pue", "1.4", "--", "true").returncode == 0


FULL_DISK = (
    SOURCE
    + """
import resource, signal, sys, time
import computewatch

with computewatch.track(name="full-disk") as r:
    for _ in range(5):
        r.step(samples=1)
    wait_for_spooled_steps(r, 5)  # the background thread writes these (late on a busy machine)
    # From here every write past the spool file's current size fails (EFBIG), as on a full
    # disk; SIGXFSZ is ignored so that the write reports the error instead of killing us.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (1, resource.RLIM_INFINITY))
    for _ in range(3):
        for _ in range(100):
            r.step(samples=1)
        time.sleep(0.4)
print("program done", flush=True)
sys.exit(4)
"""
)


def test_a_failing_spool_write_is_one_warning_and_the_status_is_the_programs(
    cw: Any, make_script: Callable[[str, str], Path]
) -> None:
    script = make_script("full_disk.py", FULL_DISK)
    r = cw("run", "--quiet", "--", sys.executable, script)
    assert r.returncode == 4, r.stderr
    assert r.stdout == "program done\n"
    warnings = [line for line in r.stderr.splitlines() if "warning" in line]
    assert len(warnings) == 1, r.stderr
    assert warnings[0].startswith("computewatch: warning: steps are being lost")
    assert "File too large" in warnings[0]
    assert "Traceback" not in r.stderr
    summary = cw.show()
    assert (summary["status"], summary["exit_code"]) == ("failed", 4)
    assert summary["steps"]["count"] == 5  # what was written before the disk filled up


TRACK_MISUSE = """
import json
import computewatch

results = {}

def attempt(label, **kw):
    try:
        computewatch.track(**kw)
    except (TypeError, ValueError) as e:
        results[label] = [type(e).__name__, str(e)]
    else:
        results[label] = None

attempt("tags str", tags="x")
attempt("interval str", interval="1")
attempt("interval nan", interval=float("nan"))
attempt("interval small", interval=0.001)
attempt("flops_per_step str", flops_per_step="x")
attempt("flops_per_token zero", flops_per_token=0)
attempt("peak_flops str", peak_flops="x")
attempt("recompute bad", recompute="half")
attempt("recompute str number", recompute="1.5")
attempt("total_steps str", total_steps="5")
attempt("total_steps zero", total_steps=0)
attempt("db int", db=5)
attempt("gpu_backend int", gpu_backend=3)
attempt("log_to str", log_to="mlflow")
attempt("model int", model=3)
attempt("parameters str", model="m", parameters="x")

# The context-manager form raises before the block and before any sampler starts.
try:
    with computewatch.track(name="never", flops_per_step="x"):
        results["block ran"] = True
except TypeError:
    pass
print(json.dumps(results))
"""

TRACK_EXPECTED = {
    "tags str": ("TypeError", "tags must be a mapping"),
    "interval str": ("TypeError", "interval must be a number"),
    "interval nan": ("ValueError", "interval must be a finite number"),
    "interval small": ("ValueError", "interval must be between 0.05 and 3600 seconds"),
    "flops_per_step str": ("TypeError", "flops_per_step must be a number"),
    "flops_per_token zero": ("ValueError", "flops_per_token: FLOPs must be a positive number"),
    "peak_flops str": ("TypeError", "peak_flops must be a number"),
    "recompute bad": ("ValueError", "recompute must be 'none', 'full' or a number"),
    "recompute str number": ("ValueError", "recompute must be 'none', 'full' or a number"),
    "total_steps str": ("TypeError", "total_steps must be an int"),
    "total_steps zero": ("ValueError", "total_steps must be at least 1"),
    "db int": ("TypeError", "db must be a path"),
    "gpu_backend int": ("TypeError", "gpu_backend must be a str"),
    "log_to str": ("TypeError", "log_to takes a list of trackers"),
    "model int": ("TypeError", "model must be a str"),
    "parameters str": ("TypeError", "parameters must be a number"),
}


def test_track_checks_its_arguments_before_anything_starts(
    cw: Any, make_script: Callable[[str, str], Path]
) -> None:
    """Standalone (no supervisor): a bad argument raises in track() itself, so no sampler
    starts, no database is made and no interrupted run is left behind."""
    script = make_script("track_misuse.py", TRACK_MISUSE)
    r = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        env=cw.env(),
        cwd=cw.tmp,
        timeout=120,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    assert r.stderr == "", r.stderr  # no "[computewatch] ... without closing the run"
    results = json.loads(r.stdout.splitlines()[-1])
    assert "block ran" not in results
    for label, (kind, start) in TRACK_EXPECTED.items():
        got = results[label]
        assert got is not None, f"{label}: accepted"
        assert got[0] == kind and got[1].startswith(start), (label, got)
    assert set(results) == set(TRACK_EXPECTED)
    assert not cw.home.exists() or not cw.db.exists()  # nothing was started or stored


CONFIG_VALUES = """
import computewatch

class Opaque:
    def __repr__(self):
        return "Opaque(lr=0.1)"

with computewatch.track(config={"obj": Opaque()}) as run:
    run.config(x=Opaque(), nan=float("nan"), ok=3)
    run.step(samples=1)
"""


def test_config_values_that_are_not_json_are_stored_as_their_repr(
    cw: Any, make_script: Callable[[str, str], Path]
) -> None:
    script = make_script("config_values.py", CONFIG_VALUES)
    r = cw("run", "--quiet", "--", sys.executable, script)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    config = cw.show()["config"]
    assert config == {"obj": "Opaque(lr=0.1)", "x": "Opaque(lr=0.1)", "nan": "nan", "ok": 3}
