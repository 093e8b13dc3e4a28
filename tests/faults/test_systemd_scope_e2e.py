"""``computewatch run`` through a systemd transient scope, with a fake ``systemd-run`` on PATH
and a fake user manager (``$XDG_RUNTIME_DIR/systemd/private``): this host runs no systemd.
The fake does what systemd-run --scope does for the command, as seen from outside: the
scope's cgroup appears (a directory the fake makes in a cgroup-v2 hierarchy the test mounts,
``<root>/unified`` as on systemd's hybrid hosts, so that the run's own cgroup cannot be made
at ``<root>``), the process moves itself into it and execs the command. And its failures:
refusing (exit 1 before the exec), hanging, missing. Every time the command runs once."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from computewatch.sources.cgroup import SCOPE_START_TIMEOUT

FAKE = """
import os, sys, time
args = sys.argv[1:]
if args == ["--version"]:
    print("systemd 255 (255.4-fake)")
    sys.exit(0)
mode = os.environ.get("FAKE_SYSTEMD_RUN", "ok")
if mode == "refuse":
    print("Failed to start transient scope unit: Access denied", file=sys.stderr)
    sys.exit(1)
if mode == "hang":
    time.sleep(600)
cmd = args[args.index("--") + 1:]
unit = next(a.split("=", 1)[1] for a in args if a.startswith("--unit="))
parent = os.environ.get("FAKE_SCOPE_PARENT")
if parent:
    d = os.path.join(parent, unit + ".scope")
    os.mkdir(d)
    if os.environ.get("FAKE_COLLECT"):  # the manager's part: remove the scope once empty
        worker = os.fork()
        if worker == 0:
            if os.fork() == 0:
                for want in ("populated 1", "populated 0"):  # filled, then emptied
                    while True:
                        with open(os.path.join(d, "cgroup.events")) as f:
                            if want in f.read():
                                break
                        time.sleep(0.001)
                os.rmdir(d)
            os._exit(0)
        os.waitpid(worker, 0)  # nothing of ours left for the command to wait for
    with open(os.path.join(d, "cgroup.procs"), "w") as f:
        f.write(f"{os.getpid()}\\n")
os.execv(cmd[0], cmd)
"""

ONCE = """
import os, sys
with open(os.environ["RAN"], "a") as f:
    f.write(f"{os.getpid()} {sys.argv[1:]}\\n")
print("out of the command")
print("err of the command", file=sys.stderr)
"""

DOUBLE_FORK = """
import os, time
def burn(seconds):
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass
if os.fork() == 0:
    if os.fork() == 0:  # reparented to init once the worker exits
        burn(2.0)
        open(os.environ["DONE"], "w").close()
        os._exit(0)
    os._exit(0)
os.wait()
while not os.path.exists(os.environ["DONE"]):
    time.sleep(0.05)
"""


@pytest.fixture
def systemd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fake user manager and a fake systemd-run first on PATH; the run's own cgroup
    unusable (COMPUTEWATCH_CGROUP_ROOT names no cgroup v2). Returns the fake's folder."""
    rt = tmp_path / "xdg"
    (rt / "systemd").mkdir(parents=True)
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(rt / "systemd" / "private"))
    s.close()
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    fake = bin_ / "systemd-run"
    fake.write_text(f"#!{sys.executable} -IS\n{FAKE}")  # no site: a quick start
    fake.chmod(0o755)
    nocg = tmp_path / "nocg"
    nocg.mkdir()
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(rt))
    monkeypatch.setenv("PATH", f"{bin_}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv("COMPUTEWATCH_CGROUP_ROOT", str(nocg))
    monkeypatch.setenv("RAN", str(tmp_path / "ran"))
    return bin_


def _ran(tmp_path: Path) -> list[str]:
    return (tmp_path / "ran").read_text().splitlines()


@pytest.fixture
def hybrid(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """``<root>/unified``: a cgroup-v2 hierarchy (root only: the CI runs as root), with the
    slice the fake makes its scopes in."""
    if os.geteuid() != 0:
        pytest.skip("mounting cgroup2 needs root (CI runs as root)")
    root = tmp_path / "cg"
    (root / "unified").mkdir(parents=True)
    subprocess.run(["mount", "-t", "cgroup2", "none", str(root / "unified")], check=True)
    slice_ = root / "unified" / f"cwtest-{os.getpid()}.slice"
    try:
        slice_.mkdir()
        monkeypatch.setenv("COMPUTEWATCH_CGROUP_ROOT", str(root))
        monkeypatch.setenv("FAKE_SCOPE_PARENT", str(slice_))
        yield slice_
    finally:
        for d in slice_.glob("*.scope"):
            d.rmdir()
        slice_.rmdir()
        subprocess.run(["umount", "-l", str(root / "unified")], check=False)


@pytest.mark.slow
def test_double_forked_grandchild_counted_by_the_scope(
    cw: Any,
    systemd: Path,
    hybrid: Path,
    make_script: Callable[[str, str], Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    script = make_script("double_fork.py", DOUBLE_FORK)
    monkeypatch.setenv("DONE", str(tmp_path / "done"))
    r = cw("run", "--quiet", "--interval", "0.2", "--", sys.executable, script)
    assert r.returncode == 0, r.stderr
    s = cw.show()
    assert s["cpu"]["method"] == "systemd scope", (s["cpu"], s["notes"])
    assert s["cpu"]["seconds_total"] >= 1.8, s["cpu"]
    assert (hybrid / f"computewatch-{s['id']}.scope").is_dir()  # systemd's to remove
    assert not [n for n in s["notes"] if "process tree" in n], s["notes"]
    assert "(systemd scope)" in cw("show", "last").stdout


def test_the_command_runs_once_in_the_scope_with_its_arguments(
    cw: Any, systemd: Path, make_script: Callable[[str, str], Path], tmp_path: Path
) -> None:
    script = make_script("once.py", ONCE)
    r = cw("run", "--quiet", "--", sys.executable, script, "$HOME", "a b")
    assert r.returncode == 0, r.stderr
    ran = _ran(tmp_path)
    assert len(ran) == 1 and ran[0].endswith("['$HOME', 'a b']"), ran  # "$HOME" not expanded
    assert "out of the command" in r.stdout and "err of the command" in r.stderr
    s = cw.show()
    # the fake made no scope here (no cgroup v2 mounted): the tree counts, and says why
    assert s["cpu"]["method"] == "process tree"
    assert any("is not in the scope computewatch-" in n for n in s["notes"]), s["notes"]


def test_a_refusing_systemd_run_leaves_the_command_to_start_once(
    cw: Any,
    systemd: Path,
    make_script: Callable[[str, str], Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FAKE_SYSTEMD_RUN", "refuse")
    script = make_script("once.py", ONCE + "raise SystemExit(1)\n")
    r = cw("run", "--quiet", "--", sys.executable, script)
    assert r.returncode == 1, r.stderr  # the command's own status, not systemd-run's
    assert len(_ran(tmp_path)) == 1
    s = cw.show()
    assert s["cpu"]["method"] == "process tree"
    assert any(
        "systemd-run failed (exit status 1)" in n and "started without a systemd scope" in n
        for n in s["notes"]
    ), s["notes"]


def test_a_hanging_systemd_run_is_stopped_and_the_command_starts_once(
    cw: Any,
    systemd: Path,
    make_script: Callable[[str, str], Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FAKE_SYSTEMD_RUN", "hang")
    script = make_script("once.py", ONCE)
    r = cw("run", "--quiet", "--", sys.executable, script)
    assert r.returncode == 0, r.stderr
    assert len(_ran(tmp_path)) == 1
    s = cw.show()
    assert s["cpu"]["method"] == "process tree"
    want = f"did not start the command within {SCOPE_START_TIMEOUT} s"
    assert any(want in n for n in s["notes"]), s["notes"]


def test_a_missing_systemd_run_is_said(
    cw: Any,
    systemd: Path,
    make_script: Callable[[str, str], Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    (systemd / "systemd-run").unlink()
    monkeypatch.setenv("PATH", str(systemd))  # this host's /usr/bin/systemd-run off PATH too
    script = make_script("once.py", ONCE)
    r = cw("run", "--quiet", "--", sys.executable, script)
    assert r.returncode == 0, r.stderr
    assert len(_ran(tmp_path)) == 1
    s = cw.show()
    assert any("systemd-run is not on PATH" in n for n in s["notes"]), s["notes"]


def test_a_command_that_cannot_run_fails_as_without_a_scope(cw: Any, systemd: Path) -> None:
    r = cw("run", "--quiet", "--", "no-such-command-xyz")
    assert r.returncode == 127 and "command not found: no-such-command-xyz" in r.stderr


def test_off_turns_the_scope_off(
    cw: Any,
    systemd: Path,
    make_script: Callable[[str, str], Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COMPUTEWATCH_CGROUP_ROOT", "off")
    monkeypatch.setenv("FAKE_SYSTEMD_RUN", "refuse")  # would leave a note if asked
    script = make_script("once.py", ONCE)
    assert cw("run", "--quiet", "--", sys.executable, script).returncode == 0
    assert len(_ran(tmp_path)) == 1
    assert not [n for n in cw.show()["notes"] if "systemd" in n]


LEAVES_ITS_SCOPE = (
    DOUBLE_FORK
    + """
time.sleep(0.6)  # a reading or more with the whole burn counted
with open(os.path.join(os.environ["FAKE_SCOPE_PARENT"], "cgroup.procs"), "w") as f:
    f.write(f"{os.getpid()}\\n")  # the scope empties: the fake manager removes it
time.sleep(0.6)  # readings that find it gone
"""
)


@pytest.mark.slow
def test_a_scope_removed_before_the_final_reading_is_said(
    cw: Any,
    systemd: Path,
    hybrid: Path,
    make_script: Callable[[str, str], Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    script = make_script("leaves.py", LEAVES_ITS_SCOPE)
    monkeypatch.setenv("DONE", str(tmp_path / "done"))
    monkeypatch.setenv("FAKE_COLLECT", "1")
    r = cw("run", "--quiet", "--interval", "0.2", "--", sys.executable, script)
    assert r.returncode == 0, r.stderr
    s = cw.show()
    assert not (hybrid / f"computewatch-{s['id']}.scope").exists()  # collected
    assert s["cpu"]["method"] == "systemd scope", (s["cpu"], s["notes"])
    assert s["cpu"]["seconds_total"] >= 1.8, s["cpu"]  # the last figures stand
    said = [n for n in s["notes"] if "before the final reading" in n]
    assert len(said) == 1 and f"computewatch-{s['id']}.scope" in said[0], s["notes"]
