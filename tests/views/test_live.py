"""The live view: unit formatting, plain and quiet modes, and the panel on a real pseudo-terminal.

The panel tests run a child Python in a pty (pexpect), capture every byte it writes and replay
them into a terminal emulator (pyte), then look at the screen: the child's own lines must all be
intact, the panel must sit in the bottom rows while running, and close() must give the screen
back. Nothing depends on timing: the child is synchronised by markers in its output.
"""

from __future__ import annotations

import contextlib
import fcntl
import io
import os
import pty
import struct
import sys
import termios
import textwrap
from pathlib import Path

import pexpect
import pyte
import pytest

from computewatch.units import format_bytes, format_duration, format_rate
from computewatch.views.live import GpuLine, Snapshot, make_live_view, sparkline

GiB = 2.0**30
MiB = 2.0**20
SRC = Path(__file__).resolve().parents[2] / "src"
SPARK_CHARS = set("▁▂▃▄▅▆▇█")


def full_snapshot(elapsed: float = 12.0) -> Snapshot:
    return Snapshot(
        elapsed_seconds=elapsed,
        cpu_ratio=0.97,
        allowed_cores=2.0,
        tree_rss_bytes=1.2 * GiB,
        host_memory_used_bytes=3.1 * GiB,
        host_memory_total_bytes=23.4 * GiB,
        disk_read_bytes_per_second=0.0,
        disk_write_bytes_per_second=1.5 * MiB,
        net_recv_bytes_per_second=2048.0,
        net_sent_bytes_per_second=1024.0,
        processes=3,
        steps_total=120,
        steps_per_second=10.2,
    )


def empty_snapshot(elapsed: float) -> Snapshot:
    return Snapshot(elapsed, None, 2.0, None, None, None, None, None, None, None, None, None, None)


# --- formatting ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("n", "text"),
    [
        (0, "0 B"),
        (0.4, "0 B"),
        (-0.3, "0 B"),
        (1023, "1023 B"),
        (1024, "1.0 KiB"),
        (1536, "1.5 KiB"),
        (-1536, "-1.5 KiB"),
        (99.96 * 1024, "100 KiB"),
        (150 * MiB, "150 MiB"),
        (1024 * 1024 - 1, "1.0 MiB"),  # 1023.999 KiB would round to "1024 KiB"
        (1.2 * GiB, "1.2 GiB"),
        (23.4 * GiB, "23.4 GiB"),
        (2.0**70, "1024 EiB"),
        (float("nan"), "n/a"),  # every formatter's missing value (computewatch.units)
    ],
)
def test_format_bytes(n: float, text: str) -> None:
    assert format_bytes(n) == text


def test_format_rate() -> None:
    assert format_rate(1.5 * MiB) == "1.5 MiB/s"
    assert format_rate(0) == "0 B/s"


@pytest.mark.parametrize(
    ("s", "text"),
    [
        (0, "0:00:00"),
        (12.9, "0:00:12"),
        (3725, "1:02:05"),
        (93789, "26:03:09"),
        (-5, "0:00:00"),
        (float("inf"), "n/a"),
    ],
)
def test_format_duration(s: float, text: str) -> None:
    assert format_duration(s) == text


def test_sparkline_known_values() -> None:
    assert sparkline([0, 1, 2, 3, 4, 5, 6, 7], hi=7) == "▁▂▃▄▅▆▇█"
    assert sparkline([0.0, 0.5, 1.0], 0.0, 1.0) == "▁▅█"


def test_sparkline_clamps_out_of_range_and_marks_nan() -> None:
    assert sparkline([-1.0, 2.0, float("nan")], 0.0, 1.0) == "▁█ "


def test_sparkline_constant_and_empty() -> None:
    assert sparkline([]) == ""
    assert sparkline([5, 5, 5]) == "███"  # scaled from 0 to the max
    assert sparkline([0, 0]) == "▁▁"  # nothing above lo
    assert sparkline([2, 2], lo=2) == "▁▁"


# --- plain and quiet -------------------------------------------------------------------------


def test_plain_full_line() -> None:
    out = io.StringIO()
    view = make_live_view(out, "plain")
    view.update(full_snapshot(12.0))
    assert out.getvalue() == (
        "[computewatch] 0:00:12  cpu 97% of 2 cores  rss 1.2 GiB  mem 3.1/23.4 GiB"
        "  disk r 0 B/s w 1.5 MiB/s  net r 2.0 KiB/s s 1.0 KiB/s  procs 3  steps 120 (10.2/s)\n"
    )


def test_plain_one_line_per_interval() -> None:
    out = io.StringIO()
    view = make_live_view(out, "plain", title="train", plain_every_seconds=5.0)
    for t in (0.0, 1.0, 4.99, 5.0, 5.1, 9.99, 10.0, 10.5, 17.0, 17.5):
        view.update(empty_snapshot(t))
    view.close()
    assert out.getvalue().splitlines() == [
        "[computewatch] train  0:00:05",
        "[computewatch] train  0:00:10",
        "[computewatch] train  0:00:17",
    ]


def test_plain_omits_unknown_fields() -> None:
    out = io.StringIO()
    view = make_live_view(out, "plain", plain_every_seconds=1.0)
    snap = Snapshot(
        elapsed_seconds=2.0,
        cpu_ratio=0.5,
        allowed_cores=1.0,
        tree_rss_bytes=None,
        host_memory_used_bytes=None,
        host_memory_total_bytes=None,
        disk_read_bytes_per_second=None,
        disk_write_bytes_per_second=512.0,
        net_recv_bytes_per_second=None,
        net_sent_bytes_per_second=None,
        processes=None,
        steps_total=7,
        steps_per_second=None,
        gpus=(GpuLine("0", "Fake GPU", 0.25, 1 * GiB, 8 * GiB, None, simulated=True),),
    )
    view.update(snap)
    assert out.getvalue() == (
        "[computewatch] 0:00:02  cpu 50% of 1 core  disk w 512 B/s  steps 7"
        "  gpu0 (simulated) 25% 1.0/8.0 GiB\n"
    )


def test_plain_notes_and_control_characters() -> None:
    out = io.StringIO()
    view = make_live_view(out, "plain")
    view.note("source gpu failed:\nNVML \x1b[31mgone")
    assert out.getvalue() == "[computewatch] source gpu failed: NVML  [31mgone\n"


def test_quiet_prints_notes_only() -> None:
    out = io.StringIO()
    view = make_live_view(out, "quiet")
    for t in range(0, 60, 5):
        view.update(full_snapshot(float(t)))
    assert out.getvalue() == ""
    view.note("source rapl failed: permission denied")
    view.close()
    view.close()
    assert out.getvalue() == "[computewatch] source rapl failed: permission denied\n"


class FakeTty(io.StringIO):
    """Says it is a terminal but has no file descriptor, like a wrapped stream might."""

    def isatty(self) -> bool:
        return True


def test_auto_picks_plain_off_a_tty_and_on_a_dumb_terminal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    out = io.StringIO()
    make_live_view(out).update(empty_snapshot(5.0))
    assert out.getvalue() == "[computewatch] 0:00:05\n"

    monkeypatch.setenv("TERM", "dumb")
    tty_out = FakeTty()
    make_live_view(tty_out).update(empty_snapshot(5.0))
    assert tty_out.getvalue() == "[computewatch] 0:00:05\n"


def test_unknown_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown live view mode"):
        make_live_view(io.StringIO(), "fancy")  # type: ignore[arg-type]


# --- panel: failures never reach the caller --------------------------------------------------


def test_panel_without_terminal_size_turns_itself_off() -> None:
    out = FakeTty()
    view = make_live_view(out, "panel")
    view.note("queued before the first update")
    view.update(full_snapshot())  # fileno() raises io.UnsupportedOperation, an OSError
    view.note("after")
    view.close()
    view.close()
    assert out.getvalue() == "[computewatch] queued before the first update\n[computewatch] after\n"


def set_winsize(fd: int, rows: int, cols: int) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def test_panel_survives_the_terminal_going_away() -> None:
    master, slave = pty.openpty()
    set_winsize(slave, 24, 100)
    stream = open(slave, "w", encoding="utf-8")  # noqa: SIM115
    view = make_live_view(stream, "panel")
    view.update(full_snapshot(1.0))
    assert os.read(master, 65536)  # the panel was drawn
    os.close(master)  # hang up: writes to the slave now fail with EIO
    view.update(full_snapshot(2.0))
    view.note("still no exception")
    view.close()
    view.close()
    with contextlib.suppress(OSError):  # the failed write is still in the file's buffer
        stream.close()
    assert stream.closed


# --- panel: a real child in a pseudo-terminal ------------------------------------------------

CHILD = textwrap.dedent(
    """
    import sys
    from computewatch.views.live import GpuLine, Snapshot, make_live_view

    GiB = 2.0**30

    def snap(i):
        return Snapshot(
            elapsed_seconds=float(i),
            cpu_ratio=(i % 10) / 10,
            allowed_cores=2.0,
            tree_rss_bytes=1.0 * GiB + i * 2**20,
            host_memory_used_bytes=3.1 * GiB,
            host_memory_total_bytes=23.4 * GiB,
            disk_read_bytes_per_second=0.0,
            disk_write_bytes_per_second=1.5 * 2**20,
            net_recv_bytes_per_second=2048.0,
            net_sent_bytes_per_second=1024.0,
            processes=3,
            steps_total=10 * i if i > 20 else None,  # the panel grows a steps row at 21
            steps_per_second=10.2 if i > 20 else None,
            gpus=(GpuLine("0", "Fake H200", 0.87, 10 * GiB, 80 * GiB, 250.0, True),)
            if i > 40  # and a GPU row at 41
            else (),
        )

    view = make_live_view(sys.stderr, "auto", title="demo")
    for i in range(1, N + 1):
        if i == 30:
            # a partial line: the panel redraw must not break it
            print("line 030 partial", end="", flush=True)
            view.update(snap(i))
            print(" rest", flush=True)
            view.note("source gpu failed:\\nboom")
            continue
        if i == RESIZE_AT:
            print("WAIT", flush=True)
            sys.stdin.readline()
        print(f"line {i:03d} " + "x" * 20, flush=True)
        view.update(snap(i))
    print("before close", flush=True)
    view.close()
    print("after close", flush=True)
    """
)


def expected_line(i: int) -> str:
    return "line 030 partial rest" if i == 30 else f"line {i:03d} " + "x" * 20


def spawn_child(tmp_path: Path, n: int, resize_at: int = 0) -> pexpect.spawn:
    script = tmp_path / "child.py"
    script.write_text(f"N = {n}\nRESIZE_AT = {resize_at}\n" + CHILD, encoding="utf-8")
    env = dict(os.environ, TERM="xterm", PYTHONPATH=os.pathsep.join([str(SRC), *sys.path]))
    child = pexpect.spawn(
        sys.executable, [str(script)], dimensions=(24, 100), echo=False, env=env, timeout=60
    )
    child.logfile_read = io.BytesIO()
    return child


def finish(child: pexpect.spawn) -> bytes:
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0, child.logfile_read.getvalue().decode(errors="replace")
    data: bytes = child.logfile_read.getvalue()
    return data


def text_rows(screen: pyte.HistoryScreen) -> list[str]:
    """Everything that scrolled off the top, then the screen, as plain text."""
    scrolled = [
        "".join(line[x].data for x in range(screen.columns)).rstrip() for line in screen.history.top
    ]
    return scrolled + [row.rstrip() for row in screen.display]


def after(data: bytes, marker: bytes) -> int:
    return data.index(marker) + len(marker) + len(b"\r\n")


def test_panel_keeps_the_commands_output_intact(tmp_path: Path) -> None:
    n = 60
    data = finish(spawn_child(tmp_path, n))
    screen = pyte.HistoryScreen(100, 24, history=10_000)
    stream = pyte.ByteStream(screen)

    # While running (just before close()): the panel owns the bottom rows.
    stream.feed(data[: after(data, b"before close")])
    # Rows 1-19 scroll; 5 panel rows below: header, cpu, mem, steps, gpu.
    assert screen.margins == (0, 18)
    panel = [row.rstrip() for row in screen.display[19:]]
    assert panel[0].startswith(" computewatch  demo  0:01:00  3 procs  ! source gpu failed: boom")
    assert screen.buffer[19][1].reverse  # the header is a reverse-video bar
    assert panel[1].startswith(" cpu          0% of 2 cores")
    assert set(panel[1]) & SPARK_CHARS
    assert "disk r 0 B/s w 1.5 MiB/s" in panel[1]
    assert panel[2].startswith(" mem     1.1 GiB  host 3.1/23.4 GiB")
    assert "net  r 2.0 KiB/s s 1.0 KiB/s" in panel[2]
    assert panel[3].startswith(" steps       600  10.2/s")
    assert panel[4].startswith(" gpu0        87%  10.0/80.0 GiB  250 W")
    assert panel[4].endswith("(simulated) Fake H200")
    assert text_rows(screen)[-len(panel) - 3 : -len(panel) - 1] == [
        expected_line(n),
        "before close",
    ]

    # After close(): the scroll region is gone, the panel rows are cleared and what follows
    # (notes, then the caller's summary) prints right under the command's output.
    stream.feed(data[after(data, b"before close") :])
    assert screen.margins is None
    rows = text_rows(screen)
    while rows and not rows[-1]:
        rows.pop()
    assert rows[-3:] == ["before close", "[computewatch] source gpu failed: boom", "after close"]
    assert not any(SPARK_CHARS & set(row) for row in rows)
    # Every line the command printed is there, whole and in order, nothing in between.
    assert rows[:-3] == [expected_line(i) for i in range(1, n + 1)]


def test_panel_follows_a_resize(tmp_path: Path) -> None:
    n = 50
    child = spawn_child(tmp_path, n, resize_at=35)
    child.expect("WAIT")
    child.setwinsize(30, 80)  # the child sees it at its next update
    child.sendline("")
    data = finish(child)

    screen = pyte.HistoryScreen(100, 24, history=10_000)
    stream = pyte.ByteStream(screen)
    cut = after(data, b"WAIT")
    stream.feed(data[:cut])
    assert screen.margins == (0, 19)  # 4 panel rows before the GPU appears
    screen.resize(30, 80)
    stream.feed(data[cut : after(data, b"before close")])
    assert screen.margins == (0, 24)  # re-applied for 30 rows, 5 panel rows
    panel = [row.rstrip() for row in screen.display[25:]]
    assert panel[1].startswith(" cpu ")
    assert all(len(row) <= 79 for row in panel)  # cut to the new width, last column left alone
    stream.feed(data[after(data, b"before close") :])
    assert screen.margins is None

    rows = [row for row in text_rows(screen) if row]
    assert rows[-3:] == ["before close", "[computewatch] source gpu failed: boom", "after close"]
    assert not any(SPARK_CHARS & set(row) for row in rows)
    before = [expected_line(i) for i in range(1, 35)]
    assert rows[:-3] == [*before, "WAIT", *(expected_line(i) for i in range(35, n + 1))]
