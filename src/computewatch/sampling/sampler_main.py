"""The sampler subprocess that ``track()`` starts: ``python -m computewatch.sampling.sampler_main``.

It watches the tree of the process given by ``--pid`` (itself excluded), reads control lines on
stdin (``end STATUS``), and stores the run. End of stdin without ``end`` means the tracked
process died: the run is stored as interrupted.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sqlite3
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from computewatch.accounting.engine import AccountingOptions
from computewatch.config import ConfigError, load_config
from computewatch.paths import current_dir
from computewatch.sampling.channel import SpoolReader
from computewatch.sampling.lifecycle import end_run, open_run_store, spool_dir
from computewatch.sampling.live import QuietView
from computewatch.sampling.repro import repro_record
from computewatch.sampling.sampler import Sampler
from computewatch.sampling.sources_for_run import build_monitor
from computewatch.sources.environment import Capture
from computewatch.sources.gpus import GpuBackendError
from computewatch.store import INTERRUPTED
from computewatch.store.reserve import make_reserve
from computewatch.store.spooled import problem_of

if TYPE_CHECKING:
    from computewatch.upload.stream import LiveUploader


def _read_control(stop: threading.Event, result: list[str], ended: list[float]) -> None:
    """``end STATUS [WALL_TIME]``: the block ended with STATUS at WALL_TIME. ``ended`` gets the
    monotonic time the block's end (or the tracked process's death) was heard: the end's
    deadline runs from it."""
    for line in sys.stdin.buffer:
        parts = line.decode("utf-8", "replace").split()
        if len(parts) in (2, 3) and parts[0] == "end":
            result.extend(parts[1:])
            break
    ended.append(time.monotonic())
    stop.set()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="computewatch-sampler")
    ap.add_argument("--pid", type=int, required=True)
    ap.add_argument("--run-id", required=True)
    ap.add_argument("--db", required=True)
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("--name")
    ap.add_argument("--tags", default="{}")
    ap.add_argument("--command", default="[]")
    ap.add_argument("--procfs-root", default="/proc")
    ap.add_argument("--started-at", type=float, help="wall time the tracked block started")
    ap.add_argument("--cpu-baseline", type=float, help="CPU seconds of --pid at that moment")
    ap.add_argument("--gpu-backend", default="auto")
    a = ap.parse_args(argv)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the tracked process decides when we end

    live = QuietView(sys.stderr)
    # As for `computewatch run` (lifecycle.open_run_store): never held by the store. One that
    # cannot take the run (locked past RUN_BUSY_TIMEOUT, full, corrupt, read-only) leaves it to
    # the spool, stored by a later command, and the tracked program goes on either way.
    target = open_run_store(Path(a.db))
    for m in target.messages:
        print(f"computewatch: {m}", file=sys.stderr)
    try:
        mon = build_monitor(
            a.pid,
            procfs_root=a.procfs_root,
            gpu_backend=a.gpu_backend,
            exclude_pids=frozenset({os.getpid()}),
            root_cpu_baseline=a.cpu_baseline,
            fake_gpu_pids=(a.pid,),
        )
    except GpuBackendError as e:
        print(f"computewatch: not monitoring: {e}", file=sys.stderr)
        return 2
    facts = mon.facts
    cores = mon.allowed_cores
    sources = mon.sources
    notes = mon.notes
    run_fields: dict[str, Any] = dict(
        run_id=a.run_id,
        name=a.name,
        tags=json.loads(a.tags),
        command=json.loads(a.command),
        cwd=current_dir(),
        mode="track",
        started_at=a.started_at or time.time(),
        interval_seconds=a.interval,
        host=facts,
    )
    store = target.store
    if store is None:
        store = target.fall_back(a.run_id, target.reason or "the store cannot be opened")
    else:  # room for the run's end on a disk that fills meanwhile (store/reserve.py)
        target.reserve = make_reserve(target.db_path, a.run_id)
    try:
        run_key = store.create_run(**run_fields)
    except sqlite3.Error as e:
        given_up = store
        store = target.fall_back(a.run_id, problem_of(e))
        given_up.close()
        run_key = store.create_run(**run_fields)
    # The end of the run is bounded as `computewatch run`'s is (lifecycle.end_run): the tracked
    # program waits for this process, so a store locked at the end sends the run to the spool.
    capture = Capture(run_fields["command"], run_fields["cwd"] or "")  # reproducibility record
    reader = SpoolReader(spool_dir(Path(a.db), a.run_id))
    sampler = Sampler(
        store, run_key, sources, interval=a.interval, spool=reader, live=live,
        allowed_cores=cores, note=live.note,
    )  # fmt: skip
    sampler.gpu_names = mon.gpu_names()
    for n in notes:
        sampler.note(n, show=False)
    uploader = _live_uploader(Path(a.db), a.run_id)
    stop = threading.Event()
    result: list[str] = []
    ended_mono: list[float] = []
    threading.Thread(target=_read_control, args=(stop, result, ended_mono), daemon=True).start()
    sampler.loop(stop)
    sampler.final_tick()
    sampler.close()
    status = result[0] if result else INTERRUPTED
    ended_at = None
    if len(result) == 2:
        try:
            ended_at = float(result[1])
        except ValueError:
            pass
    if not result:
        sampler.note("the tracked process ended without closing the run")
    try:
        accounting = AccountingOptions(config=load_config())
    except ConfigError as e:
        sampler.note(f"configuration ignored: {e}")
        accounting = AccountingOptions()
    repro = repro_record(capture, mon.final_facts(), reader.dir)  # stored by end_run, in time
    if repro.note is not None:
        sampler.note(repro.note, show=False)
    _, said = end_run(
        target, sampler, run_key, run_fields, status, None, [], reader,
        ended_at=ended_at, facts=mon.final_facts(), accounting=accounting,
        job_ended=ended_mono[0] if ended_mono else None, repro=repro,
    )  # fmt: skip
    for line in said:
        print(f"computewatch: {line}", file=sys.stderr)
    store.close()  # closing a store twice is harmless (sqlite3)
    if target.store is not None:  # the spool's, when the end went there
        target.store.close()
    if uploader is not None:
        uploader.close()  # the final upload, 2 s at most; else one line: it waits for `push`
    return 0


def _live_uploader(db: Path, run_id: str) -> LiveUploader | None:
    """With a server configured (``[server] url`` or ``COMPUTEWATCH_SERVER``), the run's live
    uploader, started (docs/upload.md); without one nothing of the upload code is loaded."""
    if not os.environ.get("COMPUTEWATCH_SERVER"):
        try:
            if not load_config().server_url:
                return None
        except ConfigError:
            return None  # said when the run ends (its accounting reads the same file)
    # only with a server configured: the upload client and its thread
    from computewatch.upload.settings import SettingsError, server_settings
    from computewatch.upload.stream import LiveUploader

    try:
        config = load_config()
        settings = server_settings(config)
    except (ConfigError, SettingsError) as e:
        print(f"computewatch: not uploading: {e}", file=sys.stderr)
        return None
    if settings is None:
        return None
    # the step target is track(total_steps=)'s, which the uploads read from the store
    uploader = LiveUploader(settings, db, precision=config.precision)
    uploader.begin(run_id)
    return uploader


if __name__ == "__main__":
    sys.exit(main())
