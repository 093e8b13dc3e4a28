"""ProcessTreeSource: against the real /proc with real child processes, and against a recorded
procfs tree built in ``tmp_path`` (exact values, exits simulated by editing the files).

The real-process tests synchronise on lines the children print, never on sleeps, and compare
CPU seconds (not wall time), so a loaded machine makes them slower, not flaky.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from computewatch.readings import Kind, Labels, Reading, labels
from computewatch.sources.base import Source, SourceUnavailable
from computewatch.sources.process_tree import ProcessTreeSource

HZ = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")
PY = sys.executable

TREE_NAMES = {
    "tree_cpu_seconds_total": Kind.COUNTER,
    "tree_resident_memory_bytes": Kind.GAUGE,
    "tree_process_peak_resident_memory_bytes": Kind.GAUGE,
    "tree_processes": Kind.GAUGE,
    "tree_threads": Kind.GAUGE,
    "tree_read_bytes_total": Kind.COUNTER,
    "tree_written_bytes_total": Kind.COUNTER,
}


def by_key(readings: Sequence[Reading]) -> dict[tuple[str, Labels], float]:
    out = {(r.name, r.labels): r.value for r in readings}
    assert len(out) == len(readings), "a series appears twice in one read"
    return out


def tree_value(readings: Sequence[Reading], name: str) -> float:
    return by_key(readings)[(name, ())]


def proc_value(readings: Sequence[Reading], name: str, pid: int) -> float:
    vals = [r.value for r in readings if r.name == name and ("pid", str(pid)) in r.labels]
    assert len(vals) == 1, (name, pid, vals)
    return vals[0]


def pids_in(readings: Sequence[Reading]) -> set[int]:
    return {int(dict(r.labels)["pid"]) for r in readings if r.labels}


# -- real processes -----------------------------------------------------------------------------
BURN = """
import os, sys
def cpu():
    t = os.times()
    return t.user + t.system
def burn(seconds):
    end = cpu() + seconds
    x = 0
    while cpu() < end:
        for i in range(20000):
            x += i
"""

# Burns 0.3 CPU-s, says so, then waits for a line on stdin before exiting.
CHILD = BURN + "burn(0.3)\nprint('burned', flush=True)\nsys.stdin.readline()\n"

# Runs CHILD (argv[2]) through subprocess.run, which reaps it, then prints its own CPU seconds
# including its reaped children (os.times), then either waits for a line ("stay") or exits.
PARENT = (
    BURN
    + """
import subprocess
subprocess.run([sys.executable, "-c", sys.argv[2]], check=True)
t = os.times()
print(t.user + t.system + t.children_user + t.children_system, flush=True)
if sys.argv[1] == "stay":
    sys.stdin.readline()
"""
)


class Procs:
    """Child processes of one test, always killed, reaped and unpiped at teardown."""

    def __init__(self) -> None:
        self.started: list[subprocess.Popen[str]] = []

    def spawn(self, *argv: str, group: bool = False) -> subprocess.Popen[str]:
        p = subprocess.Popen(
            list(argv),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=group,
        )
        self.started.append(p)
        return p

    def python(self, code: str, *args: str) -> subprocess.Popen[str]:
        return self.spawn(PY, "-c", code, *args)

    @staticmethod
    def say(p: subprocess.Popen[str], line: str = "") -> None:
        assert p.stdin is not None
        p.stdin.write(line + "\n")
        p.stdin.flush()

    @staticmethod
    def hear(p: subprocess.Popen[str]) -> str:
        assert p.stdout is not None
        return p.stdout.readline().strip()

    def cleanup(self) -> None:
        for p in self.started:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    p.kill()
            p.communicate()


@pytest.fixture
def procs() -> Iterator[Procs]:
    ps = Procs()
    yield ps
    ps.cleanup()


@pytest.fixture
def opened() -> Iterator[list[ProcessTreeSource]]:
    """Sources to close at teardown (each holds descriptors)."""
    srcs: list[ProcessTreeSource] = []
    yield srcs
    for s in srcs:
        s.close()


def children_of(pid: int) -> set[int]:
    out = set()
    for e in os.listdir("/proc"):
        if not e.isdigit():
            continue
        try:
            raw = Path(f"/proc/{e}/stat").read_bytes()
        except OSError:
            continue
        if int(raw[raw.rindex(b")") + 2 :].split()[1]) == pid:
            out.add(int(e))
    return out


def comm(pid: int) -> str:
    return Path(f"/proc/{pid}/comm").read_text().rstrip("\n")


def test_is_a_source(opened: list[ProcessTreeSource]) -> None:
    src = ProcessTreeSource(os.getpid())
    opened.append(src)
    assert isinstance(src, Source)
    assert src.name == "process"


def test_discovers_children_started_later_and_grandchildren(
    procs: Procs, opened: list[ProcessTreeSource]
) -> None:
    tree = ProcessTreeSource(os.getpid())
    opened.append(tree)
    first = tree.read()
    assert os.getpid() in tree.pids
    for name, kind in TREE_NAMES.items():
        assert [r.kind for r in first if r.name == name and not r.labels] == [kind]
    assert pids_in(first) == set(tree.pids)
    # Started after the source: a shell with two grandchildren.
    sh = procs.spawn("sh", "-c", "sleep 600 & sleep 600 & echo ready; wait", group=True)
    assert procs.hear(sh) == "ready"
    grandchildren = children_of(sh.pid)
    assert len(grandchildren) == 2
    r = tree.read()
    assert {os.getpid(), sh.pid} | grandchildren <= set(tree.pids)
    assert {os.getpid(), sh.pid} | grandchildren <= pids_in(r)
    assert tree_value(r, "tree_processes") == len(tree.pids)
    # Per-process series carry pid and name labels.
    cpu_lbl = [x.labels for x in r if x.name == "process_cpu_seconds_total"]
    assert labels(pid=sh.pid, name=comm(sh.pid)) in cpu_lbl
    assert labels(pid=os.getpid(), name=comm(os.getpid())) in cpu_lbl
    assert proc_value(r, "process_resident_memory_bytes", sh.pid) > 0
    assert proc_value(r, "process_threads", sh.pid) == 1
    # Each process is listed once, with its command line.
    tree.read()
    listed = [p.pid for p in tree.new_processes]
    assert len(listed) == len(set(listed))
    assert {os.getpid(), sh.pid} | grandchildren <= set(listed)
    sh_info = next(p for p in tree.new_processes if p.pid == sh.pid)
    assert sh_info.cmdline == ["sh", "-c", "sleep 600 & sleep 600 & echo ready; wait"]
    assert sh_info.ppid == os.getpid()
    me = next(p for p in tree.new_processes if p.pid == os.getpid())
    assert me.cmdline == Path("/proc/self/cmdline").read_bytes().decode().split("\0")[:-1]
    # Gone processes leave the tree.
    os.killpg(sh.pid, signal.SIGKILL)
    sh.communicate()
    tree.read()
    assert sh.pid not in tree.pids


EXCLUDED = (
    BURN
    + """
import subprocess
g = subprocess.Popen(["sleep", "600"])
print(g.pid, flush=True)
sys.stdin.readline()
burn(0.5)
print("burned", flush=True)
sys.stdin.readline()
g.kill()
g.wait()
"""
)


def test_excluded_process_and_its_subtree_are_not_counted(
    procs: Procs, opened: list[ProcessTreeSource]
) -> None:
    ex = procs.python(EXCLUDED)
    grandchild = int(procs.hear(ex))
    tree = ProcessTreeSource(os.getpid(), exclude_pids=frozenset({ex.pid}))
    opened.append(tree)
    r1 = tree.read()
    procs.say(ex)
    assert procs.hear(ex) == "burned"  # 0.5 CPU-s burnt by the excluded process
    r2 = tree.read()
    for r in (r1, r2):
        assert ex.pid not in pids_in(r) and grandchild not in pids_in(r)
    assert ex.pid not in tree.pids and grandchild not in tree.pids
    assert not {ex.pid, grandchild} & {p.pid for p in tree.new_processes}
    # This process only waited meanwhile: far less than the 0.5 s burnt outside the tree.
    grew = tree_value(r2, "tree_cpu_seconds_total") - tree_value(r1, "tree_cpu_seconds_total")
    assert 0 <= grew < 0.25
    procs.say(ex)
    # Note: once this process reaps the excluded child, the kernel adds the child's times to
    # this process's cutime, so they would enter the tree total from then on.
    ex.communicate()


def test_child_cpu_reaped_by_a_tree_parent_is_counted_once(
    procs: Procs, opened: list[ProcessTreeSource]
) -> None:
    root = procs.python(PARENT, "stay", CHILD)
    tree = ProcessTreeSource(root.pid, count_existing_usage=True)
    opened.append(tree)
    tree.read()
    assert procs.hear(root) == "burned"
    r = tree.read()  # the child is seen alive, with its 0.3 s
    (child,) = set(tree.pids) - {root.pid}
    assert proc_value(r, "process_cpu_seconds_total", child) >= 0.3
    tree.read()
    procs.say(root)  # the child exits; subprocess.run reaps it into the parent's cutime
    total = float(procs.hear(root))
    assert total >= 0.3
    for _ in range(3):
        r = tree.read()
    assert tree.pids == [root.pid]
    assert tree_value(r, "tree_cpu_seconds_total") == pytest.approx(total, rel=0.05)
    assert tree_value(r, "tree_processes") == 1
    procs.say(root)
    root.communicate()
    final = tree.read()  # the root is gone (reaped outside the tree): its last value stays
    assert tree.pids == []
    assert tree_value(final, "tree_processes") == 0
    assert tree_value(final, "tree_cpu_seconds_total") == pytest.approx(
        tree_value(r, "tree_cpu_seconds_total"), rel=0.01
    )
    assert pids_in(final) == set()


def _parent_and_child_exit_together(
    procs: Procs, opened: list[ProcessTreeSource]
) -> tuple[ProcessTreeSource, float, float]:
    """Root and child both seen alive, then both gone before the next read (the root reaped by
    this test). Returns the source, the root's own report and its wait4 CPU seconds."""
    root = procs.python(PARENT, "exit", CHILD)
    tree = ProcessTreeSource(root.pid, count_existing_usage=True)
    opened.append(tree)
    tree.read()
    assert procs.hear(root) == "burned"
    r = tree.read()
    assert len(tree.pids) == 2
    assert tree_value(r, "tree_cpu_seconds_total") >= 0.3
    procs.say(root)
    total = float(procs.hear(root))
    _, status, ru = os.wait4(root.pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    root.communicate()  # already reaped: Popen sees ECHILD and sets returncode 0
    return tree, total, ru.ru_utime + ru.ru_stime


def test_set_final_root_cpu_replaces_the_last_seen_root_value(
    procs: Procs, opened: list[ProcessTreeSource]
) -> None:
    tree, total, rusage = _parent_and_child_exit_together(procs, opened)
    tree.set_final_root_cpu(rusage)  # wait4: the root and its reaped child together
    r = tree.read()
    assert tree.pids == []
    cpu = tree_value(r, "tree_cpu_seconds_total")
    assert cpu == pytest.approx(rusage, rel=1e-9)  # the child is inside the root's figure
    # wait4 also holds what the root spent after printing (interpreter shutdown).
    assert total * 0.99 <= cpu < total + 0.2


def test_last_seen_values_when_root_and_child_vanish_together(
    procs: Procs, opened: list[ProcessTreeSource]
) -> None:
    tree, total, _ = _parent_and_child_exit_together(procs, opened)
    r = tree.read()  # no final root figure: last-seen root + last-seen child
    assert tree.pids == []
    assert tree_value(r, "tree_cpu_seconds_total") == pytest.approx(total, rel=0.1)


def test_count_existing_usage(procs: Procs, opened: list[ProcessTreeSource]) -> None:
    p = procs.python(CHILD)
    assert procs.hear(p) == "burned"
    fresh = ProcessTreeSource(p.pid)  # the default: usage from now on
    counted = ProcessTreeSource(p.pid, count_existing_usage=True)
    opened += [fresh, counted]
    assert tree_value(fresh.read(), "tree_cpu_seconds_total") < 0.05
    assert tree_value(counted.read(), "tree_cpu_seconds_total") >= 0.3
    assert tree_value(fresh.read(), "tree_cpu_seconds_total") < 0.05


def test_missing_root_is_unavailable(tmp_path: Path) -> None:
    p = subprocess.Popen(["true"])
    p.wait()
    with pytest.raises(SourceUnavailable, match=str(p.pid)):
        ProcessTreeSource(p.pid)
    with pytest.raises(SourceUnavailable, match="not found under"):
        ProcessTreeSource(1, procfs_root=str(tmp_path))


# -- a recorded procfs tree ---------------------------------------------------------------------
class FakeProcfs:
    """A procfs tree in a directory: ``<root>/<pid>/{stat,io,status,cmdline}``.

    Files are rewritten in place (same inode), as the source keeps them open. An exit empties
    ``stat`` (what a read of a reaped process's descriptor amounts to) and removes the directory.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir()
        (root / "stat").write_text("cpu  1 2 3 4\n")  # non-PID entries are ignored
        (root / "self").mkdir()

    def write(
        self,
        pid: int,
        comm: str,
        ppid: int,
        *,
        utime: int = 0,
        stime: int = 0,
        cutime: int = 0,
        cstime: int = 0,
        threads: int = 1,
        rss_pages: int = 0,
        read_bytes: int = 0,
        write_bytes: int = 0,
        hwm_kb: int = 0,
        cmdline: Sequence[str] = (),
        io: bool = True,
    ) -> None:
        d = self.root / str(pid)
        d.mkdir(exist_ok=True)
        fields = [
            pid,
            f"({comm})",
            "S",
            ppid,
            pid,
            pid,
            0,
            -1,
            4194560,
            1200,
            0,
            3,
            0,
            utime,
            stime,
            cutime,
            cstime,
            20,
            0,
            threads,
            0,
            93196,
            3133440 + rss_pages * PAGE,
            rss_pages,
            18446744073709551615,
            1,
            1,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            17,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
        ]
        assert len(fields) == 52
        (d / "stat").write_text(" ".join(map(str, fields)) + "\n")
        if io:
            (d / "io").write_text(
                f"rchar: {read_bytes + 5000}\nwchar: {write_bytes + 7}\nsyscr: 42\nsyscw: 17\n"
                f"read_bytes: {read_bytes}\nwrite_bytes: {write_bytes}\n"
                "cancelled_write_bytes: 0\n"
            )
        (d / "status").write_text(
            f"Name:\t{comm[:15]}\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t{pid}\nNgid:\t0\n"
            f"Pid:\t{pid}\nPPid:\t{ppid}\nTracerPid:\t0\nUid:\t1000\t1000\t1000\t1000\n"
            f"VmPeak:\t  {hwm_kb + 900} kB\nVmSize:\t  {hwm_kb + 800} kB\n"
            f"VmHWM:\t  {hwm_kb} kB\nVmRSS:\t  {rss_pages * PAGE // 1024} kB\n"
            f"Threads:\t{threads}\n"
        )
        (d / "cmdline").write_bytes(b"".join(a.encode() + b"\0" for a in cmdline))

    def exit(self, pid: int) -> None:
        d = self.root / str(pid)
        (d / "stat").write_bytes(b"")
        shutil.rmtree(d)


ROOT, KID_A, KID_B, OTHER = 100, 101, 102, 200


@pytest.fixture
def fake(tmp_path: Path) -> FakeProcfs:
    fs = FakeProcfs(tmp_path / "proc")
    fs.write(1, "init", 0, utime=500, cmdline=["/sbin/init"])
    fs.write(OTHER, "unrelated", 1, utime=999, rss_pages=1000, cmdline=["unrelated"])
    fs.write(
        ROOT,
        "python",
        1,
        utime=150,
        stime=30,
        cutime=20,
        cstime=5,
        threads=4,
        rss_pages=2560,
        read_bytes=4096,
        write_bytes=8192,
        hwm_kb=20480,
        cmdline=["python", "train.py", "--epochs", "3"],
    )
    fs.write(
        KID_A,
        "data loader",
        ROOT,
        utime=40,
        stime=10,
        threads=2,
        rss_pages=1024,
        read_bytes=1_000_000,
        write_bytes=0,
        hwm_kb=4096,
        cmdline=["python", "-c", "loader()"],
    )
    fs.write(
        KID_B,
        "tricky) (name",
        ROOT,
        utime=7,
        stime=3,
        cutime=1,
        cstime=1,
        rss_pages=256,
        read_bytes=512,
        write_bytes=2048,
        hwm_kb=30000,
        cmdline=["tricky"],
    )
    return fs


def expect_process(
    pid: int,
    comm: str,
    own_ticks: int,
    rss_pages: int,
    threads: int,
    rd: float | None,
    wr: float | None,
) -> dict[tuple[str, Labels], float]:
    lbl = labels(pid=pid, name=comm)
    out = {
        ("process_cpu_seconds_total", lbl): own_ticks / HZ,
        ("process_resident_memory_bytes", lbl): float(rss_pages * PAGE),
        ("process_threads", lbl): float(threads),
    }
    if rd is not None and wr is not None:
        out[("process_read_bytes_total", lbl)] = rd
        out[("process_written_bytes_total", lbl)] = wr
    return out


def check(got: Sequence[Reading], want: dict[tuple[str, Labels], float]) -> None:
    g = by_key(got)
    assert set(g) == set(want)
    for k, v in want.items():
        assert g[k] == pytest.approx(v, rel=1e-12, abs=1e-12), k
    for r in got:
        want_kind = Kind.COUNTER if r.name.endswith("_total") else Kind.GAUGE
        assert r.kind == want_kind, r.name


def tree_of(
    *, cpu_ticks: float, rss_pages: int, n: int, threads: int, rd: float, wr: float
) -> dict[tuple[str, Labels], float]:
    """The tree series; the peak RSS is always kid B's VmHWM of 30000 kB."""
    peak_kb = 30000
    return {
        ("tree_cpu_seconds_total", ()): cpu_ticks / HZ,
        ("tree_resident_memory_bytes", ()): float(rss_pages * PAGE),
        ("tree_process_peak_resident_memory_bytes", ()): peak_kb * 1024.0,
        ("tree_processes", ()): float(n),
        ("tree_threads", ()): float(threads),
        ("tree_read_bytes_total", ()): rd,
        ("tree_written_bytes_total", ()): wr,
    }


def test_recorded_tree_exact_values_and_exits(
    fake: FakeProcfs, opened: list[ProcessTreeSource]
) -> None:
    tree = ProcessTreeSource(ROOT, str(fake.root), count_existing_usage=True)
    opened.append(tree)
    r = tree.read()
    root_ticks = 150 + 30 + 20 + 5
    a_ticks, b_ticks = 40 + 10, 7 + 3 + 1 + 1
    check(
        r,
        {
            **expect_process(ROOT, "python", 180, 2560, 4, 4096.0, 8192.0),
            **expect_process(KID_A, "data loader", 50, 1024, 2, 1e6, 0.0),
            **expect_process(KID_B, "tricky) (name", 10, 256, 1, 512.0, 2048.0),
            **tree_of(
                cpu_ticks=root_ticks + a_ticks + b_ticks,
                rss_pages=2560 + 1024 + 256,
                n=3,
                threads=7,
                rd=4096 + 1e6 + 512,
                wr=8192 + 2048,
            ),
        },
    )
    assert sorted(tree.pids) == [ROOT, KID_A, KID_B]
    info = {p.pid: p for p in tree.new_processes}
    assert set(info) == {ROOT, KID_A, KID_B}
    assert info[ROOT].cmdline == ["python", "train.py", "--epochs", "3"]
    assert (info[KID_B].name, info[KID_B].ppid) == ("tricky) (name", ROOT)
    tree.new_processes.clear()

    # Kid A works on (files rewritten in place); a grandchild appears under it.
    fake.write(
        KID_A,
        "data loader",
        ROOT,
        utime=90,
        stime=20,
        threads=3,
        rss_pages=2048,
        read_bytes=3_000_000,
        write_bytes=100,
        hwm_kb=8192,
    )
    fake.write(
        103,
        "worker",
        KID_A,
        utime=5,
        stime=5,
        rss_pages=100,
        read_bytes=10,
        write_bytes=20,
        cmdline=["worker"],
    )
    r = tree.read()
    a_ticks = 110
    check(
        r,
        {
            **expect_process(ROOT, "python", 180, 2560, 4, 4096.0, 8192.0),
            **expect_process(KID_A, "data loader", 110, 2048, 3, 3e6, 100.0),
            **expect_process(KID_B, "tricky) (name", 10, 256, 1, 512.0, 2048.0),
            **expect_process(103, "worker", 10, 100, 1, 10.0, 20.0),
            **tree_of(
                cpu_ticks=root_ticks + a_ticks + b_ticks + 10,
                rss_pages=2560 + 2048 + 256 + 100,
                n=4,
                threads=9,
                rd=4096 + 3e6 + 512 + 10,
                wr=8192 + 100 + 2048 + 20,
            ),
        },
    )
    assert [p.pid for p in tree.new_processes] == [103]

    # Kid B exits and the root reaps it: its 12 ticks move into the root's cutime/cstime, and
    # are counted once; its I/O stays counted at the last-seen value.
    fake.exit(KID_B)
    fake.write(
        ROOT,
        "python",
        1,
        utime=160,
        stime=30,
        cutime=20 + 9,
        cstime=5 + 3,
        threads=4,
        rss_pages=2560,
        read_bytes=4096,
        write_bytes=8192,
        hwm_kb=20480,
    )
    r = tree.read()
    root_ticks = 160 + 30 + 29 + 8
    check(
        r,
        {
            **expect_process(ROOT, "python", 190, 2560, 4, 4096.0, 8192.0),
            **expect_process(KID_A, "data loader", 110, 2048, 3, 3e6, 100.0),
            **expect_process(103, "worker", 10, 100, 1, 10.0, 20.0),
            **tree_of(
                cpu_ticks=root_ticks + a_ticks + 10,
                rss_pages=2560 + 2048 + 100,
                n=3,
                threads=8,
                rd=4096 + 3e6 + 512 + 10,
                wr=8192 + 100 + 2048 + 20,
            ),
        },
    )
    assert sorted(tree.pids) == [ROOT, KID_A, 103]

    # Kid A and its worker vanish in the same tick: the worker reaped by A (into A's cutime),
    # A reaped by the root (A's whole total, worker included, into the root's cutime).
    fake.exit(103)
    fake.exit(KID_A)
    fake.write(
        ROOT,
        "python",
        1,
        utime=160,
        stime=30,
        cutime=29 + 110 + 10,
        cstime=8,
        threads=4,
        rss_pages=2560,
        read_bytes=4096,
        write_bytes=8192,
        hwm_kb=20480,
    )
    r = tree.read()
    root_ticks = 160 + 30 + 149 + 8
    check(
        r,
        {
            **expect_process(ROOT, "python", 190, 2560, 4, 4096.0, 8192.0),
            **tree_of(
                cpu_ticks=root_ticks,
                rss_pages=2560,
                n=1,
                threads=4,
                rd=4096 + 3e6 + 512 + 10,
                wr=8192 + 100 + 2048 + 20,
            ),
        },
    )

    # The root exits, reaped outside the tree: its last-seen total stays in the counter.
    fake.exit(ROOT)
    r = tree.read()
    check(
        r,
        tree_of(
            cpu_ticks=root_ticks,
            rss_pages=0,
            n=0,
            threads=0,
            rd=4096 + 3e6 + 512 + 10,
            wr=8192 + 100 + 2048 + 20,
        ),
    )
    assert tree.pids == []
    r = tree.read()
    assert tree_value(r, "tree_cpu_seconds_total") == pytest.approx(root_ticks / HZ)
    assert [p.pid for p in tree.new_processes] == [103]  # nothing new since


def test_recorded_orphans_count_at_their_last_value(
    fake: FakeProcfs, opened: list[ProcessTreeSource]
) -> None:
    tree = ProcessTreeSource(ROOT, str(fake.root), count_existing_usage=True)
    opened.append(tree)
    tree.read()
    # The root exits first, without waiting for its children: they are re-parented to init.
    fake.exit(ROOT)
    fake.write(KID_A, "data loader", 1, utime=60, stime=10)
    fake.write(KID_B, "tricky) (name", 1, utime=7, stime=3, cutime=1, cstime=1)
    r = tree.read()
    assert sorted(tree.pids) == [KID_A, KID_B]
    assert tree_value(r, "tree_cpu_seconds_total") == pytest.approx((205 + 70 + 12) / HZ)
    # Reaped by init, outside the tree: each at its last-seen value.
    fake.exit(KID_A)
    r = tree.read()
    assert tree_value(r, "tree_cpu_seconds_total") == pytest.approx((205 + 70 + 12) / HZ)
    fake.exit(KID_B)
    r = tree.read()
    assert tree_value(r, "tree_cpu_seconds_total") == pytest.approx((205 + 70 + 12) / HZ)
    assert tree_value(r, "tree_processes") == 0


@pytest.mark.parametrize("final", [None, 2.5])
def test_recorded_root_and_child_vanish_together(
    fake: FakeProcfs, opened: list[ProcessTreeSource], final: float | None
) -> None:
    tree = ProcessTreeSource(ROOT, str(fake.root), count_existing_usage=True)
    opened.append(tree)
    tree.read()  # root 205 ticks, A 50, B 12
    fake.exit(KID_A)  # reaped by the root, which then exits: both gone at the next read
    fake.exit(ROOT)
    if final is not None:
        tree.set_final_root_cpu(final)  # wait4 of the root: it includes kid A
    r = tree.read()
    assert sorted(tree.pids) == [KID_B]
    # Without a final figure: last-seen root (without A) + last-seen A. With one: the root's
    # exact figure already holds A.
    want = (205 + 50 + 12) / HZ if final is None else final + 12 / HZ
    assert tree_value(r, "tree_cpu_seconds_total") == pytest.approx(want)


def test_recorded_orphaned_parent_and_child_vanish_together(
    fake: FakeProcfs, opened: list[ProcessTreeSource]
) -> None:
    fake.write(103, "worker", KID_A, utime=30, stime=10)
    tree = ProcessTreeSource(ROOT, str(fake.root), count_existing_usage=True)
    opened.append(tree)
    tree.read()  # root 205 ticks, A 50, B 12, worker 40
    fake.exit(ROOT)  # reaped outside the tree; A and B are re-parented to init
    fake.write(KID_A, "data loader", 1, utime=40, stime=10)
    fake.write(KID_B, "tricky) (name", 1, utime=7, stime=3, cutime=1, cstime=1)
    r = tree.read()
    assert tree_value(r, "tree_cpu_seconds_total") == pytest.approx((205 + 50 + 12 + 40) / HZ)
    # A reaps its worker and exits in the same interval; init reaps A. A's last-seen figure
    # does not hold the worker, so the worker's own last-seen figure must still count.
    fake.exit(103)
    fake.exit(KID_A)
    r = tree.read()
    assert tree.pids == [KID_B]
    assert tree_value(r, "tree_cpu_seconds_total") == pytest.approx((205 + 50 + 12 + 40) / HZ)


def test_recorded_baseline_of_existing_usage(
    fake: FakeProcfs, opened: list[ProcessTreeSource]
) -> None:
    tree = ProcessTreeSource(ROOT, str(fake.root))  # count_existing_usage=False
    opened.append(tree)
    r = tree.read()
    assert tree_value(r, "tree_cpu_seconds_total") == pytest.approx(0.0, abs=1e-9)
    assert tree_value(r, "tree_read_bytes_total") == 0.0
    assert tree_value(r, "tree_written_bytes_total") == 0.0
    assert proc_value(r, "process_read_bytes_total", KID_A) == 0.0
    # Usage after the first read counts; a process that appears later counts from zero.
    fake.write(KID_A, "data loader", ROOT, utime=45, stime=10, read_bytes=1_000_100)
    fake.write(103, "worker", KID_A, utime=3, stime=1, read_bytes=7)
    r = tree.read()
    assert tree_value(r, "tree_cpu_seconds_total") == pytest.approx((5 + 4) / HZ)
    assert tree_value(r, "tree_read_bytes_total") == 100 + 7
    # The root's exact final figure is taken relative to its baseline too.
    fake.exit(ROOT)
    tree.set_final_root_cpu(205 / HZ + 1.0)
    r = tree.read()
    assert tree_value(r, "tree_cpu_seconds_total") == pytest.approx(1.0 + (5 + 4) / HZ)


def test_recorded_unreadable_io_and_peak_rss(
    fake: FakeProcfs, opened: list[ProcessTreeSource]
) -> None:
    fake.write(
        KID_B, "tricky) (name", ROOT, utime=7, stime=3, rss_pages=256, hwm_kb=30000, io=False
    )
    (fake.root / str(KID_B) / "io").unlink(missing_ok=True)
    tree = ProcessTreeSource(ROOT, str(fake.root), count_existing_usage=True)
    opened.append(tree)
    r = tree.read()
    lbl = labels(pid=KID_B, name="tricky) (name")
    keys = by_key(r)
    assert ("process_read_bytes_total", lbl) not in keys
    assert ("process_cpu_seconds_total", lbl) in keys
    tree.note_peak_rss(64 * 1024 * 1024)
    assert tree_value(tree.read(), "tree_process_peak_resident_memory_bytes") == 64 * 1024 * 1024
    tree.note_peak_rss(1.0)  # never lowers the peak
    assert tree_value(tree.read(), "tree_process_peak_resident_memory_bytes") == 64 * 1024 * 1024


def test_recorded_exclusion(fake: FakeProcfs, opened: list[ProcessTreeSource]) -> None:
    fake.write(103, "worker", KID_A, utime=1000)
    tree = ProcessTreeSource(
        ROOT, str(fake.root), exclude_pids=frozenset({KID_A}), count_existing_usage=True
    )
    opened.append(tree)
    r = tree.read()
    assert sorted(tree.pids) == [ROOT, KID_B]
    assert tree_value(r, "tree_cpu_seconds_total") == pytest.approx((205 + 12) / HZ)
    assert OTHER not in tree.pids


def test_a_root_retired_before_its_final_figure_arrives_is_corrected(
    fake: FakeProcfs, opened: list[ProcessTreeSource]
) -> None:
    """The supervisor reaps the root, a read runs before it hands the tree the wait4 figure
    (a loaded machine): the root is retired on its figure of a tick ago, and the exact figure
    that arrives after still adds what the root spent since."""
    tree = ProcessTreeSource(ROOT, str(fake.root))
    opened.append(tree)
    tree.read()
    fake.write(KID_A, "data loader", ROOT, utime=45, stime=10, read_bytes=1_000_100)
    fake.write(103, "worker", KID_A, utime=3, stime=1, read_bytes=7)
    r = tree.read()
    seen = tree_value(r, "tree_cpu_seconds_total")
    fake.exit(ROOT)
    r = tree.read()  # the root gone, no final figure yet: its last-seen one counts
    assert tree_value(r, "tree_cpu_seconds_total") == pytest.approx(seen)
    tree.set_final_root_cpu(205 / HZ + 0.8)  # 0.8 s more than the reads saw
    r = tree.read()
    assert tree_value(r, "tree_cpu_seconds_total") == pytest.approx(seen + 0.8)
    tree.set_final_root_cpu(205 / HZ + 0.8)  # said twice: counted once
    assert tree_value(tree.read(), "tree_cpu_seconds_total") == pytest.approx(seen + 0.8)
