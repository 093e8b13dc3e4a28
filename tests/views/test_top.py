"""``computewatch top``: the collector against a recorded procfs tree and the fake NVML, the
text, JSON and full-screen views, and the real CLI in a pipe and in a pseudo-terminal."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pexpect
import pyte
import pytest

from computewatch.sampling.top import ProcessRow, TopCollector, snapshot_as_dict, sort_processes
from computewatch.views.top import _keys, compose_frame, render_screen, render_text

HZ = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")
GiB = 1 << 30
PF_KTHREAD = 0x00200000


# --- a recorded procfs tree ------------------------------------------------------------------


class FakeProc:
    """A procfs tree the collector reads through ``procfs_root``; files are rewritten in place
    (same inode), as procfs regenerates them, so cached descriptors see the new text."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir()
        self.host(busy=0, idle=0)
        (root / "meminfo").write_text(
            "MemTotal: 1000 kB\nMemFree: 100 kB\nMemAvailable: 400 kB\n"
            "SwapTotal: 0 kB\nSwapFree: 0 kB\n"
        )
        (root / "loadavg").write_text("0.50 0.40 0.30 2/100 4242\n")

    def host(self, *, busy: int, idle: int) -> None:
        """Two CPUs with these tick counts each (user, idle)."""
        line = f"{busy} 0 0 {idle} 0 0 0 0 0 0"
        (self.root / "stat").write_text(f"cpu  0 0 0 0\ncpu0 {line}\ncpu1 {line}\nintr 0\n")

    def proc(
        self,
        pid: int,
        *,
        comm: str = "worker",
        ticks: int = 0,
        rss_pages: int = 1,
        start: int = 1000,
        state: str = "S",
        flags: int = 0,
        cmdline: list[str] | None = None,
        environ: dict[str, str] | None = None,
        environ_unreadable: bool = False,
    ) -> None:
        d = self.root / str(pid)
        d.mkdir(exist_ok=True)
        (d / "stat").write_text(
            f"{pid} ({comm}) {state} 1 {pid} {pid} 0 -1 {flags} 0 0 0 0 {ticks} 0 0 0 20 0 1 0 "
            f"{start} 1000 {rss_pages} 18446744073709551615 0 0 0\n"
        )
        (d / "status").write_text(f"Name:\t{comm}\nUmask:\t0022\nUid:\t0\t0\t0\t0\n")
        args = [comm] if cmdline is None else cmdline
        (d / "cmdline").write_bytes(b"".join(a.encode() + b"\0" for a in args))
        env = d / "environ"
        if env.is_dir():
            env.rmdir()
        if environ_unreadable:  # root reads any file: a directory stands for EACCES
            env.unlink(missing_ok=True)
            env.mkdir()
        else:
            pairs = environ or {"PATH": "/bin"}
            env.write_bytes(b"".join(f"{k}={v}".encode() + b"\0" for k, v in pairs.items()))

    def remove(self, pid: int) -> None:
        d = self.root / str(pid)
        for f in d.iterdir():
            f.rmdir() if f.is_dir() else f.unlink()
        d.rmdir()


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def tree(tmp_path: Path) -> FakeProc:
    return FakeProc(tmp_path / "proc")


def _rows(snap) -> dict[int, ProcessRow]:
    return {r.pid: r for r in snap.processes}


@pytest.mark.parametrize("max_fds", [None, 0], ids=["cached-descriptors", "read-by-path"])
def test_collector_cpu_shares_run_ids_and_what_is_listed(tree: FakeProc, max_fds: int | None):
    tree.proc(10, comm="half", ticks=0, rss_pages=100, cmdline=["python", "train.py"])
    tree.proc(11, comm="busy", ticks=0, rss_pages=300)
    tree.proc(12, comm="idle", ticks=5, rss_pages=200)  # no CPU in the interval: not listed
    tree.proc(13, comm="job", ticks=5, environ={"A": "1", "COMPUTEWATCH_RUN_ID": "run1"})
    tree.proc(14, comm="kworker/0:1", ticks=0, flags=PF_KTHREAD, cmdline=[])
    tree.proc(15, comm="secret", ticks=0, environ_unreadable=True)
    clock = Clock()

    def sleep(seconds: float) -> None:  # what happens on the host during the priming read
        clock.now += seconds
        tree.host(busy=30, idle=70)
        tree.proc(10, comm="half", ticks=HZ // 2, rss_pages=100, cmdline=["python", "train.py"])
        tree.proc(11, comm="busy", ticks=3 * HZ // 2, rss_pages=300)
        tree.proc(14, comm="kworker/0:1", ticks=HZ // 10, flags=PF_KTHREAD, cmdline=[])

    with TopCollector(
        "none",
        procfs_root=str(tree.root),
        prime_seconds=1.0,
        clock=clock,
        sleep=sleep,
        max_cached_fds=max_fds,
    ) as c:
        snap = c.snapshot()
        assert snap.interval_seconds == pytest.approx(1.0)
        assert snap.host.cpu_ratio == pytest.approx(0.3)
        assert snap.host.cpu_count == 2
        assert snap.host.memory_used_bytes == 600 * 1024
        assert snap.host.load1 == 0.5
        assert snap.host.processes == 6
        rows = _rows(snap)
        assert set(rows) == {10, 11, 13, 14}
        assert rows[10].cpu_ratio == pytest.approx(0.5)
        assert rows[11].cpu_ratio == pytest.approx(1.5)
        assert rows[10].rss_bytes == 100 * PAGE
        assert rows[10].command == "python train.py"
        assert rows[10].user == "root"
        assert rows[13].cpu_ratio == 0 and rows[13].run_id == "run1"
        assert rows[14].command == "[kworker/0:1]"
        assert rows[14].run_id is None and rows[14].run_id_readable
        assert snap.unreadable_environ == 1  # pid 15
        assert snap.gpus == () and snap.gpu_notes == ("GPUs are not read (--gpu-backend none)",)

        # Next refresh: 11 has exited, 10's PID was reused by a new process, 16 was born, and
        # 13 exec'd a program with another run id.
        tree.remove(11)
        tree.proc(10, comm="reborn", ticks=HZ // 5, start=5000)
        tree.proc(16, comm="new", ticks=HZ // 4)
        tree.proc(13, comm="job2", ticks=5 + HZ, environ={"COMPUTEWATCH_RUN_ID": "run2"})
        tree.host(busy=30, idle=170)
        clock.now += 2.0
        snap = c.snapshot()
        rows = _rows(snap)
        assert set(rows) == {10, 13, 16}
        assert rows[10].command == "reborn"
        assert rows[10].cpu_ratio == pytest.approx(0.1)  # all its 0.2 s fell in the 2 s
        assert rows[16].cpu_ratio == pytest.approx(0.125)
        assert rows[13].run_id == "run2" and rows[13].cpu_ratio == pytest.approx(0.5)
        assert snap.host.cpu_ratio == pytest.approx(0.0)


def test_a_process_read_in_the_middle_of_its_exec_is_described_again(tree: FakeProc):
    # A python that forks and execs python again keeps its comm; read mid-exec, the new image's
    # command line and environment are still empty. The next refresh reads them again.
    tree.proc(20, comm="python3", ticks=0, cmdline=[], environ={})
    clock = Clock()

    def sleep(seconds: float) -> None:  # it uses CPU during the priming read: listed
        clock.now += seconds
        tree.proc(20, comm="python3", ticks=HZ, cmdline=[], environ={})

    with TopCollector(
        "none", procfs_root=str(tree.root), prime_seconds=1.0, clock=clock, sleep=sleep
    ) as c:
        row = _rows(c.snapshot())[20]
        assert row.command == "[python3]" and row.run_id is None
        tree.proc(20, comm="python3", ticks=2 * HZ, cmdline=["python3", "train.py"],
                  environ={"COMPUTEWATCH_RUN_ID": "run3"})  # fmt: skip
        clock.now += 1.0
        row = _rows(c.snapshot())[20]
        assert row.command == "python3 train.py" and row.run_id == "run3"
        # Settled once read: later changes to the files are not re-read without an exec.
        tree.proc(20, comm="python3", ticks=3 * HZ, cmdline=["other"])
        clock.now += 1.0
        assert _rows(c.snapshot())[20].command == "python3 train.py"


def test_close_releases_every_descriptor(tree: FakeProc):
    for pid in range(20, 30):
        tree.proc(pid, ticks=pid)
    fd_dir = "/proc/self/fd"
    before = len(os.listdir(fd_dir))
    c = TopCollector("none", procfs_root=str(tree.root), prime_seconds=0, sleep=lambda s: None)
    c.snapshot()
    assert len(os.listdir(fd_dir)) >= before + 10  # one stat descriptor per process
    c.close()
    c.close()
    assert len(os.listdir(fd_dir)) == before
    with pytest.raises(ValueError, match="closed"):
        c.snapshot()


def _row(pid: int, cpu: float, rss: int, gmem: float | None, sm: float | None) -> ProcessRow:
    return ProcessRow(pid, "u", "S", cpu, rss, (), gmem, sm, f"cmd{pid}", None, True)


def test_sort_orders():
    rows = [
        _row(5, 0.1, 300, None, None),
        _row(3, 0.9, 100, 2 * GiB, 0.2),
        _row(4, 0.9, 200, 1 * GiB, 0.7),
        _row(1, 0.0, 400, 0.0, 0.0),
    ]

    def order(key):
        return [r.pid for r in sort_processes(rows, key)]

    assert order("cpu") == [3, 4, 5, 1]  # ties by PID
    assert order("memory") == [1, 5, 4, 3]
    assert order("gpu-memory") == [3, 4, 1, 5]  # unknown after zero
    assert order("gpu") == [4, 3, 1, 5]
    assert order("pid") == [1, 3, 4, 5]
    with pytest.raises(ValueError, match="unknown sort key"):
        sort_processes(rows, "bogus")  # type: ignore[arg-type]


# --- real host, fake GPUs ----------------------------------------------------------------------


def test_fake_gpus_attribute_memory_to_this_process_and_say_simulated():
    me = os.getpid()
    with TopCollector("fake:2xA100-80GB", fake_pids=[me], prime_seconds=0.05) as c:
        snap = c.snapshot()
    assert [g.index for g in snap.gpus] == ["0", "1"]
    assert all(g.simulated and g.name == "NVIDIA A100-SXM4-80GB" for g in snap.gpus)
    assert snap.simulated
    for g in snap.gpus:
        assert g.memory_total_bytes == 80 * GiB
        assert 0 < (g.memory_used_bytes or 0) < g.memory_total_bytes
        assert g.utilization_ratio is not None and g.power_watts is not None
        assert g.temperature_celsius is not None and g.sm_clock_hertz is not None
    mine = _rows(snap)[me]  # listed for its GPU memory even when it used no CPU
    assert mine.gpus == ("0", "1")
    assert mine.gpu_memory_bytes == 2 * GiB  # 1 GiB on each device (FakeDevice.add_process)
    assert mine.gpu_sm_ratio == pytest.approx(1.0)  # 50 % of the SMs of each of two GPUs
    text = render_text(snap, "gpu-memory", 2.0)
    assert text.count("(simulated)") == 2 and "[simulated GPUs]" in text
    doc = json.loads(json.dumps(snapshot_as_dict(snap, "gpu-memory")))
    assert doc["gpus_simulated"] and all(g["simulated"] for g in doc["gpus"])
    assert doc["processes"][0]["pid"] == me


def test_replayed_gpus_are_simulated_too(tmp_path: Path):
    from computewatch.sources.nvidia import NvidiaSource
    from computewatch.sources.replay import record
    from computewatch.testing.fake_nvml import from_preset

    trace = tmp_path / "l4.jsonl"
    src = NvidiaSource(from_preset("1xL4"), all_gpus=True)
    with trace.open("w") as f:
        record([src], f, seconds=0, interval=1.0, sleep=lambda s: None)
    src.close()
    with TopCollector(f"replay:{trace}", prime_seconds=0) as c:
        snap = c.snapshot()
    (gpu,) = snap.gpus
    assert gpu.simulated and gpu.name == "NVIDIA L4"
    assert gpu.utilization_ratio is not None and gpu.memory_used_bytes is not None
    assert "GPU 0  NVIDIA L4 (simulated)" in render_text(snap, "cpu", 2.0)


def test_a_process_of_a_computewatch_run_shows_its_run_id(tmp_path: Path):
    env = {**os.environ, "COMPUTEWATCH_RUN_ID": "0123abcd4567"}
    code = "import sys; print('up', flush=True); sys.stdin.readline()"
    child = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env
    )
    try:
        # Popen returns when the exec begins, before the kernel sets the new image's command
        # line and environment: a read then finds them empty. The child's line says it is done.
        assert child.stdout is not None and child.stdout.readline() == b"up\n"
        with TopCollector("none", prime_seconds=0.05) as c:
            row = _rows(c.snapshot()).get(child.pid)
    finally:
        child.communicate(b"\n", timeout=30)
    assert row is not None, "a run's process is listed even when idle"
    assert row.run_id == "0123abcd4567" and row.run_id_readable
    assert "sys.stdin.readline" in row.command


def test_no_gpu_backend_says_why_and_processes_are_still_shown():
    # "amd" on a machine without AMD GPUs (CI's, and the NVIDIA machines we check on): the
    # vendor library or its GPUs are missing, so no backend opens
    with TopCollector("amd", prime_seconds=0.05) as c:
        assert not c.backend.sources
        snap = c.snapshot()
    assert snap.gpus == ()
    assert snap.gpu_notes and snap.gpu_notes[0].startswith("no GPU backend: amd: ")
    assert snap.host.processes > 0
    text = render_text(snap, "cpu", 2.0)
    assert "GPU: no GPU backend: amd:" in text
    assert "PID USER" in text and "GPU-MEM" not in text


# --- rendering -------------------------------------------------------------------------------


def test_screen_fits_a_small_terminal_and_says_what_is_left_out(tree: FakeProc):
    for pid in range(100, 140):
        tree.proc(pid, comm=f"w{pid}", cmdline=["python", "-c", "x" * 300])
    clock = Clock()

    def sleep(seconds: float) -> None:
        clock.now += seconds
        for pid in range(100, 140):
            tree.proc(pid, comm=f"w{pid}", ticks=pid, cmdline=["python", "-c", "x" * 300])

    with TopCollector(
        "none", procfs_root=str(tree.root), prime_seconds=1, clock=clock, sleep=sleep
    ) as c:
        snap = c.snapshot()
    width, height = 50, 12
    lines = render_screen(snap, "cpu", 2.0, width, height, [0.1, 0.5, 0.9])
    assert len(lines) == height
    assert lines[-1][0].startswith("... ") and "more processes" in lines[-1][0]
    screen = pyte.Screen(width, height)
    pyte.ByteStream(screen).feed(compose_frame(lines, width, height).encode())
    assert screen.display[0].startswith("computewatch top")  # nothing scrolled off the top
    header = next(i for i, row in enumerate(screen.display) if "CPU%▼" in row)
    assert screen.display[header + 1].split()[0] == "139"  # the busiest first
    assert all(len(row.rstrip()) <= width for row in screen.display)
    # A second, shorter frame leaves nothing of the first behind.
    pyte.ByteStream(screen).feed(compose_frame(lines[:3], width, height).encode())
    assert all(not row.strip() for row in screen.display[3:])


def test_keys_skip_escape_sequences():
    assert list(_keys(b"\x1b[Am\x1bOPg\x1b[15~q")) == ["m", "g", "q"]


# --- the real CLI ----------------------------------------------------------------------------


def test_cli_once_prints_one_text_snapshot_with_simulated_gpus(cw):
    r = cw.ok("top", "--once", "--gpu-backend", "fake:1xH100-SXM")
    assert "NVIDIA H100 80GB HBM3 (simulated)" in r.stdout
    assert "\x1b" not in r.stdout
    assert r.stdout.count("computewatch top  (CPU over") == 1  # one title line
    assert "PID USER" in r.stdout


def test_cli_once_json_parses(cw):
    doc = cw.json("top", "--once", "--gpu-backend", "fake:1xH100-SXM", "--sort", "memory")
    assert doc["gpus_simulated"] is True and doc["sort"] == "memory"
    assert doc["gpus"][0]["name"] == "NVIDIA H100 80GB HBM3" and doc["gpus"][0]["simulated"]
    assert 0.0 <= doc["host"]["cpu_ratio"] <= 1.0
    rss = [p["rss_bytes"] for p in doc["processes"]]
    assert rss == sorted(rss, reverse=True)


def test_cli_plain_mode_prints_n_snapshots(cw):
    r = cw.ok("top", "--interval", "0.2", "--iterations", "2", "--gpu-backend", "none")
    blocks = r.stdout.split("\n\n")
    titles = [ln for ln in r.stdout.splitlines() if "computewatch top  (CPU over" in ln]
    assert len(titles) == 2
    assert len(blocks) >= 3  # title+host+note, table; then the second snapshot
    assert r.stdout.count("GPU: GPUs are not read (--gpu-backend none)") == 2
    lines = cw.ok("top", "--interval", "0.2", "--iterations", "2", "--json").stdout.splitlines()
    assert [json.loads(ln)["sort"] for ln in lines] == ["cpu", "cpu"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--interval", "0.1"], "between 0.2 and 60"),
        (["--interval", "61"], "between 0.2 and 60"),
        (["--sort", "name"], "invalid choice"),
        (["--gpu-backend", "fake:NOPE"], "unknown model"),
        (["--iterations", "0"], "at least 1"),
    ],
)
def test_cli_bad_options(cw, args, message):
    r = cw("top", *args)
    assert r.returncode == 2
    assert message in r.stderr and "Traceback" not in r.stderr


# --- full screen in a pseudo-terminal ----------------------------------------------------------

ROWS, COLS = 30, 120


class Term:
    """A ``computewatch top`` in a pty, its output fed to a pyte screen."""

    def __init__(self, cw, *args: str) -> None:
        self.child = pexpect.spawn(
            sys.executable,
            ["-m", "computewatch", "top", *args],
            env=cw.env(TERM="xterm-256color"),
            cwd=str(cw.tmp),
            dimensions=(ROWS, COLS),
            timeout=60,
        )
        self.screen = pyte.Screen(COLS, ROWS)
        self.stream = pyte.ByteStream(self.screen)
        self.raw = b""

    def _pump(self, timeout: float) -> bool:
        try:
            data = self.child.read_nonblocking(65536, timeout=timeout)
        except pexpect.TIMEOUT:
            return True
        except pexpect.EOF:
            return False
        self.raw += data
        self.stream.feed(data)
        return True

    @property
    def text(self) -> str:
        return "\n".join(self.screen.display)

    def wait_for(self, *needles: str, timeout: float = 60.0) -> str:
        deadline = time.monotonic() + timeout
        while not all(n in self.text for n in needles):
            if time.monotonic() > deadline or not self._pump(0.1):
                pytest.fail(f"screen never showed {needles}:\n{self.text}")
        return self.text

    def finish(self, timeout: float = 60.0) -> int:
        """Read to the end of the output; the exit status (-1 if killed by a signal)."""
        deadline = time.monotonic() + timeout
        while self._pump(0.2):
            if time.monotonic() > deadline:
                pytest.fail(f"computewatch top did not exit:\n{self.text}")
        self.child.close()
        return self.child.exitstatus if self.child.signalstatus is None else -1


def test_full_screen_view_in_a_terminal(cw):
    t = Term(cw, "--interval", "0.3", "--gpu-backend", "fake:2xL4")
    try:
        screen = t.wait_for("GPU 0  NVIDIA L4 (simulated)", "GPU 1  NVIDIA L4 (simulated)")
        assert "sort: cpu" in screen and "CPU%▼" in screen
        assert b"\x1b[?1049h" in t.raw and b"\x1b[?25l" in t.raw
        t.child.send("m")
        screen = t.wait_for("sort: memory", "RSS▼")
        assert "CPU%▼" not in screen
        t.child.send("q")
        status = t.finish()
    finally:
        t.child.close(force=True)
    assert status == 0
    assert b"\x1b[?1049l" in t.raw.split(b"sort: memory")[-1]
    assert t.raw.rstrip().endswith(b"\x1b[?1049l")


@pytest.mark.parametrize(("how", "expected"), [("ctrl-c", 0), ("sigterm", 143)])
def test_full_screen_view_restores_the_terminal_on_interrupt(cw, how, expected):
    t = Term(cw, "--interval", "0.2", "--gpu-backend", "none")
    try:
        t.wait_for("GPU: GPUs are not read")
        if how == "ctrl-c":
            t.child.sendintr()
        else:
            t.child.kill(signal.SIGTERM)
        status = t.finish()
    finally:
        t.child.close(force=True)
    assert status == expected
    assert t.raw.rstrip().endswith(b"\x1b[?25h\x1b[?1049l")
