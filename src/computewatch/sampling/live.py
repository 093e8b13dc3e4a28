"""What the sampler shows while a run goes on: the snapshot it builds at each tick and the view
protocol it drives. The views that draw on a terminal live in ``computewatch.views.live``; the
quiet view (notes only) lives here, so a sampler without a terminal needs no view code."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Protocol, TextIO

import msgspec

__all__ = ["GpuLine", "LiveView", "QuietView", "Snapshot", "ViewFactory", "one_line"]

PREFIX = "[computewatch]"
"""Starts every plain line and note, so they stand apart from the command's own output."""

# Controls (C0, DEL, C1) in a message or title would move the cursor or start escapes.
_CONTROLS = {c: " " for c in (*range(0x20), *range(0x7F, 0xA0))}


class GpuLine(msgspec.Struct, frozen=True):
    """One accelerator's state for the live view; ``None`` where the device cannot say."""

    index: str
    name: str
    utilization_ratio: float | None
    memory_used_bytes: float | None
    memory_total_bytes: float | None
    power_watts: float | None
    simulated: bool = False


class Snapshot(msgspec.Struct, frozen=True):
    """What the sampler knows at one tick, already turned into rates; ``None`` = unknown."""

    elapsed_seconds: float
    cpu_ratio: float | None  # 0-1 of the cores the job may use
    allowed_cores: float
    tree_rss_bytes: float | None  # resident memory of the monitored process tree
    host_memory_used_bytes: float | None
    host_memory_total_bytes: float | None
    disk_read_bytes_per_second: float | None
    disk_write_bytes_per_second: float | None
    net_recv_bytes_per_second: float | None
    net_sent_bytes_per_second: float | None
    processes: int | None  # processes in the tree
    steps_total: int | None  # None until the program reports a step
    steps_per_second: float | None
    gpus: tuple[GpuLine, ...] = ()
    total_steps: int | None = None  # the planned steps, when declared: adds an ETA
    step_processes: int = 1  # processes reporting steps (ranks each report every step)

    @property
    def eta_seconds(self) -> float | None:
        """Time to ``total_steps`` at the current step rate (steps and rate per process)."""
        if not (self.total_steps and self.steps_total and self.steps_per_second):
            return None
        n = max(self.step_processes, 1)
        return max(self.total_steps - self.steps_total / n, 0) / (self.steps_per_second / n)


class LiveView(Protocol):
    """What the sampler drives; no method raises on a broken terminal."""

    def update(self, snap: Snapshot) -> None:
        """Show the latest snapshot (or not, depending on the mode)."""

    def note(self, message: str) -> None:
        """Show a one-line warning so that it stays visible (every mode, even quiet)."""

    def close(self) -> None:
        """Restore the terminal and print pending notes; idempotent."""


ViewFactory = Callable[[TextIO, str, str], LiveView]
"""Builds the live view of a run: ``(stream, mode, title)``; the CLI passes the terminal views."""


def one_line(text: str) -> str:
    """``text`` on one line: control characters (which would move the cursor) become spaces."""
    return text.translate(_CONTROLS).strip()


def write_flush(stream: TextIO, text: str) -> None:
    stream.write(text)
    stream.flush()


class QuietView:
    """Prints notes only."""

    shows_figures = False  # the sampler need not gather figures for it

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._lock = threading.Lock()
        self._broken = False

    def update(self, snap: Snapshot) -> None:
        pass

    def note(self, message: str) -> None:
        self._emit(f"{PREFIX} {one_line(message)}\n")

    def close(self) -> None:
        pass

    def _emit(self, text: str) -> None:
        with self._lock:
            if self._broken:
                return
            try:
                write_flush(self._stream, text)
            except (OSError, ValueError):
                self._broken = True
