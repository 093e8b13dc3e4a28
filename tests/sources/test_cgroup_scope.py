"""The systemd transient scope's pieces (``sources/cgroup.py``): finding a reachable manager
and its systemd-run (a fake runtime dir and a fake systemd-run), the scope's cgroup from a
fake procfs and cgroup tree, and :func:`await_scope_exec` on real child processes playing
systemd-run: one that execs the command, one that fails, one that hangs. The whole path
through ``computewatch run`` is in tests/faults/test_systemd_scope_e2e.py."""

from __future__ import annotations

import os
import signal
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from computewatch.analysis.aggregates import RunAggregates
from computewatch.sources import cgroup as cgroup_mod
from computewatch.sources.cgroup import (
    SCOPE_METHOD,
    CgroupCpuSource,
    ScopeCgroup,
    SystemdRun,
    await_scope_exec,
    find_systemd_run,
    scope_cgroup,
)

STAT = "usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\n"


def _fake_systemd_run(d: Path, version: str = "systemd 255 (255.4-1)") -> Path:
    d.mkdir(parents=True, exist_ok=True)
    exe = d / "systemd-run"
    exe.write_text(f"#!/bin/sh\n[ \"$1\" = --version ] && echo '{version}' && exit 0\nexit 1\n")
    exe.chmod(0o755)
    return exe


def _runtime(tmp_path: Path) -> Path:
    """$XDG_RUNTIME_DIR with the user manager's private socket."""
    rt = tmp_path / "xdg"
    (rt / "systemd").mkdir(parents=True)
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(rt / "systemd" / "private"))
    s.close()
    return rt


def test_no_manager_costs_nothing_and_says_nothing(tmp_path: Path) -> None:
    bin_ = _fake_systemd_run(tmp_path / "bin")
    env = {"PATH": str(bin_.parent), "XDG_RUNTIME_DIR": str(tmp_path / "none")}
    assert find_systemd_run(env, euid=1000, run_root=str(tmp_path)) is None
    assert find_systemd_run({"PATH": str(bin_.parent)}, euid=1000) is None
    # root without a booted systemd (/run/systemd/system absent) and no user manager
    assert find_systemd_run(env, euid=0, run_root=str(tmp_path)) is None


def test_user_manager_found(tmp_path: Path) -> None:
    bin_ = _fake_systemd_run(tmp_path / "bin")
    env = {"PATH": str(bin_.parent), "XDG_RUNTIME_DIR": str(_runtime(tmp_path))}
    sd = find_systemd_run(env, euid=1000, run_root=str(tmp_path))
    assert sd == SystemdRun(str(bin_), True, 255)


def test_system_manager_as_root(tmp_path: Path) -> None:
    bin_ = _fake_systemd_run(tmp_path / "bin", "systemd 252 (252.39-1~deb12u2)")
    (tmp_path / "run" / "systemd" / "system").mkdir(parents=True)
    env = {"PATH": str(bin_.parent)}
    sd = find_systemd_run(env, euid=0, run_root=str(tmp_path / "run"))
    assert sd == SystemdRun(str(bin_), False, 252)
    # not root: the system manager is not ours to ask (polkit), and no user manager here
    assert find_systemd_run(env, euid=1000, run_root=str(tmp_path / "run")) is None


def test_manager_without_systemd_run(tmp_path: Path) -> None:
    env = {"PATH": str(tmp_path / "empty"), "XDG_RUNTIME_DIR": str(_runtime(tmp_path))}
    why = find_systemd_run(env, euid=1000)
    assert isinstance(why, str) and "systemd-run is not on PATH" in why


def test_systemd_run_that_says_no_version(tmp_path: Path) -> None:
    bin_ = _fake_systemd_run(tmp_path / "bin", "what?")
    env = {"PATH": str(bin_.parent), "XDG_RUNTIME_DIR": str(_runtime(tmp_path))}
    why = find_systemd_run(env, euid=1000)
    assert isinstance(why, str) and "no version" in why


def test_argv_turns_expansion_off_where_systemd_run_expands() -> None:
    new = SystemdRun("/usr/bin/systemd-run", True, 254).argv("computewatch-r1", ["/bin/x", "$A"])
    assert new == [
        "/usr/bin/systemd-run", "--user", "--scope", "--quiet", "--collect",
        "--no-ask-password", "--expand-environment=no", "--unit=computewatch-r1",
        "--", "/bin/x", "$A",
    ]  # fmt: skip
    old = SystemdRun("/bin/systemd-run", False, 252).argv("computewatch-r1", ["/bin/x"])
    assert "--expand-environment=no" not in old and "--user" not in old  # 252 knows no flag


def _tree(tmp_path: Path, cg_path: str, *, unified: bool = False) -> tuple[Path, Path]:
    """A cgroup-v2 mount (``<root>`` or, hybrid, ``<root>/unified``) with ``cg_path`` in it,
    and a procfs whose process 4242 is there."""
    root = tmp_path / "cg"
    v2 = root / "unified" if unified else root
    v2.mkdir(parents=True)
    (v2 / "cgroup.controllers").write_text("")
    d = v2 / cg_path.lstrip("/")
    d.mkdir(parents=True)
    (d / "cpu.stat").write_text(STAT)
    (d / "cgroup.procs").write_text("4242\n")
    proc = tmp_path / "proc" / "4242"
    proc.mkdir(parents=True)
    (proc / "cgroup").write_text(f"0::{cg_path}\n")
    return root, tmp_path / "proc"


SCOPE = "/user.slice/user-1000.slice/user@1000.service/app.slice/computewatch-r1.scope"


@pytest.mark.parametrize("unified", [False, True], ids=["unified", "hybrid"])
def test_scope_cgroup_found_and_counted(tmp_path: Path, unified: bool) -> None:
    root, proc = _tree(tmp_path, SCOPE, unified=unified)
    sc = scope_cgroup(4242, "computewatch-r1", cgroup_root=str(root), procfs_root=str(proc))
    assert isinstance(sc, ScopeCgroup), sc
    assert sc.method == SCOPE_METHOD and sc.unit == "computewatch-r1"
    src = CgroupCpuSource(sc.path)
    got = {r.name: r for r in src.read()}
    total = got["run_cgroup_cpu_seconds_total"]
    assert total.value == 2.5 and dict(total.labels) == {"method": "systemd scope"}
    # systemd leaves the scope to processes that outlived the run, and says so; never rmdir
    assert "1 process(es) of the run outlived it" in (sc.remove() or "")
    assert sc.path.is_dir()
    (sc.path / "cgroup.procs").write_text("")
    assert sc.remove() is None
    # collected by systemd before the final reading: the last figures stand, and that is said
    for f in sc.path.iterdir():
        f.unlink()
    sc.path.rmdir()
    assert src.read()[0].value == 2.5 and sc.remove() is None
    assert src.read()[0].value == 2.5
    assert len(src.notes) == 1 and "before the final reading" in src.notes[0], src.notes


def test_scope_cgroup_refuses_what_is_not_the_scope(tmp_path: Path) -> None:
    root, proc = _tree(tmp_path, "/user.slice/session-3.scope")
    why = scope_cgroup(4242, "computewatch-r1", cgroup_root=str(root), procfs_root=str(proc))
    assert isinstance(why, str) and "not in the scope computewatch-r1.scope" in why
    why = scope_cgroup(4243, "computewatch-r1", cgroup_root=str(root), procfs_root=str(proc))
    assert isinstance(why, str) and "ended before" in why
    root, proc = _tree(tmp_path / "b", SCOPE)
    (root / "cgroup.controllers").unlink()
    why = scope_cgroup(4242, "computewatch-r1", cgroup_root=str(root), procfs_root=str(proc))
    assert isinstance(why, str) and "no cgroup v2 mounted" in why


def test_the_runs_own_cgroup_keeps_its_unlabelled_series(tmp_path: Path) -> None:
    d = tmp_path / "computewatch-r1"
    d.mkdir()
    (d / "cpu.stat").write_text(STAT)
    src = CgroupCpuSource(d)
    r = src.read()[0]
    assert r.labels == () and src.method == "cgroup"
    (d / "cpu.stat").unlink()  # removed by us after the final reading: nothing to say
    assert src.read()[0].value == 2.5 and src.notes == []


def test_summary_names_the_scope(tmp_path: Path) -> None:
    d = tmp_path / "computewatch-r1.scope"
    d.mkdir()
    (d / "cpu.stat").write_text(STAT)
    r = CgroupCpuSource(d).read()[0]
    for labels, method in ((r.labels, "systemd scope"), ((), "cgroup")):
        agg = RunAggregates()
        agg.add_series(1, r.name, labels)
        agg.add_samples([("run", 1, 1, r.value)], {1: 0.0})
        assert agg.cpu_method() == method


# --- await_scope_exec on real processes ------------------------------------------------

LAUNCHER = """
import os, sys, time
mode = os.environ["MODE"]
args = sys.argv[1:]
cmd = args[args.index("--") + 1:]
if mode == "fail":
    sys.exit(3)
if mode == "crash":
    os.abort()
if mode == "hang":
    if os.environ.get("READY"):  # its signal handlers are in place: the test may signal it
        open(os.environ["READY"], "w").close()
    time.sleep(600)
if mode == "slow":
    time.sleep(0.5)
os.execv(cmd[0], cmd)
"""


@pytest.fixture
def launcher(tmp_path: Path) -> Iterator[Path]:
    exe = tmp_path / "systemd-run"
    exe.write_text(f"#!{sys.executable} -IS\n{LAUNCHER}")  # no site: a quick start
    exe.chmod(0o755)
    yield exe


def _start(launcher: Path, mode: str, command: list[str], ready: Path | None = None) -> int:
    argv = [str(launcher), "--scope", "--unit=computewatch-r1", "--", *command]
    env = {**os.environ, "MODE": mode, "READY": str(ready or "")}
    return os.posix_spawn(str(launcher), argv, env)


def _await(pid: int, command: str, **kw: float) -> object:
    return await_scope_exec(
        pid, "--unit=computewatch-r1", "computewatch-r1", b"systemd-run",
        os.path.basename(command).encode()[:15], **kw,
    )  # fmt: skip


def _gone(pid: int) -> bool:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return False


def test_exec_seen_the_command_runs_in_the_same_process(launcher: Path) -> None:
    pid = _start(launcher, "slow", ["/bin/sleep", "2"])
    got = _await(pid, "/bin/sleep")
    assert got.started and got.scope is None  # this host's cgroup is no scope
    assert "not in the scope" in (got.note or "") or "no cgroup v2" in (got.note or "")
    assert Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0] == b"/bin/sleep"
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)


def test_a_command_that_ended_at_once_counts_as_run(launcher: Path) -> None:
    pid = _start(launcher, "ok", ["/bin/true"])
    while os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
        time.sleep(0.01)  # exited before it is looked at: only its comm tells
    got = _await(pid, "/bin/true")
    assert got.started and got.scope is None
    assert os.waitpid(pid, 0)[1] == 0  # left for the caller to reap: its status is the run's


def test_systemd_run_failing_is_reaped_and_the_command_never_ran(launcher: Path) -> None:
    pid = _start(launcher, "fail", ["/bin/true"])
    got = _await(pid, "/bin/true")
    assert not got.started and "systemd-run failed (exit status 3)" in (got.note or "")
    assert _gone(pid)


def test_systemd_run_crashing_is_reaped_and_the_command_never_ran(launcher: Path) -> None:
    pid = _start(launcher, "crash", ["/bin/true"])
    got = _await(pid, "/bin/true")
    assert not got.started and "systemd-run failed (killed by SIGABRT)" in (got.note or "")
    assert _gone(pid)


def test_systemd_run_hanging_is_stopped_and_killed_before_its_exec(launcher: Path) -> None:
    pid = _start(launcher, "hang", ["/bin/true"])
    got = _await(pid, "/bin/true", timeout=0.3)
    assert not got.started and "did not start the command within 0.3 s" in (got.note or "")
    assert _gone(pid)


def test_killed_by_a_signal_before_its_exec_is_not_restarted(
    launcher: Path, tmp_path: Path
) -> None:
    ready = tmp_path / "ready"
    pid = _start(launcher, "hang", ["/bin/true"], ready)
    deadline = time.monotonic() + 60
    while not ready.exists():  # a SIGINT during the interpreter's start aborts it instead
        assert time.monotonic() < deadline, "the launcher never started"
        time.sleep(0.01)
    os.kill(pid, signal.SIGINT)  # as Ctrl-C would
    got = _await(pid, "/bin/true")
    assert got.started and "killed by SIGINT" in (got.note or "")
    assert os.WIFSIGNALED(os.waitpid(pid, 0)[1])


def test_same_comm_for_launcher_and_command_never_runs_it_twice(launcher: Path) -> None:
    # The command is itself named systemd-run: an exited process may have run it.
    pid = _start(launcher, "fail", ["/bin/true"])
    got = await_scope_exec(
        pid, "--unit=computewatch-r1", "computewatch-r1", b"systemd-run", b"systemd-run"
    )
    assert got.started
    os.waitpid(pid, 0)


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(stat=st.binary(max_size=200), cg=st.binary(max_size=200))
def test_proc_files_of_any_shape_never_raise(tmp_path: Path, stat: bytes, cg: bytes) -> None:
    """/proc/<pid>/stat (a comm may hold spaces and parentheses) and /proc/<pid>/cgroup as the
    kernel, or a racing exit, may leave them: a value or None, never an exception."""
    d = tmp_path / "proc" / "7"
    d.mkdir(parents=True, exist_ok=True)
    (d / "stat").write_bytes(stat)
    (d / "cgroup").write_bytes(cg)
    got = cgroup_mod._state_comm(str(tmp_path / "proc"), 7)
    assert got is None or (isinstance(got[0], str) and isinstance(got[1], bytes))
    sc = scope_cgroup(7, "computewatch-r1", cgroup_root=str(tmp_path), procfs_root=str(d.parent))
    assert isinstance(sc, str)  # no scope there: a reason


def test_comm_with_parentheses_and_spaces(tmp_path: Path) -> None:
    d = tmp_path / "proc" / "7"
    d.mkdir(parents=True)
    (d / "stat").write_bytes(b"7 (a) (b c) Z 1 7 7 0 -1\n")
    assert cgroup_mod._state_comm(str(tmp_path / "proc"), 7) == ("Z", b"a) (b c")
