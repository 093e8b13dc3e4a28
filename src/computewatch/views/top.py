"""Drawing ``computewatch top``: a full-screen view on a terminal, plain text or JSON elsewhere.

The data come from :mod:`computewatch.sampling.top`; this module only lays them out and reads keys.

- :func:`run_screen` (stdout is a terminal): the alternate screen buffer (``ESC[?1049h``,
  xterm's ctlseqs), cursor hidden, one ``write`` per frame that rewrites every row, the
  terminal's size re-read at every frame. Keys are read without Enter (termios cbreak, one
  ``select`` with the refresh interval as timeout). The terminal is restored on every way out:
  ``q``, Ctrl-C, SIGTERM (exit status 143), an error; Ctrl-Z restores it while stopped.
- :func:`run_plain` (a pipe or a file): one text snapshot per interval, each starting with a
  timestamp line and separated by a blank line; or JSON.

No curses: plain ANSI/VT100 sequences work over SSH and are easy to check in a test terminal.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import select
import signal
import sys
import termios
import threading
import time
import tty
import unicodedata
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from types import FrameType
from typing import Any, Protocol, TextIO

from computewatch import jsonout
from computewatch.errors import ComputewatchError
from computewatch.sampling.top import (
    GpuRow,
    ProcessRow,
    SortKey,
    TopSnapshot,
    snapshot_as_dict,
    sort_processes,
)
from computewatch.units import BYTE_UNITS, MISSING, format_bytes, format_percent
from computewatch.views.live import sparkline

__all__ = [
    "KEYS",
    "SnapshotSource",
    "compose_frame",
    "render_screen",
    "render_text",
    "run_plain",
    "run_screen",
]

KEYS: dict[str, SortKey] = {"c": "cpu", "m": "memory", "g": "gpu-memory", "s": "gpu", "p": "pid"}
"""Keys of the full-screen view that change the sort; ``q`` quits."""

_HINT = "c/m/g/s/p sort  q quit"
_HISTORY = 60  # host CPU sparkline, in refreshes

# Escape sequences (ECMA-48 / xterm ctlseqs).
_ENTER = "\x1b[?1049h\x1b[?25l\x1b[H\x1b[2J"  # alternate screen, hide cursor, clear
_LEAVE = "\x1b[?25h\x1b[?1049l"  # show cursor, back to the normal screen
_HOME = "\x1b[H"
_EL = "\x1b[K"  # erase to the end of the line
_SGR_RESET = "\x1b[0m"
_BOLD = "1"
_DIM = "2"
_REVERSE = "7"

Line = tuple[str, str]
"""A row of the screen: its text and an SGR style ("" for none)."""


class SnapshotSource(Protocol):
    """What the views draw from: :class:`~computewatch.sampling.top.TopCollector` or a double."""

    def snapshot(self) -> TopSnapshot: ...


# --- text cells ------------------------------------------------------------------------------


def _cell_width(ch: str) -> int:
    if unicodedata.combining(ch):
        return 0
    return 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1


def _fit(text: str, width: int) -> tuple[str, int]:
    """``text`` cut to ``width`` terminal cells, and the cells it takes."""
    used = 0
    for i, ch in enumerate(text):
        w = _cell_width(ch)
        if used + w > width:
            return text[:i], used
        used += w
    return text, used


def _clean(text: str) -> str:
    return "".join(c if c.isprintable() else " " for c in text)


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(0, width - 1)] + "…"


# --- numbers ---------------------------------------------------------------------------------


def _pair(used: float | None, total: float | None) -> str:
    """``18.1/24.0 GiB``: both in the unit of the total."""
    if used is None:
        return MISSING if total is None else f"?/{format_bytes(total)}"
    if total is None or total <= 0:
        return format_bytes(used)
    number, _, unit = format_bytes(total).partition(" ")
    if unit not in BYTE_UNITS or unit == "B":
        return f"{used:.0f}/{number} B"
    scale = 1024.0 ** BYTE_UNITS.index(unit)
    return f"{used / scale:.1f}/{number} {unit}"


def _bar(ratio: float | None, width: int, unicode: bool) -> str:
    full, empty = ("█", "░") if unicode else ("#", ".")
    r = 0.0 if ratio is None or not math.isfinite(ratio) else min(1.0, max(0.0, ratio))
    n = round(r * width)
    return "[" + full * n + empty * (width - n) + "]"


def _process_cpu(r: ProcessRow) -> str:
    v = r.cpu_ratio * 100
    return f"{v:.1f}" if v < 999.95 else f"{v:.0f}"


# --- sections --------------------------------------------------------------------------------


def _title(snap: TopSnapshot, sort: SortKey, interval: float, *, screen: bool) -> str:
    clock = time.strftime("%H:%M:%S" if screen else "%Y-%m-%d %H:%M:%S%z", _local(snap))
    sim = "  [simulated GPUs]" if snap.simulated else ""
    if screen:
        return (
            f"computewatch top  {_clean(snap.host.hostname)}  {clock}  every {interval:g}s"
            f"  sort: {sort}{sim}    {_HINT}"
        )
    return (
        f"{clock}  {_clean(snap.host.hostname)}  computewatch top  (CPU over "
        f"{snap.interval_seconds:.2f} s, sort: {sort}){sim}"
    )


def _local(snap: TopSnapshot) -> time.struct_time:
    return time.localtime(snap.wall_time)


def _host_line(snap: TopSnapshot, history: Sequence[float] | None) -> str:
    h = snap.host
    plural = "s" if h.cpu_count != 1 else ""
    cpu = f"CPU {format_percent(h.cpu_ratio, 1):>6} of {h.cpu_count} CPU{plural}"
    if history:
        cpu += " " + sparkline(list(history), 0.0, 1.0)
    parts = [cpu]
    if h.memory_used_bytes is not None or h.memory_total_bytes is not None:
        parts.append(f"Mem {_pair(h.memory_used_bytes, h.memory_total_bytes)}")
    if h.swap_total_bytes:
        parts.append(f"Swap {_pair(h.swap_used_bytes, h.swap_total_bytes)}")
    if h.load1 is not None and h.load5 is not None and h.load15 is not None:
        parts.append(f"Load {h.load1:.2f} {h.load5:.2f} {h.load15:.2f}")
    parts.append(f"Tasks {h.processes}, {h.running} running")
    return "   ".join(parts)


def _gpu_lines(snap: TopSnapshot, *, bars: bool, unicode: bool) -> list[str]:
    if not snap.gpus:
        return []
    name_w = min(28, max(len(_clean(g.name)) for g in snap.gpus))
    index_w = max(len(g.index) for g in snap.gpus)
    return [_gpu_line(g, name_w, index_w, bars=bars, unicode=unicode) for g in snap.gpus]


def _gpu_line(g: GpuRow, name_w: int, index_w: int, *, bars: bool, unicode: bool) -> str:
    name = _cut(_clean(g.name), name_w).ljust(name_w)
    head = f"GPU {g.index:>{index_w}}  {name}" + (" (simulated)" if g.simulated else "")
    if g.lost:
        return head + "  LOST: no readings since the driver reported it gone"
    util = f"util {format_percent(g.utilization_ratio, 0):>4}"
    if bars:
        util += " " + _bar(g.utilization_ratio, 10, unicode)
    parts = [head, util, f"mem {_pair(g.memory_used_bytes, g.memory_total_bytes)}"]
    if g.power_watts is not None:
        limit = f"/{g.power_limit_watts:.0f}" if g.power_limit_watts else ""
        parts.append(f"{g.power_watts:.0f}{limit} W")
    if g.temperature_celsius is not None:
        parts.append(f"{g.temperature_celsius:.0f}C")
    if g.sm_clock_hertz is not None:
        parts.append(f"SM {g.sm_clock_hertz / 1e9:.2f} GHz")
    return "  ".join(parts)


def _notes(snap: TopSnapshot) -> list[str]:
    notes = [f"GPU: {_clean(n)}" for n in snap.gpu_notes]
    if snap.unreadable_environ:
        notes.append(
            f"run ids unknown (?) for {snap.unreadable_environ} processes whose environment "
            "is not readable (another user's process: needs root or CAP_SYS_PTRACE)"
        )
    return notes


@dataclasses.dataclass(frozen=True, slots=True)
class _Column:
    title: str
    width: int
    right: bool
    key: SortKey | None
    cell: Callable[[ProcessRow], str]


def _columns(snap: TopSnapshot) -> list[_Column]:
    cols = [
        _Column("PID", 7, True, "pid", lambda r: str(r.pid)),
        _Column("USER", 9, False, None, lambda r: _cut(_clean(r.user), 9)),
        _Column("S", 1, False, None, lambda r: r.state[:1]),
        _Column("CPU%", 6, True, "cpu", _process_cpu),
        _Column("RSS", 9, True, "memory", lambda r: format_bytes(r.rss_bytes)),
    ]
    if snap.gpus:
        cols += [
            _Column("GPU", 5, False, None, lambda r: _cut(",".join(r.gpus), 5) or "-"),
            _Column(
                "GPU-MEM",
                9,
                True,
                "gpu-memory",
                lambda r: format_bytes(r.gpu_memory_bytes),
            ),
            _Column("SM%", 5, True, "gpu", lambda r: format_percent(r.gpu_sm_ratio, 0).rstrip("%")),
        ]
    if any(r.run_id for r in snap.processes):
        cols.append(
            _Column(
                "RUN",
                12,
                False,
                None,
                lambda r: _cut(r.run_id, 12) if r.run_id else ("" if r.run_id_readable else "?"),
            )
        )
    return cols


def _row_text(cols: Sequence[_Column], cells: Sequence[str], command: str) -> str:
    out = [
        c.rjust(col.width) if col.right else c.ljust(col.width)
        for col, c in zip(cols, cells, strict=True)
    ]
    return " ".join([*out, command])


def _short_command(command: str) -> str:
    """The command with its program's directory left out: ``python train.py``."""
    if not command.startswith("/"):
        return command
    program, sep, args = command.partition(" ")
    return os.path.basename(program) + sep + args


def _table(snap: TopSnapshot, sort: SortKey, marker: str, *, short: bool) -> tuple[str, list[str]]:
    cols = _columns(snap)
    titles = [c.title + (marker if c.key == sort else "") for c in cols]
    header = _row_text(cols, titles, "COMMAND")
    rows = [
        _row_text(
            cols, [c.cell(r) for c in cols], _short_command(r.command) if short else r.command
        )
        for r in sort_processes(snap.processes, sort)
    ]
    return header, rows


# --- whole views -----------------------------------------------------------------------------


def render_text(snap: TopSnapshot, sort: SortKey, interval: float) -> str:
    """The plain-text snapshot (no escape sequences, ASCII apart from names), every process
    listed, command lines as the collector truncated them."""
    lines = [_title(snap, sort, interval, screen=False), _host_line(snap, None)]
    lines += _gpu_lines(snap, bars=False, unicode=False)
    lines += _notes(snap)
    header, rows = _table(snap, sort, "*", short=False)
    lines += ["", header, *rows]
    if not rows:
        lines.append("(no process used CPU or GPU in the interval)")
    return "\n".join(lines) + "\n"


def render_screen(
    snap: TopSnapshot,
    sort: SortKey,
    interval: float,
    width: int,
    height: int,
    history: Sequence[float] = (),
    *,
    unicode: bool = True,
) -> list[Line]:
    """The rows of one full-screen frame, at most ``height``; text is cut by
    :func:`compose_frame`. When the processes do not fit, the last row says how many are left
    out."""
    lines: list[Line] = [(_title(snap, sort, interval, screen=True), _BOLD)]
    spark = list(history)[-max(0, min(_HISTORY, width // 4)) :] if unicode else []
    lines.append((_host_line(snap, spark), ""))
    lines += [(t, "") for t in _gpu_lines(snap, bars=width >= 100, unicode=unicode)]
    lines += [(t, _DIM) for t in _notes(snap)[:4]]
    header, rows = _table(snap, sort, "▼" if unicode else "*", short=True)
    lines += [("", ""), (header, _REVERSE)]
    room = height - len(lines)
    if room <= 0:
        return lines[:height]
    if len(rows) > room:
        shown = rows[: room - 1]
        lines += [(t, "") for t in shown]
        lines.append((f"... {len(rows) - len(shown)} more processes", _DIM))
    else:
        lines += [(t, "") for t in rows]
    return lines


def compose_frame(lines: Sequence[Line], width: int, height: int) -> str:
    """One frame as a single string: every row from the top rewritten, cut to the width (the
    bottom row one cell short, so the terminal never scrolls), then cleared to its end."""
    parts = [_HOME]
    for row in range(height):
        text, style = lines[row] if row < len(lines) else ("", "")
        room = width - 1 if row == height - 1 else width
        fitted, cells = _fit(text, max(0, room))
        if style == _REVERSE:  # a bar across the whole row
            fitted += " " * (room - cells)
            cells = room
        parts.append(f"\x1b[{style}m{fitted}{_SGR_RESET}" if style and fitted else fitted)
        if cells < room:
            parts.append(_EL)
        if row < height - 1:
            parts.append("\r\n")
    return "".join(parts)


# --- plain mode ------------------------------------------------------------------------------


def run_plain(
    source: SnapshotSource,
    stream: TextIO,
    *,
    interval: float,
    sort: SortKey,
    iterations: int | None = None,
    as_json: bool = False,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Print a snapshot every ``interval`` seconds, ``iterations`` of them (None: until
    interrupted). JSON: one indented document for a single snapshot, else one per line."""
    n = 0
    while True:
        started = clock()
        snap = source.snapshot()
        if as_json:
            doc = snapshot_as_dict(snap, sort)
            text = jsonout.dumps(doc, indent=2 if iterations == 1 else None) + "\n"
        else:
            text = ("\n" if n else "") + render_text(snap, sort, interval)
        stream.write(text)
        stream.flush()
        n += 1
        if iterations is not None and n >= iterations:
            return 0
        sleep(max(0.0, started + interval - clock()))


# --- full screen -----------------------------------------------------------------------------


class _Terminated(ComputewatchError):
    """SIGTERM arrived: leave the screen and exit 143."""


def _keys(data: bytes) -> Iterator[str]:
    """The plain keys in ``data``; escape sequences (arrows, function keys) are skipped."""
    i = 0
    n = len(data)
    while i < n:
        b = data[i]
        if b == 0x1B:
            i += 1
            if i < n and data[i] in b"[O":
                i += 1
                while i < n and not 0x40 <= data[i] <= 0x7E:
                    i += 1
                i += 1
            continue
        i += 1
        if b < 0x80:
            yield chr(b)


class _Terminal:
    """The terminal's modes: entering and leaving the full-screen state, idempotently."""

    def __init__(self, out_fd: int, in_fd: int | None) -> None:
        self.out_fd = out_fd
        self.in_fd = in_fd
        self._saved: list[Any] | None = None
        self.active = False

    def write(self, text: str) -> None:
        data = text.encode("utf-8", "replace")
        while data:
            try:
                n = os.write(self.out_fd, data)
            except InterruptedError:  # pragma: no cover - retried by Python (PEP 475)
                continue
            data = data[n:]

    def enter(self) -> None:
        if self.active:
            return
        if self.in_fd is not None:
            try:
                self._saved = termios.tcgetattr(self.in_fd)
                tty.setcbreak(self.in_fd, termios.TCSANOW)
            except termios.error:
                self._saved = None
        self.active = True
        self.write(_ENTER)

    def leave(self) -> None:
        if not self.active:
            return
        self.active = False
        with contextlib.suppress(OSError):
            self.write(_SGR_RESET + _LEAVE)
        if self._saved is not None and self.in_fd is not None:
            with contextlib.suppress(termios.error, OSError):
                termios.tcsetattr(self.in_fd, termios.TCSADRAIN, self._saved)
            self._saved = None


def _size(fd: int) -> tuple[int, int]:
    try:
        size = os.get_terminal_size(fd)
    except OSError:
        return 80, 24
    return max(1, size.columns), max(1, size.lines)


def run_screen(
    source: SnapshotSource,
    *,
    interval: float,
    sort: SortKey,
    iterations: int | None = None,
    out_fd: int | None = None,
    in_fd: int | None = None,
    unicode: bool | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> int:
    """The full-screen view until ``q``, Ctrl-C (0), SIGTERM (143) or ``iterations`` frames.

    ``out_fd`` is the terminal (default: standard output); ``in_fd`` where keys come from
    (default: standard input when it is a terminal; without one only Ctrl-C quits).
    ``unicode`` draws bars and sparklines with block characters (default: when standard
    output's encoding is UTF-8)."""
    if out_fd is None:
        out_fd = sys.stdout.fileno()
    if in_fd is None and sys.stdin is not None and sys.stdin.isatty():
        in_fd = sys.stdin.fileno()
    if unicode is None:
        unicode = "utf" in (getattr(sys.stdout, "encoding", "") or "").lower()
    term = _Terminal(out_fd, in_fd)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    history: deque[float] = deque(maxlen=_HISTORY)
    last: TopSnapshot | None = None

    def draw() -> None:
        width, height = _size(out_fd)
        if last is None:
            lines: list[Line] = [("computewatch top: reading the host...", _BOLD)]
        else:
            lines = render_screen(last, sort, interval, width, height, history, unicode=unicode)
        term.write(compose_frame(lines, width, height))

    def wake(*_: object) -> None:
        with contextlib.suppress(OSError):
            os.write(wake_w, b"w")

    def on_term(signum: int, frame: FrameType | None) -> None:
        raise _Terminated

    def on_tstp(signum: int, frame: FrameType | None) -> None:
        term.leave()
        signal.signal(signal.SIGTSTP, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTSTP)  # stops here until SIGCONT
        signal.signal(signal.SIGTSTP, on_tstp)
        term.enter()
        wake()

    handlers: dict[signal.Signals, Any] = {}
    main_thread = threading.current_thread() is threading.main_thread()
    try:
        if main_thread:
            for sig, fn in (
                (signal.SIGTERM, on_term),
                (signal.SIGWINCH, wake),
                (signal.SIGTSTP, on_tstp),
            ):
                handlers[sig] = signal.signal(sig, fn)
        term.enter()
        draw()
        frames = 0
        while True:
            started = clock()
            last = source.snapshot()
            frames += 1
            if last.host.cpu_ratio is not None:
                history.append(last.host.cpu_ratio)
            draw()
            if iterations is not None and frames >= iterations:
                return 0
            deadline = started + interval
            while (left := deadline - clock()) > 0:
                fds = [wake_r] if in_fd is None else [wake_r, in_fd]
                ready, _, _ = select.select(fds, [], [], left)
                if wake_r in ready:
                    with contextlib.suppress(OSError):
                        os.read(wake_r, 4096)
                    draw()
                if in_fd is not None and in_fd in ready:
                    data = os.read(in_fd, 1024)
                    if not data:  # end of input: keys are over, the view goes on
                        in_fd = None
                        continue
                    for key in _keys(data):
                        if key in ("q", "Q"):
                            return 0
                        new = KEYS.get(key)
                        if new is not None and new != sort:
                            sort = new
                            draw()
    except KeyboardInterrupt:
        return 0
    except _Terminated:
        return 128 + signal.SIGTERM
    finally:
        for sig, old in handlers.items():
            with contextlib.suppress(ValueError, TypeError):
                signal.signal(sig, old)
        term.leave()
        os.close(wake_r)
        os.close(wake_w)
