"""The core commands (run, devices, runs, show, compare, export, report, gc, top): what each
does once :mod:`computewatch.cli.main` has parsed its flags. Loaded only when one of them runs,
so that ``computewatch --version`` and ``--help`` skip the library's imports."""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from computewatch import jsonout
from computewatch.accounting.engine import AccountingOptions, accounted, with_accounting
from computewatch.accounting.region import RegionError, resolve_location
from computewatch.analysis.compare import compare
from computewatch.analysis.export import iter_rows, write_csv, write_jsonl, write_parquet
from computewatch.analysis.repro import with_repro
from computewatch.analysis.retention import collect, expired_runs
from computewatch.analysis.summary import current_summary, iso
from computewatch.analysis.summary_types import RunSummary
from computewatch.cli.alerts import alerts_enabled, alerts_sink
from computewatch.cli.exporters import export_sinks, exports_enabled
from computewatch.cli.log_to import tracker_observers
from computewatch.config import Config, ConfigError, load_config
from computewatch.errors import PROG, ComputewatchError, UsageError
from computewatch.lineage.compute import Declaration, GovernanceError, declaration
from computewatch.paths import resolve_db_path
from computewatch.profiling.artifacts import artifacts_of
from computewatch.redact import use_names as use_redact_names
from computewatch.sampling.lifecycle import open_run_store
from computewatch.sampling.observers import RunObserver
from computewatch.sampling.supervisor import (
    FORWARDED,
    CommandNotStarted,
    RunOptions,
    run_command,
)
from computewatch.sources.gpus import GpuBackendError
from computewatch.store import RunRow, Store, StoreError
from computewatch.store.spooled import open_store, pending_runs, waiting_line
from computewatch.views.live import make_live_view
from computewatch.views.summary_text import print_artifacts, print_summary

if TYPE_CHECKING:  # loaded only with --cprofile or --nsys
    from computewatch.profiling.wrap import PendingProfiles

__all__ = [
    "cmd_compare",
    "cmd_devices",
    "cmd_export",
    "cmd_gc",
    "cmd_report",
    "cmd_run",
    "cmd_runs",
    "cmd_show",
    "cmd_top",
]


def _accounting_options(args: argparse.Namespace) -> AccountingOptions:
    """The accounting context from flags and configuration, checked before anything runs."""
    try:
        cfg = load_config(args.config)
    except ConfigError as e:
        raise UsageError(str(e)) from None
    try:
        resolve_location(args.region, config_region=cfg.region)
    except RegionError as e:
        raise UsageError(f"--region: {e}" if args.region else str(e)) from None
    return AccountingOptions(
        config=cfg,
        region=args.region,
        pue=args.pue,
        precision=args.precision,
        whole_machine=args.whole_machine,
        total_steps=args.total_steps,
        instance_type=args.instance_type,
        sci_unit=getattr(args, "sci_unit", None),
    )


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
        _emit_json(obj, sys.stdout)
    else:
        printer(obj, sys.stdout)


def _emit_json(obj: Any, out: TextIO) -> None:
    jsonout.dump(obj, out, indent=2)
    out.write("\n")


def _governance(args: argparse.Namespace, config: Config) -> Declaration | None:
    """What the run trains: the flags, else the configuration's ``[governance]`` defaults."""
    model = args.model or config.governance_model
    from_flags = args.model is not None
    try:
        return declaration(
            model,
            args.base_model if from_flags or args.base_model else config.governance_base_model,
            args.stage or (None if from_flags else config.governance_stage),
            args.parameters or (None if from_flags else config.governance_parameters),
        )
    except GovernanceError as e:
        raise UsageError(str(e)) from None


def cmd_run(args: argparse.Namespace) -> int:
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise UsageError("no command given: computewatch run [options] -- CMD [ARGS...]")
    if args.json and args.json != "-":
        parent = Path(args.json).expanduser().resolve().parent
        if not parent.is_dir():
            raise UsageError(f"--json: directory {parent} does not exist")
    accounting = _accounting_options(args)
    use_redact_names(accounting.config.redact_names)  # --config's [privacy] redact, for the store
    governance = _governance(args, accounting.config)
    if getattr(args, "start_when_green", False):  # before anything starts: Ctrl-C ends the wait
        from computewatch.cli.carbon_run import wait_for_green  # only with the flag

        wait_for_green(args, accounting.config)
    # Before any thread starts (metrics server, alert delivery): threads inherit the mask, and
    # a kill(2) to the process goes to any thread not blocking the signal, whose default action
    # would end the supervisor and orphan the command (signal(7)). The supervisor receives them.
    signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED)
    command, pending = _profilers(args, command)  # --profile-steps, --cprofile, --nsys
    observers = _run_observers(args, accounting) + _upload_observers(args, accounting)
    observers += tracker_observers(args, accounting.config)  # --log-to (cli/log_to.py)
    # Never raises: a store that cannot take the run leaves it to the spool (said once).
    store = open_run_store(resolve_db_path(args.db))
    opts = RunOptions(
        command=command,
        name=args.name,
        tags=dict(args.tag),
        interval=args.interval,
        live="quiet" if args.quiet else args.live,
        gpu_backend=args.gpu_backend,
        all_gpus=args.all_gpus,
        accounting=accounting,
        observers=observers,
        view=make_live_view,
    )
    if governance is not None:
        opts.meta["governance"] = governance.to_json()
    if getattr(args, "start_step", None) is not None:  # goodput: the step it resumed from
        opts.meta["resume"] = {"start_step": args.start_step}
    try:
        outcome = run_command(opts, store)
    except CommandNotStarted:  # main says why; the status is the shell's (127 or 126)
        for obs in observers:
            obs.finish("failed", None)
        raise
    finally:
        if store.store is not None:
            store.store.close()
    if pending is not None and outcome.run is not None:
        _link_profiles(args, pending, outcome.run)
    if args.profile_steps and outcome.run is not None and not args.quiet:
        _check_profile_steps(args, outcome.run, outcome.summary)
    if outcome.summary is None:  # monitoring failed (already said): the status is the command's
        return outcome.exit_code
    if not args.quiet:
        sys.stderr.write("\n")
        try:
            print_summary(outcome.summary, sys.stderr)
        except Exception as e:  # the run is stored; `show` can print it again
            print(f"{PROG}: cannot print the summary ({type(e).__name__}: {e})", file=sys.stderr)
    if args.json:
        try:
            if args.json == "-":
                _emit_json(outcome.summary, sys.stdout)
            else:
                with open(Path(args.json).expanduser(), "w") as f:
                    _emit_json(outcome.summary, f)
        except OSError as e:
            print(f"{PROG}: cannot write {args.json}: {e.strerror or e}", file=sys.stderr)
    return outcome.exit_code


def _profilers(
    args: argparse.Namespace, command: list[str]
) -> tuple[list[str], PendingProfiles | None]:
    """``--profile-steps`` (the job's ``track()`` reads it), ``--cprofile`` and ``--nsys``
    (the command is wrapped; their files are linked to the run when it ends)."""
    if args.profile_steps:
        from computewatch.tracking import ENV_PROFILE_STEPS  # the job's side reads it

        os.environ[ENV_PROFILE_STEPS] = "{}:{}".format(*args.profile_steps)
    if not (args.cprofile or args.nsys):
        return command, None
    # only with --cprofile or --nsys: the wrappers (start-up of `run`)
    from computewatch.profiling.pyspy import ProfilerError
    from computewatch.profiling.wrap import cprofile_command, nsys_command, pending_profiles

    pending = pending_profiles(resolve_db_path(args.db))
    try:
        if args.cprofile:
            command = cprofile_command(command, pending)
        if args.nsys:
            command = nsys_command(command, pending)
    except ProfilerError as e:
        shutil.rmtree(pending.directory, ignore_errors=True)
        raise UsageError(str(e)) from None
    return command, pending


def _check_profile_steps(args: argparse.Namespace, run: RunRow, summary: RunSummary | None) -> None:
    """Say so when ``--profile-steps`` gave no profile (the job reported too few steps, or
    none through computewatch.track / computewatch.torch)."""
    try:
        with Store.open(resolve_db_path(args.db)) as store:
            tools = {a["tool"] for a in artifacts_of(store, run.key)}
    except Exception:
        return
    if "torch-profiler" in tools:
        return
    steps: Any = summary.get("steps") if summary is not None else None
    n = steps.get("count") if isinstance(steps, dict) else None
    a, b = args.profile_steps
    print(
        f"{PROG}: --profile-steps {a}:{b}: no PyTorch Profiler window: the job reported "
        f"{n or 0} steps (through computewatch.track or computewatch.torch)",
        file=sys.stderr,
    )


def _link_profiles(args: argparse.Namespace, pending: PendingProfiles, run: RunRow) -> None:
    db = resolve_db_path(args.db)
    try:
        with Store.open(db) as store:
            lines = pending.link(db, run.id, store, run.key)
    except Exception as e:  # the run is stored; its profiles stay where they are
        lines = [f"the profiles are not linked to the run ({type(e).__name__}: {e})"]
    if not args.quiet:
        for line in lines:
            print(f"{PROG}: {line}", file=sys.stderr)


def _run_observers(args: argparse.Namespace, accounting: AccountingOptions) -> list[RunObserver]:
    """``--prometheus`` and the alert flags, started before the command: a port in use or a
    bad target stops here, before anything runs."""
    prometheus_flags = (
        args.prometheus,
        args.prometheus_token_file,
        args.prometheus_tls_cert,
        args.prometheus_tls_key,
    )
    cfg = accounting.config
    capture = cfg.profiling_capture_on_regression
    if capture is None:  # by default, with the alert flags (their detector's capture)
        capture = alerts_enabled(args)
    if (
        not any(prometheus_flags)
        and not alerts_enabled(args)
        and not exports_enabled(args)
        and not capture
    ):
        return []  # none: the metrics server and the rules engine are not loaded
    # only with --prometheus or alert flags: the metrics server and the rules engine
    from computewatch.alerts import AlertsError
    from computewatch.fleet.run_export import prometheus_sink, run_observer
    from computewatch.metrics.model import MetricsSink
    from computewatch.metrics.server import ServerError

    sinks: list[MetricsSink] = []
    try:
        if args.prometheus:
            try:
                prom = prometheus_sink(
                    args.prometheus,
                    token_file=args.prometheus_token_file,
                    tls_cert=args.prometheus_tls_cert,
                    tls_key=args.prometheus_tls_key,
                )
            except (ServerError, OSError) as e:
                raise UsageError(f"--prometheus: {e}") from None
            sinks.append(prom)
            if not prom.server.loopback_only and prom.server.security.token is None:
                print(  # the agent's rule (cli/agent_run.py): warned, not refused
                    f"{PROG} run: warning: --prometheus listens on {args.prometheus} without a "
                    "token: anyone who can reach this address can read the run's metrics "
                    "(give --prometheus-token-file)",
                    file=sys.stderr,
                )
        elif args.prometheus_token_file or args.prometheus_tls_cert or args.prometheus_tls_key:
            raise UsageError("--prometheus-token-file and --prometheus-tls-* need --prometheus")
        try:
            alerts = alerts_sink(args, out=sys.stderr, config=accounting.config)
        except AlertsError as e:
            raise UsageError(f"--alerts: {e}") from None
        if alerts is not None:
            sinks.append(alerts)
        sinks.extend(export_sinks(args, node=None, interval=args.interval, prefix=f"{PROG} run"))
        if capture:  # a py-spy sample when the step-time regression detector fires
            from computewatch.fleet.anomaly_capture import regression_capture

            sinks.append(
                regression_capture(
                    resolve_db_path(args.db),
                    min_interval=cfg.profiling_capture_interval,
                    seconds=cfg.profiling_capture_seconds,
                    overrides={
                        "warmup": cfg.profiling_regression_warmup,
                        "baseline": cfg.profiling_regression_baseline,
                        "window": cfg.profiling_regression_window,
                        "threshold": cfg.profiling_regression_threshold,
                    },
                    prefix=f"{PROG} run",
                )
            )
    except BaseException:
        for sink in sinks:
            sink.close()
        raise
    return [run_observer(sinks)] if sinks else []


def _upload_observers(args: argparse.Namespace, accounting: AccountingOptions) -> list[RunObserver]:
    """With a server configured (``[server] url`` or ``COMPUTEWATCH_SERVER``), the live
    uploader (docs/upload.md); without one nothing of the upload code is loaded."""
    if not (accounting.config.server_url or os.environ.get("COMPUTEWATCH_SERVER")):
        return []
    # only with a server configured: the upload client and its thread
    from computewatch.upload.settings import SettingsError, server_settings
    from computewatch.upload.stream import LiveUploader

    try:
        settings = server_settings(accounting.config)
    except SettingsError as e:  # the run goes on; `push` says the same when it is tried
        print(f"{PROG} run: warning: not uploading: {e}", file=sys.stderr)
        return []
    if settings is None:
        return []
    return [
        LiveUploader(
            settings,
            resolve_db_path(args.db),
            total_steps=accounting.total_steps,
            precision=accounting.precision or accounting.config.precision,
        )
    ]


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
            _emit_json(
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
            accounting = _accounting_options(args)
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
        _emit_json({**summary, "artifacts": artifacts} if artifacts else summary, sys.stdout)
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
