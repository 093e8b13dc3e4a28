"""``computewatch profile RUN|PID``: sample a running run's Python stacks with py-spy and link
the profile to the run (the parser is :mod:`computewatch.cli.profile`)."""

from __future__ import annotations

import argparse
import os
import socket
import time
from pathlib import Path

from computewatch.errors import PROG, ComputewatchError, UsageError
from computewatch.paths import resolve_db_path
from computewatch.profiling.artifacts import Artifact, add_artifact, artifact_dir
from computewatch.profiling.pyspy import record
from computewatch.sampling.channel import ENV_RUN_ID
from computewatch.sources.procfs import read_environ
from computewatch.store import RunRow, Store, StoreError

__all__ = ["cmd_profile"]


def _run_id_of(pid: int) -> str | None:
    """The computewatch run a process belongs to (``COMPUTEWATCH_RUN_ID`` in its environment,
    readable by its owner and root)."""
    env = read_environ("/proc", pid, (ENV_RUN_ID,))
    return (env or {}).get(ENV_RUN_ID) or None


def _alive(pid: int) -> bool:
    return os.path.exists(f"/proc/{pid}")


def _root_pid(store: Store, run: RunRow) -> int:
    """The run's command: its earliest live process whose parent is not one of the run's."""
    if run.status != "running":
        raise ComputewatchError(f"run {run.id} is not running ({run.status}): nothing to sample")
    if run.supervisor_host and run.supervisor_host != socket.gethostname():
        raise ComputewatchError(f"run {run.id} runs on {run.supervisor_host}: profile it there")
    procs = store.processes(run.key)
    pids = {int(p["pid"]) for p in procs}
    for p in procs:
        pid = int(p["pid"])
        if pid == run.supervisor_pid or not _alive(pid):
            continue
        if int(p["ppid"]) not in pids:
            return pid
    raise ComputewatchError(
        f"no live process of run {run.id} is recorded yet: try again in a second, or give its PID"
    )


def output_paths(output: Path) -> tuple[Path, Path]:
    """The speedscope file and the flame graph for ``-o FILE``, absolute (the run's link is
    read from other directories): ``prof.svg`` is the flame graph, with the profile beside it
    as ``prof.speedscope.json``; any other name is the profile, with ``NAME.svg`` beside it.
    The two are never the same file."""
    path = Path(os.path.abspath(output.expanduser()))
    if path.suffix.lower() == ".svg":
        return path.with_name(f"{path.stem}.speedscope.json"), path
    return path, path.with_suffix(".svg")


def _open(db: Path) -> Store | None:
    if not db.exists():
        return None
    try:
        return Store.open(db)
    except (StoreError, OSError):
        return None


def cmd_profile(args: argparse.Namespace) -> int:
    if not 1 <= args.rate <= 1000:
        raise UsageError(f"--rate must be between 1 and 1000 samples per second, not {args.rate}")
    db = resolve_db_path(args.db)
    target: str = args.target
    store = _open(db)
    try:
        run: RunRow | None = None
        if target.isdigit() and _alive(int(target)):
            pid = int(target)
            rid = _run_id_of(pid)
            if rid is not None and store is not None:
                try:
                    run = store.find_run(rid)
                except (StoreError, ComputewatchError):
                    run = None
        else:
            if store is None:
                if target.isdigit():
                    raise ComputewatchError(f"no process {target}")
                raise ComputewatchError(f"no runs recorded yet ({db} does not exist)")
            try:
                run = store.find_run(target)
            except ComputewatchError as e:
                if target.isdigit() and str(e).startswith("no run"):  # a PID not running
                    raise ComputewatchError(
                        f"no process {target} (and no run of that id or name)"
                    ) from None
                raise
            pid = _root_pid(store, run)
        stamp = time.strftime("%Y%m%dT%H%M%S")
        if args.output:
            speedscope, svg = output_paths(Path(args.output))
        elif run is not None:
            d = artifact_dir(db, run.id)
            speedscope = d / f"pyspy-{stamp}-{pid}.speedscope.json"
            svg = d / f"pyspy-{stamp}-{pid}.svg"
        else:
            speedscope = Path(f"pyspy-{pid}-{stamp}.speedscope.json").resolve()
            svg = speedscope.with_name(f"pyspy-{pid}-{stamp}.svg")
        cap = record(
            pid, args.seconds, speedscope, svg, rate=args.rate, nonblocking=args.nonblocking
        )
        print(f"sampled process {pid} for {args.seconds:g} s: {cap.samples} samples")
        print(f"speedscope   {cap.speedscope}")
        print(f"flame graph  {cap.svg}")
        if run is not None and store is not None:
            entry: Artifact = {
                "tool": "py-spy",
                "trigger": "manual",
                "files": {"speedscope": str(cap.speedscope), "svg": str(cap.svg)},
                "created_at": time.time(),
                "pid": pid,
                "note": f"{args.seconds:g} s at {args.rate}/s",
            }
            try:
                add_artifact(store, run.key, entry)
                print(f"linked to run {run.id} (computewatch show {run.id})")
            except Exception as e:  # a read-only or locked store: the files are written
                print(f"{PROG}: the profile is not linked to run {run.id}: {e}")
    finally:
        if store is not None:
            store.close()
    return 0
