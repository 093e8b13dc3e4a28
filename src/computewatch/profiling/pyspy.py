"""Sampling a running process's Python stacks with py-spy (the ``profile`` extra).

py-spy reads another process's memory (``process_vm_readv``) and, unless ``nonblocking``,
pauses it briefly for each sample (``ptrace``), so it needs the right to trace that process:
root, or the same user with ``kernel.yama.ptrace_scope`` at 0 (Yama, Linux >= 3.4), or the
``CAP_SYS_PTRACE`` capability (containers: ``--cap-add SYS_PTRACE``). A refusal is a
:class:`PtraceDenied` saying so. One capture (``py-spy record --format raw``) gives both files:
a speedscope profile and an SVG flame graph (:mod:`computewatch.profiling.stacks`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from computewatch.errors import ComputewatchError
from computewatch.profiling.stacks import parse_raw, write_flamegraph_svg, write_speedscope

__all__ = [
    "PTRACE_HELP",
    "ProfilerError",
    "PtraceDenied",
    "PySpyCapture",
    "check_ptrace",
    "find_py_spy",
    "record",
]

PTRACE_HELP = (
    "sampling another process's stacks needs the right to trace it: run as root, as its owner "
    "with kernel.yama.ptrace_scope = 0 (sysctl), or with CAP_SYS_PTRACE (containers: "
    "--cap-add SYS_PTRACE)"
)
DEFAULT_RATE = 100  # samples per second (py-spy's default)


class ProfilerError(ComputewatchError):
    """A profiler is missing, or could not profile what it was asked to."""


class PtraceDenied(ProfilerError):
    """The system refused py-spy the right to trace the process."""


@dataclass(frozen=True, slots=True)
class PySpyCapture:
    """What one capture wrote: ``speedscope`` (JSON) and ``svg`` (flame graph) paths."""

    pid: int
    seconds: float
    samples: int
    speedscope: Path
    svg: Path


def find_py_spy() -> str | None:
    """The ``py-spy`` executable: ``$COMPUTEWATCH_PY_SPY``, the PATH, else beside this Python
    (a virtual environment's ``bin``)."""
    env = os.environ.get("COMPUTEWATCH_PY_SPY")
    if env:
        return env
    found = shutil.which("py-spy")
    if found:
        return found
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.exists() else None


def check_ptrace(pid: int) -> None:
    """Raise :class:`PtraceDenied` when this process may not trace ``pid``: opening
    ``/proc/PID/mem`` makes the kernel check the same ptrace access py-spy needs
    (``PTRACE_MODE_ATTACH``, proc(5)), so the refusal is said before py-spy runs (which, with
    ``--subprocesses``, reports it only as "no python processes found")."""
    try:
        fd = os.open(f"/proc/{pid}/mem", os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise ProfilerError(f"no process {pid}") from None
    except PermissionError:
        raise PtraceDenied(
            f"py-spy cannot sample process {pid}: permission denied; {PTRACE_HELP}"
        ) from None
    except OSError:
        return  # let py-spy say what is wrong
    os.close(fd)


def record(
    pid: int,
    seconds: float,
    speedscope: Path,
    svg: Path,
    *,
    rate: int = DEFAULT_RATE,
    subprocesses: bool = True,
    nonblocking: bool = False,
) -> PySpyCapture:
    """Sample ``pid`` (and its child processes) for ``seconds``; write both files. Raises
    :class:`PtraceDenied` or :class:`ProfilerError` with the reason."""
    check_ptrace(pid)
    exe = find_py_spy()
    if exe is None:
        raise ProfilerError("py-spy is not installed: pip install 'computewatch[profile]'")
    with tempfile.TemporaryDirectory(prefix="computewatch-pyspy-") as tmp:
        raw = Path(tmp) / "stacks.txt"
        cmd = [exe, "record", "--pid", str(pid), "--duration", f"{max(round(seconds), 1)}",
               "--rate", str(rate), "--format", "raw", "--output", str(raw)]  # fmt: skip
        if subprocesses:
            cmd.append("--subprocesses")
        if nonblocking:
            cmd.append("--nonblocking")
        try:
            done = subprocess.run(
                cmd, capture_output=True, text=True, timeout=seconds + 60, check=False
            )
        except subprocess.TimeoutExpired:
            raise ProfilerError(f"py-spy did not finish sampling process {pid}") from None
        except OSError as e:
            raise ProfilerError(f"cannot run py-spy ({exe}): {e.strerror or e}") from None
        text = raw.read_text(errors="replace") if raw.exists() else ""
        stacks = parse_raw(text)
        err = (done.stderr or "") + (done.stdout or "")
        if done.returncode != 0 and not stacks:
            if "permission denied" in err.lower() or "operation not permitted" in err.lower():
                raise PtraceDenied(f"py-spy cannot sample process {pid}: permission denied; "
                                   f"{PTRACE_HELP}")  # fmt: skip
            lines = [ln.strip() for ln in err.splitlines() if ln.strip()]
            errors = [ln.removeprefix("Error:").strip() for ln in lines if ln.startswith("Error:")]
            why = (errors or lines or [f"exit status {done.returncode}"])[0]
            raise ProfilerError(f"py-spy cannot sample process {pid}: {why}")
        if not stacks:
            raise ProfilerError(f"py-spy took no sample of process {pid} (is it a Python process?)")
    speedscope.parent.mkdir(parents=True, exist_ok=True)
    svg.parent.mkdir(parents=True, exist_ok=True)
    name = f"py-spy: process {pid}, {seconds:g} s at {rate}/s"
    write_speedscope(stacks, speedscope, name=name, rate=rate)
    write_flamegraph_svg(stacks, svg, title=name)
    return PySpyCapture(pid, seconds, sum(stacks.values()), speedscope, svg)
