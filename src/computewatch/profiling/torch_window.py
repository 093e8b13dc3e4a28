"""The PyTorch Profiler around a window of steps (``run --profile-steps A:B``,
``run.profile(steps=N)``, and the capture on a step-time regression).

A :class:`ProfileWindow` is told of each step's end (``Run.step``); it starts
``torch.profiler.profile`` when step ``first - 1`` ends (at once for ``first`` = 1) and stops it
when step ``last`` ends, then writes the Chrome trace (``export_chrome_trace``: opens in Perfetto
and chrome://tracing) and the operator table: time, memory and FLOPs per operator
(``key_averages()``, with ``profile_memory`` and ``with_flops``), as text and as JSON. The files
and a manifest go to the run's artifacts directory; the run's end links them to the run
(:func:`computewatch.profiling.artifacts.collect_manifests`). Any failure is one warning: the
training loop goes on.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any, TypedDict

from computewatch.profiling.artifacts import Artifact, Trigger, write_manifest

__all__ = ["OperatorRow", "ProfileWindow", "operator_rows"]


class OperatorRow(TypedDict):
    """One operator of the table: calls, CPU and device time (µs, total and self), memory
    (bytes) and FLOPs (0 where the profiler has no formula for the operator)."""

    name: str
    calls: int
    cpu_time_total_us: float
    self_cpu_time_total_us: float
    device_time_total_us: float
    cpu_memory_bytes: int
    self_cpu_memory_bytes: int
    device_memory_bytes: int
    flops: int


def operator_rows(prof: Any, limit: int = 200) -> list[OperatorRow]:
    """The profiler's operator averages, most CPU time first."""
    out: list[OperatorRow] = []
    for e in prof.key_averages():
        out.append(
            {
                "name": str(e.key),
                "calls": int(e.count),
                "cpu_time_total_us": float(e.cpu_time_total),
                "self_cpu_time_total_us": float(e.self_cpu_time_total),
                "device_time_total_us": float(getattr(e, "device_time_total", 0.0) or 0.0),
                "cpu_memory_bytes": int(e.cpu_memory_usage),
                "self_cpu_memory_bytes": int(e.self_cpu_memory_usage),
                "device_memory_bytes": int(getattr(e, "device_memory_usage", 0) or 0),
                "flops": int(getattr(e, "flops", 0) or 0),
            }
        )
    out.sort(key=lambda r: r["cpu_time_total_us"], reverse=True)
    return out[:limit]


class ProfileWindow:
    """Steps ``first`` to ``last`` (counted by :meth:`step_ended` calls from 1) under the
    PyTorch Profiler; the files go to ``out_dir``."""

    def __init__(
        self,
        first: int,
        last: int,
        out_dir: Path,
        *,
        trigger: Trigger = "steps",
        reason: str = "",
    ) -> None:
        if first < 1 or last < first:
            raise ValueError(f"a step window is first >= 1 and last >= first, not {first}:{last}")
        self.first = first
        self.last = last
        self.out_dir = out_dir
        self.trigger: Trigger = trigger
        self.reason = reason
        self.steps = 0
        self.files: dict[str, str] = {}
        self.done = False
        self._prof: Any = None
        if first == 1:
            self._start()

    def step_ended(self) -> bool:
        """One step ended; True once the window is over (the caller drops it)."""
        self.steps += 1
        if self.done:
            return True
        if self._prof is None:
            if self.steps == self.first - 1:
                self._start()
            return False
        if self.steps >= self.last:
            self._stop()
            return True
        return False

    def close(self) -> None:
        """The run ends: a window still open is stopped and written as it is."""
        if self._prof is not None and not self.done:
            self._stop()
        self.done = True

    def _start(self) -> None:
        try:
            # PyTorch is the user's own (heavy): imported when a window starts.
            import torch
            from torch.profiler import ProfilerActivity, profile

            acts = [ProfilerActivity.CPU]
            if torch.cuda.is_available():
                acts.append(ProfilerActivity.CUDA)
            self._prof = profile(
                activities=acts, record_shapes=True, profile_memory=True, with_flops=True
            )
            self._prof.__enter__()
        except Exception as e:
            self._prof = None
            self.done = True
            _warn(f"the PyTorch Profiler could not start ({type(e).__name__}: {e})")

    def _stop(self) -> None:
        prof, self._prof = self._prof, None
        self.done = True
        try:
            prof.__exit__(None, None, None)
            self.out_dir.mkdir(parents=True, exist_ok=True)
            stem = f"torch-{time.strftime('%Y%m%dT%H%M%S')}-steps-{self.first}-{self.last}"
            trace = self.out_dir / f"{stem}.trace.json"
            prof.export_chrome_trace(str(trace))
            rows = operator_rows(prof)
            ops = self.out_dir / f"{stem}.operators.json"
            ops.write_text(json.dumps(rows, indent=1))
            table = self.out_dir / f"{stem}.operators.txt"
            table.write_text(
                prof.key_averages().table(sort_by="cpu_time_total", row_limit=50) + "\n"
            )
            self.files = {
                "chrome_trace": str(trace),
                "operators": str(ops),
                "operators_table": str(table),
            }
            artifact: Artifact = {
                "tool": "torch-profiler",
                "trigger": self.trigger,
                "files": self.files,
                "created_at": time.time(),
                "note": f"steps {self.first} to {self.last}"
                + (f" after {self.reason}" if self.reason else ""),
            }
            write_manifest(self.out_dir, stem, artifact)
        except Exception as e:
            _warn(f"the PyTorch Profiler's files could not be written ({type(e).__name__}: {e})")


def _warn(text: str) -> None:
    try:
        print(f"computewatch: warning: {text}", file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass
