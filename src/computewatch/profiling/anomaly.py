"""A profile taken when something goes wrong: one py-spy sample of the run's processes (and a
request for a PyTorch Profiler window, which ``computewatch.torch``'s loop honours), at most once
per ``min_interval``, on a thread of its own so neither the sampler nor the job waits.

The detector that decides is the caller's (``computewatch run`` uses the alert pack's
``step_time_regression``); this module only takes, names and links the capture: a manifest in
the run's artifacts directory (linked when the run ends) whose note names the regression, and
one line on standard error naming the files.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from computewatch.profiling.artifacts import Artifact, write_manifest
from computewatch.profiling.pyspy import ProfilerError, record

__all__ = ["TORCH_REQUEST", "AnomalyCapture", "read_torch_request"]

TORCH_REQUEST = "torch-profile.request"
"""A file in the run's artifacts directory asking the job's ``computewatch.torch`` loop for a
PyTorch Profiler window: its text is the number of steps and the reason on the next line."""


def read_torch_request(directory: Path) -> tuple[int, str] | None:
    """Take (read and remove) a pending request: (steps, reason), or None."""
    path = directory / TORCH_REQUEST
    try:
        text = path.read_text()
        path.unlink()
    except OSError:
        return None
    first, _, reason = text.partition("\n")
    try:
        steps = int(first.strip())
    except ValueError:
        return None
    return (steps, reason.strip()) if steps > 0 else None


class AnomalyCapture:
    """Takes one capture per :meth:`trigger` call, at most once per ``min_interval`` seconds
    and never two at once. ``pids`` gives the processes to sample when it fires (the run's
    command: py-spy follows its children)."""

    def __init__(
        self,
        directory: Path,
        pids: Callable[[], list[int]],
        *,
        min_interval: float = 1800.0,
        seconds: float = 5.0,
        torch_steps: int = 20,
        log: TextIO | None = None,
        prefix: str = "computewatch",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.directory = directory
        self.pids = pids
        self.min_interval = min_interval
        self.seconds = seconds
        self.torch_steps = torch_steps
        self._log = log if log is not None else sys.stderr
        self._prefix = prefix
        self._clock = clock
        self._last: float | None = None
        self._thread: threading.Thread | None = None
        self._refused = False
        self.captures: list[Artifact] = []

    def trigger(self, reason: str, directory: Path | None = None) -> bool:
        """Start a capture for ``reason`` unless one ran within ``min_interval`` or is running;
        True when one started. Returns at once. ``directory``: where the files go from now on
        (a run's artifacts directory, known once its id is)."""
        if directory is not None:
            self.directory = directory
        now = self._clock()
        if self._thread is not None and self._thread.is_alive():
            return False
        if self._last is not None and now - self._last < self.min_interval:
            return False
        self._last = now
        self._request_torch(reason)
        self._thread = threading.Thread(
            target=self._capture, args=(reason,), name="computewatch-anomaly", daemon=True
        )
        self._thread.start()
        return True

    def wait(self, timeout: float | None = None) -> None:
        """Wait for a capture in progress (the run's end, tests)."""
        t = self._thread
        if t is not None:
            t.join(timeout)

    def _request_torch(self, reason: str) -> None:
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            (self.directory / TORCH_REQUEST).write_text(f"{self.torch_steps}\n{reason}\n")
        except OSError:
            pass

    def _capture(self, reason: str) -> None:
        pids = [p for p in self.pids() if p > 0]
        if not pids:
            return
        pid = pids[0]
        stem = f"anomaly-{time.strftime('%Y%m%dT%H%M%S')}-{pid}"
        speedscope = self.directory / f"{stem}.speedscope.json"
        svg = self.directory / f"{stem}.svg"
        try:
            cap = record(pid, self.seconds, speedscope, svg)
        except ProfilerError as e:
            if not self._refused:  # said once: a refusal does not change between triggers
                self._refused = True
                self._say(f"{reason}: no py-spy sample ({e})")
            return
        artifact: Artifact = {
            "tool": "py-spy",
            "trigger": "anomaly",
            "files": {"speedscope": str(cap.speedscope), "svg": str(cap.svg)},
            "created_at": time.time(),
            "pid": pid,
            "note": reason,
        }
        try:
            write_manifest(self.directory, stem, artifact)
        except OSError as e:
            self._say(f"{reason}: the py-spy sample is not linked to the run ({e})")
        self.captures.append(artifact)
        self._say(f"{reason}: py-spy sample {cap.svg} ({cap.samples} samples)")

    def _say(self, text: str) -> None:
        try:
            print(f"{self._prefix}: {text}", file=self._log, flush=True)
        except (OSError, ValueError):
            pass
