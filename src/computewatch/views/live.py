"""The live view that ``computewatch run`` shows on stderr while the command runs.

The command writes to the same terminal, so the view must never garble its output:

- ``panel`` (a TTY): a few lines pinned to the bottom rows with a scroll region (DECSTBM), the
  technique apt uses for its progress bar; the command's output scrolls above, untouched. Each
  redraw is one ``write()`` framed by save/restore cursor (DECSC/DECRC), and a single
  ``write(2)`` to a tty is not interleaved with other writers' (Linux holds the tty's
  ``atomic_write_lock`` for the whole call).
- ``plain`` (not a TTY): one ``[computewatch] ...`` line every few seconds of elapsed time.
- ``quiet``: nothing but notes (warnings matter even when the view is off).

Numbers are printed by :mod:`computewatch.units`, as in every other view; ``sparkline`` lives
here.
"""

from __future__ import annotations

import contextlib
import io
import math
import os
import threading
import unicodedata
from collections import deque
from collections.abc import Sequence
from typing import Literal, TextIO

from computewatch.escape import clean_text
from computewatch.sampling.live import (
    PREFIX,
    GpuLine,
    LiveView,
    QuietView,
    Snapshot,
    one_line,
    write_flush,
)
from computewatch.units import (
    BYTE_UNITS,
    format_bytes,
    format_duration,
    format_percent,
    format_rate,
    format_watts,
)

__all__ = [
    "GpuLine",
    "LiveView",
    "Snapshot",
    "make_live_view",
    "sparkline",
]

Mode = Literal["auto", "panel", "plain", "quiet"]


_SPARKS = "▁▂▃▄▅▆▇█"
_HISTORY = 30  # sparkline length, in updates

# Escape sequences (ECMA-48 / VT100; xterm's ctlseqs documents each).
_ESC = "\x1b"
_SAVE = _ESC + "7"  # DECSC: cursor position, attributes, wrap flag
_RESTORE = _ESC + "8"  # DECRC
_INDEX = _ESC + "D"  # IND: down one row, scrolling at the bottom margin; keeps the column
_RESET_REGION = _ESC + "[r"  # DECSTBM without arguments: whole screen (also homes the cursor)
_CLEAR_LINE = _ESC + "[2K"
_SGR_RESET = _ESC + "[0m"
_SGR_REVERSE = _ESC + "[7m"


class _Discard(io.TextIOBase):
    """Where the view writes when there is no stream at all (standard error closed)."""

    def write(self, text: str) -> int:
        return len(text)


def make_live_view(
    stream: TextIO | None,
    mode: str = "auto",
    title: str = "",
    *,
    plain_every_seconds: float = 5.0,
) -> LiveView:
    """Build the live view for ``stream``.

    ``auto`` picks ``panel`` when ``stream`` is a TTY and ``$TERM`` is not ``dumb``, else
    ``plain``. ``quiet`` prints notes only. ``plain`` prints a line at the first update in each
    new ``plain_every_seconds`` slot of elapsed time (every update when it is 0 or less).
    No stream (``sys.stderr`` is None when descriptor 2 was closed): a view that writes
    nothing. Every view stops writing at the first failed write, never raising into the run.
    """
    if mode not in ("auto", "panel", "plain", "quiet"):
        raise ValueError(f"unknown live view mode {mode!r}: use auto, panel, plain or quiet")
    if stream is None:
        return QuietView(_Discard())  # type: ignore[arg-type]  # a TextIO that writes nothing
    title = clean_text(title)
    if mode == "auto":
        mode = "panel" if _is_capable_tty(stream) else "plain"
    if mode == "quiet":
        return QuietView(stream)
    if mode == "plain":
        return _PlainView(stream, title=title, every_seconds=plain_every_seconds)
    if mode == "panel":
        return _PanelView(stream, title=title)
    raise ValueError(f"unknown live view mode {mode!r}: use auto, panel, plain or quiet")


# --- human units ---------------------------------------------------------------------------


def sparkline(values: Sequence[float], lo: float = 0.0, hi: float | None = None) -> str:
    """One block character per value, ``▁`` at ``lo`` to ``█`` at ``hi`` (default: the max).

    The range is cut into eight equal bands; values outside are clamped. When ``hi <= lo``
    (for instance all values at ``lo``) every bar is the lowest. NaN draws a space.
    """
    finite = [v for v in values if math.isfinite(v)]
    if hi is None:
        hi = max(finite, default=lo)
    span = hi - lo
    out = []
    for v in values:
        if math.isnan(v):
            out.append(" ")
        elif span <= 0:
            out.append(_SPARKS[0])
        else:
            band = math.floor((v - lo) / span * len(_SPARKS)) if math.isfinite(v) else len(_SPARKS)
            out.append(_SPARKS[min(len(_SPARKS) - 1, max(0, band))])
    return "".join(out)


def _format_ratio(r: float | None) -> str:
    return format_percent(r, 0)


def _format_count_rate(r: float) -> str:
    """Steps per second: ``120``, ``10.2``, ``0.05``."""
    if r >= 100:
        return f"{r:.0f}"
    if r >= 1:
        return f"{r:.1f}"
    return f"{r:.2g}"


def _format_pair(used: float, total: float) -> str:
    """``3.1/23.4 GiB``: both numbers in the unit of the total."""
    total_text = format_bytes(total)
    number, _, unit = total_text.partition(" ")
    if not unit or unit == "B":
        return f"{format_bytes(used).split(' ')[0]}/{total_text}"
    scale = 1024.0 ** BYTE_UNITS.index(unit)
    return f"{used / scale:.1f}/{number} {unit}"


def _cores(n: float) -> str:
    return f"{n:g} core" if n == 1 else f"{n:g} cores"


def _char_width(ch: str) -> int:
    if unicodedata.combining(ch):
        return 0
    return 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1


def _fit(text: str, width: int, *, pad: bool = False) -> str:
    """Cut ``text`` to ``width`` terminal cells (wide characters count two); pad if asked."""
    used = 0
    for i, ch in enumerate(text):
        w = _char_width(ch)
        if used + w > width:
            text = text[:i]
            break
        used += w
    return text + " " * (width - used) if pad else text


def _is_capable_tty(stream: TextIO) -> bool:
    try:
        tty = stream.isatty()
    except (OSError, ValueError, AttributeError):
        return False
    return tty and os.environ.get("TERM", "") != "dumb"


# --- quiet and plain -----------------------------------------------------------------------


class _PlainView(QuietView):
    """One line per ``every_seconds`` of elapsed time, for logs and pipes."""

    shows_figures = True

    def __init__(self, stream: TextIO, *, title: str, every_seconds: float) -> None:
        super().__init__(stream)
        self._title = one_line(title)
        self._every = every_seconds
        self._last_slot = 0

    def update(self, snap: Snapshot) -> None:
        if self._every > 0:
            slot = int(snap.elapsed_seconds // self._every)
            if slot < 1 or slot <= self._last_slot:
                return
            self._last_slot = slot
        self._emit(_plain_line(snap, title=self._title) + "\n")


def _plain_line(snap: Snapshot, *, title: str = "") -> str:
    """The one-line form of a snapshot, fields that are ``None`` left out."""
    parts = [f"{PREFIX} " + (f"{title}  " if title else "") + format_duration(snap.elapsed_seconds)]
    if snap.cpu_ratio is not None:
        parts.append(f"cpu {_format_ratio(snap.cpu_ratio)} of {_cores(snap.allowed_cores)}")
    if snap.tree_rss_bytes is not None:
        parts.append(f"rss {format_bytes(snap.tree_rss_bytes)}")
    if snap.host_memory_used_bytes is not None:
        if snap.host_memory_total_bytes is not None:
            mem = _format_pair(snap.host_memory_used_bytes, snap.host_memory_total_bytes)
        else:
            mem = format_bytes(snap.host_memory_used_bytes)
        parts.append(f"mem {mem}")
    disk = _io_text(
        "disk", "r", snap.disk_read_bytes_per_second, "w", snap.disk_write_bytes_per_second
    )
    net = _io_text("net", "r", snap.net_recv_bytes_per_second, "s", snap.net_sent_bytes_per_second)
    parts += [t for t in (disk, net) if t]
    if snap.processes is not None:
        parts.append(f"procs {snap.processes}")
    if snap.steps_total is not None:
        steps = f"steps {snap.steps_total}"
        if snap.total_steps:
            steps += f"/{snap.total_steps}"
        if snap.steps_per_second is not None:
            steps += f" ({_format_count_rate(snap.steps_per_second)}/s)"
        if snap.eta_seconds is not None:
            steps += f" ETA {format_duration(snap.eta_seconds)}"
        parts.append(steps)
    for gpu in snap.gpus:
        g = [f"gpu{one_line(gpu.index)}" + (" (simulated)" if gpu.simulated else "")]
        if gpu.utilization_ratio is not None:
            g.append(_format_ratio(gpu.utilization_ratio))
        if gpu.memory_used_bytes is not None and gpu.memory_total_bytes is not None:
            g.append(_format_pair(gpu.memory_used_bytes, gpu.memory_total_bytes))
        if gpu.power_watts is not None:
            g.append(format_watts(gpu.power_watts))
        parts.append(" ".join(g))
    return "  ".join(parts)


def _io_text(label: str, a: str, a_rate: float | None, b: str, b_rate: float | None) -> str:
    rates = [f"{k} {format_rate(v)}" for k, v in ((a, a_rate), (b, b_rate)) if v is not None]
    return f"{label} {' '.join(rates)}" if rates else ""


# --- panel ---------------------------------------------------------------------------------


class _PanelView:
    """A few lines pinned under a scroll region at the bottom of the terminal.

    The panel is set up at the first update. Its height is re-checked on every update (steps
    or GPUs may appear, the terminal may be resized); when it changes, the scroll region is
    re-applied. Notes show in the header line while running and are printed in full on
    close(), since text cannot be slipped into the scrolling area without knowing where the
    command's cursor is. Any OSError turns the view off for good.
    """

    _LEFT = 38  # cells for the numbers column
    _MIN_CHILD_ROWS = 3  # rows always left to the command
    _MIN_COLS = 20

    def __init__(self, stream: TextIO, *, title: str) -> None:
        self._stream = stream
        self._title = one_line(title)
        self._lock = threading.Lock()
        self._notes: list[str] = []
        self._geometry: tuple[int, int] | None = None  # (rows, height) last applied; 0 = none
        self._disabled = False
        self._closed = False
        self._cpu: deque[float] = deque(maxlen=_HISTORY)
        self._rss: deque[float] = deque(maxlen=_HISTORY)
        self._steps: deque[float] = deque(maxlen=_HISTORY)
        self._gpu: dict[str, deque[float]] = {}
        self._last: Snapshot | None = None

    def update(self, snap: Snapshot) -> None:
        with self._lock:
            if self._closed or self._disabled:
                return
            self._record(snap)
            self._last = snap
            self._redraw(snap)

    def note(self, message: str) -> None:
        with self._lock:
            text = one_line(clean_text(message))
            if self._closed or self._disabled:
                self._print_plain([text])
                return
            self._notes.append(text)
            if self._last is not None:
                self._redraw(self._last)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            teardown = ""
            if self._geometry is not None and self._geometry[1]:
                try:
                    rows = os.get_terminal_size(self._stream.fileno()).lines
                except OSError:
                    rows = self._geometry[0]
                teardown = self._teardown(rows)
            self._geometry = None
            notes = "".join(f"{PREFIX} {n}\n" for n in self._notes)
            try:
                write_flush(self._stream, teardown + notes)
            except (OSError, ValueError):
                self._disabled = True

    # internals; called with the lock held

    def _record(self, snap: Snapshot) -> None:
        if snap.cpu_ratio is not None:
            self._cpu.append(snap.cpu_ratio)
        if snap.tree_rss_bytes is not None:
            self._rss.append(snap.tree_rss_bytes)
        if snap.steps_per_second is not None:
            self._steps.append(snap.steps_per_second)
        for gpu in snap.gpus:
            if gpu.utilization_ratio is not None:
                history = self._gpu.setdefault(gpu.index, deque(maxlen=_HISTORY))
                history.append(gpu.utilization_ratio)

    def _redraw(self, snap: Snapshot) -> None:
        try:
            cols, rows = os.get_terminal_size(self._stream.fileno())
            lines = self._render(snap, cols) if cols >= self._MIN_COLS else []
            height = max(0, min(len(lines), rows - self._MIN_CHILD_ROWS))
            out = []
            if self._geometry != (rows, height):
                out.append(self._setup(rows, height))
                self._geometry = (rows, height)
            if height:
                out.append(_SAVE)
                top = rows - height + 1
                for i, line in enumerate(lines[:height]):
                    out.append(f"{_ESC}[{top + i};1H{_SGR_RESET}{_CLEAR_LINE}{line}")
                out.append(_SGR_RESET + _RESTORE)
            if out:
                write_flush(self._stream, "".join(out))
        except (OSError, ValueError):
            self._disable()

    def _setup(self, rows: int, height: int) -> str:
        """Escape sequences that move the region from the current geometry to the new one."""
        out = [self._teardown(rows) if self._geometry is not None and self._geometry[1] else ""]
        if height:
            # Make room below the command's cursor without moving its text off its line:
            # IND scrolls when needed and keeps the column, then CUU climbs back. A newline
            # would not do: the tty's ONLCR turns it into CR LF.
            out.append(_INDEX * height + f"{_ESC}[{height}A")
            out.append(f"{_SAVE}{_ESC}[1;{rows - height}r{_RESTORE}")
        return "".join(out)

    def _teardown(self, now_rows: int) -> str:
        """Clear the panel rows still on screen and give the whole screen back."""
        assert self._geometry is not None
        old_rows, old_height = self._geometry
        clear = "".join(
            f"{_ESC}[{row};1H{_CLEAR_LINE}"
            for row in range(old_rows - old_height + 1, old_rows + 1)
            if row <= now_rows
        )
        # DECSTBM homes the cursor, hence the save/restore around it.
        return f"{_SAVE}{_SGR_RESET}{clear}{_RESET_REGION}{_RESTORE}"

    def _disable(self) -> None:
        self._disabled = True
        if self._notes:
            self._print_plain(self._notes)
            self._notes = []

    def _print_plain(self, notes: list[str]) -> None:
        with contextlib.suppress(OSError, ValueError):
            write_flush(self._stream, "".join(f"{PREFIX} {n}\n" for n in notes))

    def _render(self, snap: Snapshot, cols: int) -> list[str]:
        """The panel's lines for a terminal ``cols`` wide (escape sequences included)."""
        width = cols - 1  # leave the last column alone: some terminals wrap on it
        head = ["computewatch"]
        if self._title:
            head.append(self._title)
        head.append(format_duration(snap.elapsed_seconds))
        if snap.processes is not None:
            head.append(f"{snap.processes} procs")
        if self._notes:
            more = f" (+{len(self._notes) - 1} more)" if len(self._notes) > 1 else ""
            head.append(f"! {self._notes[-1]}{more}")
        lines = [_SGR_REVERSE + _fit(" " + "  ".join(head), width, pad=True) + _SGR_RESET]

        disk = _io_text(
            "disk", "r", snap.disk_read_bytes_per_second, "w", snap.disk_write_bytes_per_second
        )
        net = _io_text(
            "net ", "r", snap.net_recv_bytes_per_second, "s", snap.net_sent_bytes_per_second
        )
        right = max(len(disk), len(net))
        spark_w = max(8, min(_HISTORY, width - self._LEFT - 4 - right))

        def row(left: str, spark: str, extra: str = "") -> str:
            text = f" {_fit(left, self._LEFT, pad=True)} {_fit(spark, spark_w, pad=True)}"
            return _fit(f"{text}  {extra}" if extra else text, width)

        cpu = _format_ratio(snap.cpu_ratio)
        lines.append(
            row(
                f"{'cpu':<6}{cpu:>9} of {_cores(snap.allowed_cores)}",
                sparkline(list(self._cpu)[-spark_w:], 0.0, 1.0),
                disk,
            )
        )
        rss = format_bytes(snap.tree_rss_bytes)
        mem = f"{'mem':<6}{rss:>9}"
        if snap.host_memory_used_bytes is not None and snap.host_memory_total_bytes is not None:
            mem += (
                f"  host {_format_pair(snap.host_memory_used_bytes, snap.host_memory_total_bytes)}"
            )
        lines.append(row(mem, sparkline(list(self._rss)[-spark_w:]), net))
        if snap.steps_total is not None:
            rate = snap.steps_per_second
            per_s = f"  {_format_count_rate(rate)}/s" if rate is not None else ""
            if snap.eta_seconds is not None:
                per_s += f"  ETA {format_duration(snap.eta_seconds)} to {snap.total_steps}"
            lines.append(
                row(
                    f"{'steps':<6}{snap.steps_total:>9}{per_s}",
                    sparkline(list(self._steps)[-spark_w:]),
                )
            )
        for gpu in snap.gpus:
            util = _format_ratio(gpu.utilization_ratio)
            left = f"{'gpu' + one_line(gpu.index):<6}{util:>9}"
            if gpu.memory_used_bytes is not None and gpu.memory_total_bytes is not None:
                left += f"  {_format_pair(gpu.memory_used_bytes, gpu.memory_total_bytes)}"
            if gpu.power_watts is not None:
                left += f"  {format_watts(gpu.power_watts)}"
            label = ("(simulated) " if gpu.simulated else "") + one_line(gpu.name)
            history = list(self._gpu.get(gpu.index, ()))[-spark_w:]
            lines.append(row(left, sparkline(history, 0.0, 1.0), label))
        return lines
