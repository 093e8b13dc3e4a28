"""``computewatch run``: what it does once :mod:`computewatch.cli.main` has parsed its flags.

A module of its own, loaded only for this command: a run imports what supervising a command,
storing it and ending it need, and no more (no other command's code, no summary view with
``--quiet``, no governance code without a declared model), since whatever it imports is paid on
every run, ``computewatch run -- true`` included (benchmarks/bench_end.py, its fixed cost;
tests/cli/test_startup_imports.py lists what a run of ``true`` must not load).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from computewatch import jsonout
from computewatch.accounting.engine import AccountingOptions
from computewatch.accounting.region import RegionError, resolve_location
from computewatch.cli.alerts import alerts_enabled, alerts_sink
from computewatch.cli.exporters import export_sinks, exports_enabled
from computewatch.cli.log_to import tracker_observers
from computewatch.config import Config, ConfigError, load_config
from computewatch.errors import PROG, UsageError
from computewatch.paths import resolve_db_path
from computewatch.redact import use_names as use_redact_names
from computewatch.sampling.lifecycle import open_run_store
from computewatch.sampling.live import LiveView, QuietView
from computewatch.sampling.supervisor import (
    FORWARDED,
    CommandNotStarted,
    RunOptions,
    run_command,
)
from computewatch.store import Store

if TYPE_CHECKING:  # types only: what a run without these flags never loads
    from computewatch.analysis.summary_types import RunSummary
    from computewatch.lineage.compute import Declaration
    from computewatch.profiling.wrap import PendingProfiles
    from computewatch.sampling.observers import RunObserver
    from computewatch.store import RunRow

__all__ = ["accounting_options", "cmd_run", "emit_json"]


def accounting_options(args: argparse.Namespace) -> AccountingOptions:
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


def emit_json(obj: Any, out: TextIO) -> None:
    """``obj`` as indented JSON and a newline (computewatch.jsonout: standard JSON only)."""
    jsonout.dump(obj, out, indent=2)
    out.write("\n")


def _governance(args: argparse.Namespace, config: Config) -> Declaration | None:
    """What the run trains: the flags, else the configuration's ``[governance]`` defaults."""
    model = args.model or config.governance_model
    from_flags = args.model is not None
    if not (model or args.base_model or args.stage or args.parameters) and not (
        config.governance_base_model or config.governance_stage or config.governance_parameters
    ):
        return None  # nothing declared: the governance code is not loaded
    # only with a declaration (flags or [governance]): its checks
    from computewatch.lineage.compute import GovernanceError, declaration

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
    accounting = accounting_options(args)
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
        view=_live_view,
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
            from computewatch.views.summary_text import print_summary  # not with --quiet

            print_summary(outcome.summary, sys.stderr)
        except Exception as e:  # the run is stored; `show` can print it again
            print(f"{PROG}: cannot print the summary ({type(e).__name__}: {e})", file=sys.stderr)
    if args.json:
        try:
            if args.json == "-":
                emit_json(outcome.summary, sys.stdout)
            else:
                with open(Path(args.json).expanduser(), "w") as f:
                    emit_json(outcome.summary, f)
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
    from computewatch.profiling.artifacts import artifacts_of  # with --profile-steps only

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


def _live_view(stream: TextIO | None, mode: str, title: str) -> LiveView:
    """:func:`computewatch.views.live.make_live_view`, whose terminal views are loaded only
    when one is shown: ``--quiet`` gets the notes-only view it would build."""
    if mode == "quiet" and stream is not None:
        return QuietView(stream)
    from computewatch.views.live import make_live_view  # a view to draw: not with --quiet

    return make_live_view(stream, mode, title)
