"""Profilers that wrap the monitored command: ``run --cprofile`` (``python -m cProfile``) and
``run --nsys`` (``nsys profile``, Nsight Systems), and linking their files to the run when it
ends. The files are written to a pending directory (the run's id is not known before it
starts) and moved to the run's artifacts directory afterwards."""

from __future__ import annotations

import io
import os
import pstats
import re
import shutil
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from computewatch.profiling.artifacts import Artifact, Tool, add_artifact, artifact_dir
from computewatch.profiling.pyspy import ProfilerError
from computewatch.store import Store

__all__ = ["PendingProfiles", "cprofile_command", "nsys_command", "pending_profiles"]

_PYTHON = re.compile(r"^python(\d+(\.\d+)?)?$")


@dataclass
class PendingProfiles:
    """Files a wrapped command will write, to link once the run is known."""

    directory: Path
    files: dict[Tool, dict[str, Path]] = field(default_factory=dict)

    def link(
        self, db_path: Path, run_id: str, store: Store | None, run_key: int | None
    ) -> list[str]:
        """Move the files that exist to the run's artifacts directory and link them; returns
        one line per profile (or why it is missing)."""
        lines: list[str] = []
        dest = artifact_dir(db_path, run_id)
        for tool, files in self.files.items():
            moved: dict[str, str] = {}
            for kind, path in files.items():
                if path.exists():
                    target = dest / path.name
                    shutil.move(str(path), target)
                    moved[kind] = str(target)
            if tool == "cprofile" and "pstats" in moved:
                text = Path(moved["pstats"]).with_suffix(".txt")
                try:
                    text.write_text(cprofile_text(Path(moved["pstats"])))
                    moved["text"] = str(text)
                except (OSError, ValueError, TypeError, EOFError) as e:
                    lines.append(f"cProfile statistics unreadable: {e}")
            if not moved:
                lines.append(f"{tool}: the command wrote no profile")
                continue
            artifact: Artifact = {
                "tool": tool,
                "trigger": "run",
                "files": moved,
                "created_at": time.time(),
            }
            if store is not None and run_key is not None:
                add_artifact(store, run_key, artifact)
            lines.extend(f"{tool} {kind}: {p}" for kind, p in sorted(moved.items()))
        shutil.rmtree(self.directory, ignore_errors=True)
        return lines


def pending_profiles(db_path: Path) -> PendingProfiles:
    """A fresh pending directory beside the database's artifacts."""
    d = artifact_dir(db_path, f"pending-{uuid.uuid4().hex[:12]}")
    return PendingProfiles(d)


def cprofile_command(command: list[str], pending: PendingProfiles) -> list[str]:
    """``python [opts] SCRIPT ...`` or ``python -m MODULE ...`` under cProfile. Raises
    :class:`ProfilerError` for a command that is not a Python interpreter running a script
    or module."""
    if not command or not _PYTHON.match(os.path.basename(command[0])):
        raise ProfilerError(
            "--cprofile needs a Python command: python SCRIPT [ARGS] or python -m MODULE [ARGS]"
        )
    rest = command[1:]
    i = 0
    opts: list[str] = []
    while i < len(rest) and rest[i].startswith("-") and rest[i] != "-m":
        if rest[i] == "-c":
            raise ProfilerError("--cprofile cannot profile python -c: give a script or -m MODULE")
        opts.append(rest[i])
        i += 1
    if i >= len(rest):
        raise ProfilerError("--cprofile: the Python command names no script or module")
    out = pending.directory / "cprofile.pstats"
    pending.files["cprofile"] = {"pstats": out}
    target = rest[i:]
    if target[0] == "-m":
        if len(target) < 2:
            raise ProfilerError("--cprofile: python -m names no module")
        return [command[0], *opts, "-c", _CPROFILE_RUNNER, str(out), "-m", *target[1:]]
    return [command[0], *opts, "-c", _CPROFILE_RUNNER, str(out), "-", *target]


# ``python -m cProfile`` exits 0 whatever the program's status (it swallows SystemExit): this
# runner is its loop with the status kept. argv: -c OUT (-m MODULE | - SCRIPT) ARGS...
_CPROFILE_RUNNER = """\
import cProfile, os, runpy, sys
out, how, target = sys.argv[1], sys.argv[2], sys.argv[3]
sys.argv = [target, *sys.argv[4:]]
if how == "-":
    sys.path[0] = os.path.dirname(os.path.abspath(target))
prof = cProfile.Profile()
code = 0
try:
    if how == "-m":
        prof.runcall(runpy.run_module, target, run_name="__main__", alter_sys=True)
    else:
        prof.runcall(runpy.run_path, target, run_name="__main__")
except SystemExit as e:
    code = e.code
finally:
    prof.dump_stats(out)
sys.exit(code)
"""


def nsys_command(command: list[str], pending: PendingProfiles) -> list[str]:
    """The command under ``nsys profile``; raises :class:`ProfilerError` without ``nsys`` on
    the PATH."""
    exe = shutil.which("nsys")
    if exe is None:
        raise ProfilerError("--nsys: nsys (NVIDIA Nsight Systems) is not on the PATH")
    base = pending.directory / "nsys"
    pending.files["nsys"] = {"nsys_report": pending.directory / "nsys.nsys-rep"}
    return [exe, "profile", "--output", str(base), "--force-overwrite", "true", *command]


def cprofile_text(path: Path, limit: int = 50) -> str:
    """The top ``limit`` functions by cumulative time, as ``pstats`` prints them."""
    buf = io.StringIO()
    stats = pstats.Stats(str(path), stream=buf)
    stats.sort_stats("cumulative").print_stats(limit)
    return buf.getvalue()
