"""The core commands (devices, runs, show, compare, export, report, gc, top): what each does
once :mod:`computewatch.cli.main` has parsed its flags. Loaded only when one of them runs, so
that ``computewatch --version`` and ``--help`` skip the library's imports; ``run`` has a module
of its own (:mod:`computewatch.cli.run`), which loads less than these commands need."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TextIO

from computewatch.accounting.engine import AccountingOptions, accounted, with_accounting
from computewatch.analysis.compare import compare
from computewatch.analysis.export import iter_rows, write_csv, write_jsonl, write_parquet
from computewatch.analysis.repro import with_repro
from computewatch.analysis.retention import collect, expired_runs
from computewatch.analysis.summary import current_summary, iso
from computewatch.analysis.summary_types import RunSummary
from computewatch.cli.run import accounting_options, emit_json
from computewatch.errors import PROG, ComputewatchError, UsageError
from computewatch.paths import resolve_db_path
from computewatch.profiling.artifacts import artifacts_of
from computewatch.sources.gpus import GpuBackendError
from computewatch.store import Store, StoreError
from computewatch.store.spooled import open_store, pending_runs, waiting_line
from computewatch.views.summary_text import print_artifacts, print_summary

__all__ = [
    "cmd_compare",
    "cmd_devices",
    "cmd_export",
    "cmd_gc",
    "cmd_report",
    "cmd_runs",
    "cmd_show",
    "cmd_top",
]


def _open_store(args: argparse.Namespace, *, create: bool = False) -> Store:
    path = resolve_db_path(args.db)
    if not create and not path.exists() and pending_runs(path):
        # the database was moved away (a corrupt file set aside): the runs waiting in the
        # spool start a new one rather than being hidden behind "no runs recorded yet"
        Store.open(path, create=True).close()
    if not create and not path.exists():
        if args.db:
            raise ComputewatchError(f"no database at {path}")
        raise ComputewatchError(
            f"no runs recorded yet ({path} does not exist); try `{PROG} run -- CMD`"
        )
    if create:
        return Store.open(path, create=create)
    return open_store(path)  # read-only when it cannot be written; waiting runs stored first


def _say_notices(store: Store) -> None:
    """What the store could not do (read-only) and the runs still waiting in the spool."""
    for line in store.notices:
        print(f"{PROG}: {line}", file=sys.stderr)
    waiting = waiting_line(store.path)
    if waiting:
        print(f"{PROG}: {waiting}", file=sys.stderr)


def _emit(obj: Any, printer: Callable[[Any, TextIO], None], *, as_json: bool) -> None:
    """JSON or the human-readable text, on standard output."""
    if as_json:
        emit_json(obj, sys.stdout)
    else:
        printer(obj, sys.stdout)


def cmd_devices(args: argparse.Namespace) -> int:
    from computewatch.sources.devices import describe, record_trace  # this command's alone

    if args.record:
        if args.seconds <= 0:
            raise UsageError("--seconds must be positive")
        try:
            with _open_output(args.record, binary=False) as f:
                n, ticks = record_trace(
                    f, gpu_backend=args.gpu_backend, seconds=args.seconds, interval=args.interval
                )
        except ValueError as e:
            Path(args.record).expanduser().unlink(missing_ok=True)  # nothing recorded: no file
            raise ComputewatchError(str(e)) from None
        print(
            f"recorded {ticks} readings of {n} GPU(s) to {args.record}; replay with "
            f"--gpu-backend replay:{args.record}",
            file=sys.stderr,
        )
        return 0
    info = describe(args.gpu_backend)
    from computewatch.views.text import print_devices  # loads rich (start-up of `run`)

    _emit(info, print_devices, as_json=args.json)
    return 0


def cmd_runs(args: argparse.Namespace) -> int:
    try:
        store = _open_store(args)
    except StoreError:  # unreadable: still say which runs wait in the spool (and why) first
        waiting = waiting_line(resolve_db_path(args.db))
        if waiting is not None:
            print(f"{PROG}: {waiting}", file=sys.stderr)
        raise
    with store:
        runs = store.list_runs(limit=args.limit, tags=dict(args.tag) or None)
        if args.json:
            emit_json(
                [
                    {
                        "id": r.id,
                        "name": r.name,
                        "tags": r.tags,
                        "status": r.status,
                        "exit_code": r.exit_code,
                        "command": r.command,
                        "started_at": iso(r.started_at),
                        "ended_at": iso(r.ended_at),
                        "duration_seconds": None
                        if r.ended_at is None
                        else round(r.ended_at - r.started_at, 3),
                    }
                    for r in runs
                ],
                sys.stdout,
            )
        elif not runs:
            print("no runs" + (" with these tags" if args.tag else ""), file=sys.stderr)
        else:
            from computewatch.views.text import print_runs  # loads rich (start-up of `run`)

            print_runs(runs, sys.stdout)
        _say_notices(store)
    return 0


def _summary_of(store: Store, ref: str) -> RunSummary:
    run = store.find_run(ref)
    # with the run's environment and config (analysis/repro.py)
    return with_repro(current_summary(store, run), store.meta(run.key))


_ACCOUNTING_FLAGS = (
    "region", "pue", "precision", "whole_machine", "instance_type", "total_steps", "config",
    "sci_unit",
)  # fmt: skip


def _keep_recorded_flags(args: argparse.Namespace, summary: RunSummary) -> None:
    """A run accounted again with some flags keeps the ``--region`` and ``--pue`` it was run
    with, where those flags are not given again (a ``--config`` alone must not put the world
    average in place of the region the run named)."""
    carbon = summary.get("carbon")
    if args.region is None and carbon is not None:
        intensity = carbon["intensity"]
        if intensity.get("how") == "--region" and intensity.get("region"):
            args.region = intensity["region"]
    energy = summary.get("energy")
    if args.pue is None and energy is not None:
        pue = energy["pue"]
        if pue.get("source") == "--pue" and pue.get("value"):
            args.pue = float(pue["value"])


def cmd_show(args: argparse.Namespace) -> int:
    recompute = any(getattr(args, f, None) for f in _ACCOUNTING_FLAGS)
    with _open_store(args) as store:
        shown = store.find_run(args.run)
        summary = _summary_of(store, shown.id)
        _say_notices(store)
        accounting: AccountingOptions | None = None
        if recompute:
            _keep_recorded_flags(args, summary)
            accounting = accounting_options(args)
        if accounting is not None:  # the same run, accounted again in another context
            run = store.find_run(summary["id"])
            if run.samples_deleted_at is not None:
                raise ComputewatchError(
                    f"the samples of run {run.id} were deleted by gc: its accounting can only "
                    "be shown as stored (drop the accounting flags)"
                )
            summary = with_accounting(summary, accounted(store, run, summary, accounting))
        artifacts = artifacts_of(store, shown.key)  # profiles and traces linked to the run
    if args.json:
        emit_json({**summary, "artifacts": artifacts} if artifacts else summary, sys.stdout)
    else:
        print_summary(summary, sys.stdout)
        print_artifacts(artifacts, sys.stdout)
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    with _open_store(args) as store:
        result = compare(_summary_of(store, args.a), _summary_of(store, args.b))
    from computewatch.views.text import print_compare  # loads rich (start-up of `run`)

    _emit(result, print_compare, as_json=args.json)
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    with _open_store(args) as store:
        run = store.find_run(args.run)
        if args.format == "chrome-trace":  # steps and phases of every rank, one timeline
            from computewatch.analysis.chrome_trace import chrome_trace, write_chrome_trace

            doc = chrome_trace(store, run)
            if args.output:
                with _open_output(args.output, binary=False) as ft:
                    write_chrome_trace(doc, ft)
            else:
                write_chrome_trace(doc, sys.stdout)
            return 0
        rows = iter_rows(store, run)
        try:
            _write_export(args, rows)
        finally:  # before the store closes: a reader that went away (| head) stops it early
            rows.close()
    return 0


def _write_export(args: argparse.Namespace, rows: Iterator[tuple[Any, ...]]) -> None:
    if args.format == "parquet":
        if args.output:
            with _open_output(args.output, binary=True) as fb:
                write_parquet(rows, fb)
        elif sys.stdout.isatty():
            raise UsageError("parquet is binary: give -o FILE or redirect standard output")
        else:
            write_parquet(rows, sys.stdout.buffer)
        return
    writer = write_csv if args.format == "csv" else write_jsonl
    if args.output:
        with _open_output(args.output, binary=False) as ft:
            writer(rows, ft)
    else:
        writer(rows, sys.stdout)


def _open_output(path: str, *, binary: bool) -> Any:
    try:
        return open(
            Path(path).expanduser(), "wb" if binary else "w", newline="" if not binary else None
        )
    except OSError as e:
        raise ComputewatchError(f"cannot write {path}: {e.strerror or e}") from None


def cmd_report(args: argparse.Namespace) -> int:
    from computewatch.views.html import default_filename, write_report  # this command's alone

    with _open_store(args) as store:
        run = store.find_run(args.run)
        path = args.output or default_filename(run)
        try:
            written = write_report(store, run, path)
        except OSError as e:
            raise ComputewatchError(f"cannot write {path}: {e.strerror or e}") from None
    print(written)
    return 0


def cmd_gc(args: argparse.Namespace) -> int:
    cutoff = time.time() - args.older_than
    with _open_store(args) as store:
        if args.dry_run:
            old = expired_runs(store, cutoff)
            for r in old:
                print(f"would delete samples of {r.id} {r.name or ''}".rstrip())
            print(f"{len(old)} run(s) would lose their samples; summaries are kept")
            return 0
        done = collect(store, cutoff, vacuum=args.vacuum)
    print(f"deleted the samples of {len(done)} run(s); their summaries are kept")
    return 0


def cmd_top(args: argparse.Namespace) -> int:
    # this command's alone: the other commands need neither the collector nor the screen
    from computewatch.sampling.top import TopCollector
    from computewatch.views.top import run_plain, run_screen

    try:  # SourceUnavailable (status 1) goes up to main as it is
        collector = TopCollector(args.gpu_backend)
    except GpuBackendError as e:
        raise UsageError(str(e)) from None
    with collector:
        iterations = 1 if args.once else args.iterations
        plain = args.once or args.json or not sys.stdout.isatty()
        if plain or os.environ.get("TERM", "") == "dumb":
            return run_plain(
                collector,
                sys.stdout,
                interval=args.interval,
                sort=args.sort,
                iterations=iterations,
                as_json=args.json,
            )
        return run_screen(collector, interval=args.interval, sort=args.sort, iterations=iterations)
