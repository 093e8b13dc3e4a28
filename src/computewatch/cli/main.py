"""The ``computewatch`` command line: a thin layer over the library."""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn, TextIO

from computewatch._version import __version__
from computewatch.accounting.engine import AccountingOptions, accounted
from computewatch.accounting.region import RegionError, resolve_location
from computewatch.analysis.compare import compare
from computewatch.analysis.export import FORMATS, iter_rows, write_csv, write_jsonl, write_parquet
from computewatch.analysis.retention import collect, expired_runs
from computewatch.analysis.summary import build_summary
from computewatch.catalog import PRECISIONS
from computewatch.cli import args as cli_args
from computewatch.cli.agent import add_agent_parser, cmd_agent
from computewatch.cli.alerts import (
    add_alert_arguments,
    add_alerts_parser,
    alerts_sink,
    cmd_alerts,
)
from computewatch.cli.diagnose import add_diagnose_parser, cmd_diagnose
from computewatch.cli.fleet import add_fleet_parser, cmd_fleet
from computewatch.cli.flops import add_flops_parser, cmd_flops
from computewatch.config import ConfigError, load_config
from computewatch.paths import resolve_db_path
from computewatch.sampling.observers import RunObserver
from computewatch.sampling.supervisor import (
    MAX_INTERVAL,
    MIN_INTERVAL,
    CommandNotStarted,
    RunOptions,
    run_command,
)
from computewatch.sources.gpus import BACKEND_CHOICES, GpuBackendError
from computewatch.store import Store, StoreError
from computewatch.views.live import make_live_view
from computewatch.views.text import print_compare, print_devices, print_runs, print_summary

PROG = "computewatch"


class UserError(Exception):
    """A mistake or condition the user can fix: one line, exit status 1 (2 for usage)."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: error: {message}\n")


def _interval(text: str) -> float:
    return cli_args.interval(text, MIN_INTERVAL, MAX_INTERVAL)


def _tag(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, not {text!r}")
    return key.strip(), value


def _accounting_options(args: argparse.Namespace) -> AccountingOptions:
    """The accounting context from flags and configuration, checked before anything runs."""
    try:
        cfg = load_config(args.config)
    except ConfigError as e:
        raise UserError(str(e), 2) from None
    try:
        resolve_location(args.region, config_region=cfg.region)
    except RegionError as e:
        raise UserError(f"--region: {e}" if args.region else str(e), 2) from None
    return AccountingOptions(
        config=cfg,
        region=args.region,
        pue=args.pue,
        precision=args.precision,
        whole_machine=args.whole_machine,
        total_steps=args.total_steps,
        instance_type=args.instance_type,
    )


def _gpu_backend(text: str) -> str:
    return cli_args.gpu_backend(text, open_replay=True)


def _positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {v}")
    return v


def parse_age(text: str) -> float:
    """``30d``, ``12h``, ``90m``, ``45s``, ``2w`` → seconds."""
    seconds = cli_args.duration_seconds(text)
    if seconds is None:
        raise argparse.ArgumentTypeError(
            f"expected a duration such as 30d, 12h, 90m or 2w, not {text!r}"
        )
    return seconds


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog=PROG,
        description="Measure what a command or training run does with its compute, and keep "
        "a record of every run.",
    )
    p.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = p.add_subparsers(dest="cmd", metavar="COMMAND", parser_class=_Parser)

    def with_db(sp: argparse.ArgumentParser) -> argparse.ArgumentParser:
        sp.add_argument(
            "--db",
            metavar="PATH",
            help="database file (default: $COMPUTEWATCH_HOME/computewatch.db, else "
            "~/.local/share/computewatch/computewatch.db)",
        )
        return sp

    def with_gpu(sp: argparse.ArgumentParser) -> argparse.ArgumentParser:
        sp.add_argument(
            "--gpu-backend",
            type=_gpu_backend,
            default="auto",
            metavar="BACKEND",
            help=f"{BACKEND_CHOICES} (default auto: NVIDIA, then AMD; fake and replayed "
            "devices are labelled simulated)",
        )
        return sp

    def with_accounting(sp: argparse.ArgumentParser) -> argparse.ArgumentParser:
        g = sp.add_argument_group("accounting (energy, carbon, cost, FLOPs)")
        g.add_argument(
            "--region",
            metavar="CODE",
            help="where the electricity comes from: FR, US-CA, aws:us-east-1, gcp:europe-west4, "
            "azure:westeurope ... (default: configuration, COMPUTEWATCH_REGION, cloud variables; "
            "else the world average, said so)",
        )
        g.add_argument("--pue", type=cli_args.pue, metavar="PUE", help="facility PUE (>= 1)")
        g.add_argument(
            "--precision",
            choices=PRECISIONS,
            help="precision for the hardware FLOPs estimate (default: bf16 where the GPU has it)",
        )
        g.add_argument(
            "--whole-machine",
            action="store_true",
            help="charge the whole machine's CPU and memory energy to the run",
        )
        g.add_argument(
            "--instance-type",
            metavar="PROVIDER:TYPE",
            help="cloud instance for the cost, e.g. aws:p5.48xlarge (default: configuration, DMI)",
        )
        g.add_argument(
            "--total-steps",
            type=_positive_int,
            metavar="N",
            help="the run's planned steps: forecast time, energy, carbon, cost at completion",
        )
        g.add_argument(
            "--config",
            metavar="FILE",
            help="configuration file (default: $COMPUTEWATCH_CONFIG or "
            "~/.config/computewatch/config.toml)",
        )
        return sp

    r = with_db(
        sub.add_parser(
            "run",
            help="run a command under monitoring",
            description="Run CMD, sample it and its child processes, print a summary and "
            "store the run. The exit status is the command's.",
            usage=f"{PROG} run [options] -- CMD [ARGS...]",
        )
    )
    r.add_argument("--name", help="a name for the run (show/compare accept it)")
    r.add_argument(
        "--tag", action="append", type=_tag, default=[], metavar="KEY=VALUE", help="repeatable"
    )
    r.add_argument(
        "--interval",
        type=_interval,
        default=1.0,
        metavar="SECONDS",
        help=f"sampling interval, {MIN_INTERVAL} to {MAX_INTERVAL:g} (default 1.0)",
    )
    r.add_argument("--json", metavar="FILE", help="also write the summary as JSON to FILE")
    r.add_argument("--quiet", action="store_true", help="no live view and no summary")
    r.add_argument(
        "--live",
        choices=("auto", "panel", "plain"),
        default="auto",
        help="live view style (default: a panel on a terminal, plain lines otherwise)",
    )
    with_gpu(r)
    with_accounting(r)
    r.add_argument(
        "--all-gpus",
        action="store_true",
        help="summarise every GPU, not only those the command's processes used",
    )
    r.add_argument(
        "--prometheus",
        metavar="HOST:PORT",
        help="serve the run's metrics on http://HOST:PORT/metrics while it runs (the agent's "
        "names, the run as the job; docs/metrics.md)",
    )
    add_alert_arguments(r)
    r.add_argument("command", nargs=argparse.REMAINDER, help="the command to run")

    dv = with_gpu(
        sub.add_parser(
            "devices",
            help="what can be measured here: CPU energy, GPUs and their capabilities",
        )
    )
    dv.add_argument("--json", action="store_true", help="JSON output")
    dv.add_argument("--record", metavar="FILE", help="record GPU readings to a trace FILE")
    dv.add_argument(
        "--seconds", type=float, default=60.0, help="with --record: how long (default 60)"
    )
    dv.add_argument(
        "--interval", type=_interval, default=1.0, help="with --record: seconds between readings"
    )

    ls = with_db(sub.add_parser("runs", help="list stored runs, newest first"))
    ls.add_argument("--json", action="store_true", help="JSON output")
    ls.add_argument("--limit", type=_positive_int, default=20, metavar="N", help="default 20")
    ls.add_argument("--tag", action="append", type=_tag, default=[], metavar="KEY=VALUE")

    sh = with_db(sub.add_parser("show", help="print the summary of a run"))
    sh.add_argument("run", metavar="RUN", help="id, unique id prefix, name, or 'last'")
    sh.add_argument("--json", action="store_true", help="JSON output")
    with_accounting(sh)

    cp = with_db(sub.add_parser("compare", help="two runs side by side"))
    cp.add_argument("a", metavar="RUN")
    cp.add_argument("b", metavar="RUN")
    cp.add_argument("--json", action="store_true", help="JSON output")

    ex = with_db(sub.add_parser("export", help="write a run's samples as CSV, JSONL or Parquet"))
    ex.add_argument("run", metavar="RUN")
    ex.add_argument("--format", choices=FORMATS, default="csv")
    ex.add_argument("-o", "--output", metavar="FILE", help="default: standard output")

    rp = with_db(
        sub.add_parser(
            "report",
            help="write a run's report: one self-contained HTML page with charts",
            description="Write one HTML file with the run's charts (zoom, hover), summary, "
            "GPUs and notes. It embeds everything it needs and opens with no network.",
        )
    )
    rp.add_argument("run", metavar="RUN", help="id, unique id prefix, name, or 'last'")
    rp.add_argument("-o", "--output", metavar="FILE", help="default: computewatch-ID.html here")

    gc = with_db(
        sub.add_parser("gc", help="delete the samples of old runs (their summaries are kept)")
    )
    gc.add_argument(
        "--older-than", type=parse_age, required=True, metavar="AGE", help="e.g. 30d, 12h, 2w"
    )
    gc.add_argument("--dry-run", action="store_true", help="list what would be deleted")
    gc.add_argument("--vacuum", action="store_true", help="then give the space back to the OS")

    tp = with_gpu(
        sub.add_parser(
            "top",
            help="live view of the host's CPU, memory, GPUs and busiest processes",
            description="A live, full-screen view of the whole host (keys: c/m/g/s/p sort by "
            "CPU, memory, GPU memory, GPU SM, PID; q quits). Without a terminal, prints a "
            "text snapshot every interval.",
        )
    )
    tp.add_argument(
        "--interval",
        type=_top_interval,
        default=2.0,
        metavar="SECONDS",
        help="refresh interval, 0.2 to 60 (default 2.0)",
    )
    tp.add_argument(
        "--sort",
        choices=("cpu", "memory", "gpu-memory", "gpu", "pid"),
        default="cpu",
        help="process order (default cpu; gpu = GPU SM share)",
    )
    tp.add_argument("--once", action="store_true", help="print one text snapshot and exit")
    tp.add_argument("--iterations", type=_positive_int, metavar="N", help="stop after N snapshots")
    tp.add_argument(
        "--json", action="store_true", help="JSON: one document with --once, else one per line"
    )
    add_fleet_parser(sub)
    add_agent_parser(sub)
    add_alerts_parser(sub)
    add_diagnose_parser(sub)
    add_flops_parser(sub)
    return p


def _open_store(args: argparse.Namespace, *, create: bool = False) -> Store:
    path = resolve_db_path(args.db)
    if not create and not path.exists():
        if args.db:
            raise UserError(f"no database at {path}")
        raise UserError(f"no runs recorded yet ({path} does not exist); try `{PROG} run -- CMD`")
    return Store.open(path, create=create)


def _emit(obj: Any, printer: Callable[[Any, TextIO], None], *, as_json: bool) -> None:
    """JSON or the human-readable text, on standard output."""
    if as_json:
        _emit_json(obj, sys.stdout)
    else:
        printer(obj, sys.stdout)


def _emit_json(obj: Any, out: TextIO) -> None:
    json.dump(obj, out, indent=2, sort_keys=False)
    out.write("\n")


def cmd_run(args: argparse.Namespace) -> int:
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise UserError("no command given: computewatch run [options] -- CMD [ARGS...]", 2)
    if args.json and args.json != "-":
        parent = Path(args.json).expanduser().resolve().parent
        if not parent.is_dir():
            raise UserError(f"--json: directory {parent} does not exist", 2)
    accounting = _accounting_options(args)
    observers = _run_observers(args, accounting)
    try:
        store = _open_store(args, create=True)
    except BaseException:
        for obs in observers:
            obs.finish("failed", None)
        raise
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
    try:
        outcome = run_command(opts, store)
    except CommandNotStarted as e:
        for obs in observers:
            obs.finish("failed", None)
        print(f"{PROG}: {e}", file=sys.stderr)
        return e.exit_code
    finally:
        store.close()
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


def _run_observers(args: argparse.Namespace, accounting: AccountingOptions) -> list[RunObserver]:
    """``--prometheus`` and the alert flags, started before the command: a port in use or a
    bad target stops here, before anything runs."""
    from computewatch.alerts import AlertsError
    from computewatch.fleet.run_export import prometheus_sink, run_observer
    from computewatch.metrics.model import MetricsSink
    from computewatch.metrics.server import ServerError

    sinks: list[MetricsSink] = []
    try:
        if args.prometheus:
            try:
                sinks.append(prometheus_sink(args.prometheus))
            except (ServerError, OSError) as e:
                raise UserError(f"--prometheus: {e}", 2) from None
        try:
            alerts = alerts_sink(args, out=sys.stderr, config=accounting.config)
        except AlertsError as e:
            raise UserError(f"--alerts: {e}", 2) from None
        if alerts is not None:
            sinks.append(alerts)
    except BaseException:
        for sink in sinks:
            sink.close()
        raise
    return [run_observer(sinks)] if sinks else []


def cmd_devices(args: argparse.Namespace) -> int:
    from computewatch.sources.devices import describe, record_trace

    if args.record:
        if args.seconds <= 0:
            raise UserError("--seconds must be positive", 2)
        try:
            with _open_output(args.record, binary=False) as f:
                n, ticks = record_trace(
                    f, gpu_backend=args.gpu_backend, seconds=args.seconds, interval=args.interval
                )
        except ValueError as e:
            Path(args.record).expanduser().unlink(missing_ok=True)  # nothing recorded: no file
            raise UserError(str(e)) from None
        print(
            f"recorded {ticks} readings of {n} GPU(s) to {args.record}; replay with "
            f"--gpu-backend replay:{args.record}",
            file=sys.stderr,
        )
        return 0
    info = describe(args.gpu_backend)
    _emit(info, print_devices, as_json=args.json)
    return 0


def cmd_runs(args: argparse.Namespace) -> int:
    with _open_store(args) as store:
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
                        "started_at": _iso(r.started_at),
                        "ended_at": _iso(r.ended_at),
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
            print_runs(runs, sys.stdout)
    return 0


def _iso(t: float | None) -> str | None:
    from computewatch.analysis.summary import iso

    return iso(t)


def _summary_of(store: Store, ref: str) -> dict[str, Any]:
    run = store.find_run(ref)
    if run.summary is not None and run.status != "running":
        return run.summary
    return build_summary(store, run)


_ACCOUNTING_FLAGS = (
    "region", "pue", "precision", "whole_machine", "instance_type", "total_steps", "config",
)  # fmt: skip


def cmd_show(args: argparse.Namespace) -> int:
    recompute = any(getattr(args, f) for f in _ACCOUNTING_FLAGS)
    accounting = _accounting_options(args) if recompute else None
    with _open_store(args) as store:
        summary = _summary_of(store, args.run)
        if accounting is not None:  # the same run, accounted again in another context
            run = store.find_run(summary["id"])
            if run.samples_deleted_at is not None:
                raise UserError(
                    f"the samples of run {run.id} were deleted by gc: its accounting can only "
                    "be shown as stored (drop the accounting flags)"
                )
            summary = {**summary, **accounted(store, run, summary, accounting)}
    _emit(summary, print_summary, as_json=args.json)
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    with _open_store(args) as store:
        result = compare(_summary_of(store, args.a), _summary_of(store, args.b))
    _emit(result, print_compare, as_json=args.json)
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    with _open_store(args) as store:
        run = store.find_run(args.run)
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
            raise UserError("parquet is binary: give -o FILE or redirect standard output", 2)
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
        raise UserError(f"cannot write {path}: {e.strerror or e}") from None


def cmd_report(args: argparse.Namespace) -> int:
    from computewatch.views.html import default_filename, write_report

    with _open_store(args) as store:
        run = store.find_run(args.run)
        path = args.output or default_filename(run)
        try:
            written = write_report(store, run, path)
        except OSError as e:
            raise UserError(f"cannot write {path}: {e.strerror or e}") from None
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


def _top_interval(text: str) -> float:
    v = _interval(text)
    if not 0.2 <= v <= 60.0:
        raise argparse.ArgumentTypeError(f"must be between 0.2 and 60 seconds, not {text}")
    return v


def cmd_top(args: argparse.Namespace) -> int:
    from computewatch.sampling.top import TopCollector
    from computewatch.sources.base import SourceUnavailable
    from computewatch.views.top import run_plain, run_screen

    try:
        collector = TopCollector(args.gpu_backend)
    except GpuBackendError as e:
        raise UserError(str(e), 2) from None
    except SourceUnavailable as e:
        raise UserError(str(e)) from None
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


COMMANDS = {
    "run": cmd_run,
    "devices": cmd_devices,
    "runs": cmd_runs,
    "show": cmd_show,
    "compare": cmd_compare,
    "export": cmd_export,
    "report": cmd_report,
    "gc": cmd_gc,
    "top": cmd_top,
    "fleet": cmd_fleet,
    "agent": cmd_agent,
    "alerts": cmd_alerts,
    "diagnose": cmd_diagnose,
    "flops": cmd_flops,
}


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.cmd is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        return COMMANDS[args.cmd](args)
    except UserError as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return e.exit_code
    except StoreError as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 1
    except sqlite3.Error as e:
        print(f"{PROG}: database error: {e}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        # The reader went away (``| head``): stop quietly, as other Unix tools do.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    except KeyboardInterrupt:
        return 130
    except OSError as e:
        print(f"{PROG}: {e.strerror or e}", file=sys.stderr)
        return 1
    except Exception as e:  # a bug: one line, and the traceback on request
        if os.environ.get("COMPUTEWATCH_DEBUG"):
            raise
        print(
            f"{PROG}: internal error: {type(e).__name__}: {e} "
            "(set COMPUTEWATCH_DEBUG=1 for the traceback, and please report it)",
            file=sys.stderr,
        )
        return 70  # EX_SOFTWARE (sysexits.h)


if __name__ == "__main__":
    sys.exit(main())
