"""The shared procfs parser and process cache, against recorded trees."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from computewatch.sources.procfs import (
    CLK_TCK,
    ENVIRON_LIMIT,
    PF_KTHREAD,
    PidBirths,
    ProcessCache,
    StatHandle,
    environ_values,
    mid_exec,
    parse_stat,
    read_environ,
    split_stat,
    stat_cpu_seconds,
    stat_fields,
    status_effective_uid,
    status_uid,
)


def stat_text(pid: int, comm: str, state: str = "S", ppid: int = 1, ticks: int = 0) -> str:
    # proc(5): pid (comm) state ppid ... utime(14) stime(15) cutime(16) cstime(17) ...
    fields = [state, str(ppid)] + ["0"] * 9 + [str(ticks), str(ticks), "1", "1"] + ["0"] * 30
    return f"{pid} ({comm}) " + " ".join(fields) + "\n"


def write_proc(root: Path, pid: int, comm: str, **kw: object) -> Path:
    d = root / str(pid)
    d.mkdir(parents=True, exist_ok=True)
    (d / "stat").write_text(stat_text(pid, comm, **kw))  # type: ignore[arg-type]
    return d


def test_comm_with_spaces_and_parens() -> None:
    raw = stat_text(7, "a) (b c)", ticks=5).encode()
    comm, fields = split_stat(raw)
    assert comm == b"a) (b c)"
    assert parse_stat(raw)[0] == "a) (b c)"
    assert fields[0] == b"S" and fields[1] == b"1"
    assert stat_cpu_seconds(fields) == pytest.approx(12 / CLK_TCK)
    assert stat_cpu_seconds(fields, children=False) == pytest.approx(10 / CLK_TCK)


def test_dead_or_empty_is_gone(tmp_path: Path) -> None:
    d = write_proc(tmp_path, 3, "x", state="X")
    fd = os.open(d / "stat", os.O_RDONLY)
    try:
        assert stat_fields(fd) is None
    finally:
        os.close(fd)
    (d / "stat").write_text("")
    assert StatHandle(3, str(d / "stat"), -1).fields() is None
    assert StatHandle(4, str(tmp_path / "4" / "stat"), -1).read() is None


def test_status_uids() -> None:
    status = b"Name:\tx\nUid:\t1000\t1001\t1000\t1000\nGid:\t1\t1\t1\t1\n"
    assert status_uid(status) == 1000
    assert status_effective_uid(status) == 1001
    with pytest.raises(ValueError):
        status_uid(b"Name:\tx\n")


@dataclass
class _Rec:
    stat: StatHandle


def test_cache_budget_births_and_drop(tmp_path: Path) -> None:
    for pid in (10, 11, 12):
        write_proc(tmp_path, pid, f"p{pid}")
    (tmp_path / "loadavg").write_text("0.00 0.00 0.00 1/100 12\n")
    cache: ProcessCache[_Rec] = ProcessCache(str(tmp_path), max_open=2)
    new = cache.new_pids()
    assert new == {10, 11, 12}
    for pid in sorted(new):
        h = cache.open_stat(pid)
        assert h is not None
        cache.procs[pid] = _Rec(h)
    assert [cache.procs[p].stat.fd >= 0 for p in (10, 11, 12)] == [True, True, False]
    assert cache.procs[12].stat.fields() is not None  # past the budget: read by path
    assert cache.new_pids() is None  # no birth since: no listing
    assert cache.new_pids(force=True) == set()
    write_proc(tmp_path, 13, "p13")
    (tmp_path / "loadavg").write_text("0.00 0.00 0.00 1/100 13\n")
    assert cache.new_pids() == {13}
    cache.drop(cache.procs[10])
    assert 10 not in cache.procs
    h = cache.open_stat(13)  # the dropped descriptor freed a place in the budget
    assert h is not None and h.fd >= 0
    cache.release(h)
    cache.close()
    assert not cache.procs


def test_births_without_loadavg(tmp_path: Path) -> None:
    b = PidBirths(str(tmp_path))
    assert b.last_pid() is None
    assert b.moved() and b.moved()  # unknown: always list
    b.close()


def test_environ_values_first_entry_wins_and_bytes_are_escaped() -> None:
    raw = b"A=1\0COMPUTEWATCH_RUN_ID=r1\0B=caf\xe9\0COMPUTEWATCH_RUN_ID=r2\0EMPTY=\0C=x=y"
    got = environ_values(raw, ("COMPUTEWATCH_RUN_ID", "B", "EMPTY", "C", "MISSING", "A"))
    assert got == {"COMPUTEWATCH_RUN_ID": "r1", "B": "caf\\xe9", "EMPTY": "", "C": "x=y", "A": "1"}
    # a name is matched whole, at the start of an entry, never inside another name or a value
    assert environ_values(b"XA=1\0V=A=2\0", ("A",)) == {}
    assert environ_values(b"", ("A",)) == {}
    assert environ_values(b"A=cut-by-the-limi", ("A",)) == {"A": "cut-by-the-limi"}


def test_read_environ_of_a_real_process_keeps_only_the_names_asked() -> None:
    env = {b"PATH": os.fsencode(os.environ["PATH"]), b"COMPUTEWATCH_RUN_ID": b"0123abcd",
           b"SECRET": b"hunter2", b"ODD": b"\xff\xfeok"}  # fmt: skip
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys; print('up', flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
    )  # fmt: skip
    try:
        # Popen returns once the exec has begun (its close-on-exec pipe closes), which is before
        # the kernel sets the new image's environment bounds: until then environ reads empty.
        # The child's first line says the exec is over.
        assert child.stdout is not None and child.stdout.readline() == b"up\n"
        got = read_environ("/proc", child.pid, ("COMPUTEWATCH_RUN_ID", "ODD", "NOT_SET"))
        assert got == {"COMPUTEWATCH_RUN_ID": "0123abcd", "ODD": "\\xff\\xfeok"}
    finally:
        child.communicate(b"")
    # once reaped, the PID is gone: no environment, which is not a refusal
    assert read_environ("/proc", child.pid, ("COMPUTEWATCH_RUN_ID",)) == {}


def test_mid_exec_is_an_empty_command_line_of_a_live_user_process() -> None:
    live = parse_stat(stat_text(7, "python").encode())[1]
    zombie = parse_stat(stat_text(7, "python", state="Z").encode())[1]
    kthread = list(live)
    kthread[6] = str(PF_KTHREAD).encode()
    assert mid_exec(live, b"") and mid_exec(live, [])
    assert not mid_exec(live, b"p") and not mid_exec(live, ["python"])
    assert not mid_exec(live, None)  # unreadable: nothing known
    assert not mid_exec(zombie, b"") and not mid_exec(kthread, b"")


def test_a_zombie_has_an_empty_environment() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"], env={"COMPUTEWATCH_RUN_ID": "z"})
    try:
        while True:  # exited but not waited for: a zombie, without an address space
            with open(f"/proc/{child.pid}/stat", "rb") as f:
                if split_stat(f.read())[1][0] == b"Z":
                    break
            time.sleep(0.005)
        assert read_environ("/proc", child.pid, ("COMPUTEWATCH_RUN_ID",)) == {}
    finally:
        child.wait()


def test_another_users_environment_is_refused() -> None:
    """The kernel's ptrace check (proc(5), PTRACE_MODE_READ_FSCREDS): an unprivileged reader of
    a root process's environment gets EACCES, which reads as None, not as an empty one."""
    if os.geteuid() == 0:  # a forked reader drops to nobody and reads this (root) process
        target = os.getpid()
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: no pytest machinery past this point, only os._exit
            try:
                os.setgroups([])
                os.setresgid(65534, 65534, 65534)
                os.setresuid(65534, 65534, 65534)
                os.write(w, repr(read_environ("/proc", target, ("PATH",))).encode())
            finally:
                os._exit(0)
        os.close(w)
        with os.fdopen(r, "rb") as f:
            said = f.read()
        os.waitpid(pid, 0)
        assert said == b"None"
    else:  # an unprivileged test reads init's, which root owns
        assert os.stat("/proc/1").st_uid != os.geteuid(), "init is this user's: nothing to refuse"
        assert read_environ("/proc", 1, ("PATH",)) is None


def test_read_environ_reads_a_recorded_tree_within_its_limit(tmp_path: Path) -> None:
    d = write_proc(tmp_path, 9, "job")
    (d / "environ").write_bytes(b"A=" + b"x" * ENVIRON_LIMIT + b"\0B=late\0")
    got = read_environ(str(tmp_path), 9, ("A", "B"))
    assert got == {"A": "x" * (ENVIRON_LIMIT - 2)}  # B lies past the first MiB
    assert read_environ(str(tmp_path), 9, ("B",), limit=-1) == {"B": "late"}
    (d / "environ").unlink()
    (d / "environ").mkdir()  # a read error other than a gone process: refused
    assert read_environ(str(tmp_path), 9, ("A",)) is None
