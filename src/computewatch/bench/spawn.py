"""Run one benchmark point in a child process (``computewatch.bench.child``) and read back its
result; a child that dies (a signal, the OOM killer) or writes nothing is reported as such."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from computewatch import jsonout
from computewatch.sampling.channel import ENV_RUN_ID, ENV_SPOOL

__all__ = ["ChildOutcome", "run_child"]

_TAIL = 2000


@dataclass(frozen=True)
class ChildOutcome:
    doc: dict[str, Any] | None  # the child's JSON result (None when it wrote none)
    exit_code: int | None  # negative: the signal that ended it
    stderr_tail: str

    @property
    def status(self) -> str:
        if self.doc is not None:
            return str(self.doc.get("status", "failed"))
        if self.exit_code == -signal.SIGKILL:
            return "oom"  # the kernel's (or a cgroup's) OOM killer sends SIGKILL
        return "crashed"

    @property
    def error(self) -> str | None:
        if self.doc is not None:
            err = self.doc.get("error")
            return None if err is None else str(err)
        if self.exit_code is not None and self.exit_code < 0:
            name = signal.Signals(-self.exit_code).name
            why = " (likely the OOM killer)" if self.exit_code == -signal.SIGKILL else ""
            return f"the point's process was killed by {name}{why}"
        last = self.stderr_tail.strip().splitlines()[-1:] or ["no output"]
        return f"the point's process exited with status {self.exit_code}: {last[0]}"


def _point_env() -> dict[str, str]:
    """The point's environment: each point is a run of its own, even under ``computewatch
    run`` (whose run the point would otherwise join)."""
    env = dict(os.environ)
    env.pop(ENV_RUN_ID, None)
    env.pop(ENV_SPOOL, None)
    return env


def run_child(spec: dict[str, Any], timeout: float | None = None) -> ChildOutcome:
    """Run ``spec`` in ``python -m computewatch.bench.child`` (this interpreter) and wait."""
    with tempfile.TemporaryDirectory(prefix="computewatch-bench-") as tmp:
        spec_path, out_path = Path(tmp) / "spec.json", Path(tmp) / "out.json"
        spec_path.write_text(jsonout.dumps(spec), "utf-8")
        try:
            proc = subprocess.run(
                [sys.executable, "-m", "computewatch.bench.child", str(spec_path), str(out_path)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                timeout=timeout,
                env=_point_env(),
                check=False,
            )
        except subprocess.TimeoutExpired as e:
            tail = (e.stderr or b"").decode("utf-8", "replace")[-_TAIL:]
            return ChildOutcome(
                {"status": "failed", "error": f"timed out after {timeout:g} s"}, None, tail
            )
        tail = proc.stderr.decode("utf-8", "replace")[-_TAIL:]
        doc = None
        try:
            loaded = json.loads(out_path.read_text("utf-8"))
            doc = loaded if isinstance(loaded, dict) else None
        except (OSError, ValueError):
            doc = None
        return ChildOutcome(doc, proc.returncode, tail)
