"""The ``computewatch`` command line: a thin layer over the library."""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib
import io
import os
import sys
from collections.abc import Callable
from typing import Any, NoReturn, TextIO, cast

from computewatch._version import __version__
from computewatch.cli import args as cli_args
from computewatch.cli.args import (
    BACKEND_CHOICES,
    EXPORT_FORMATS,
    GOVERNANCE_STAGES,
    MAX_INTERVAL,
    MIN_INTERVAL,
    PRECISIONS,
)
from computewatch.errors import PROG, ComputewatchError
from computewatch.escape import clean_text

__all__ = ["COMMANDS", "build_parser", "main", "parse_age"]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: error: {message}\n")


def _interval(text: str) -> float:
    return cli_args.interval(text, MIN_INTERVAL, MAX_INTERVAL)


def _tag(text: str) -> tuple[str, str]:
    text = clean_text(text)
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, not {text!r}")
    return key.strip(), value


_text = clean_text
"""Names and run references from argv: undecodable bytes escaped (computewatch.escape), as
they are stored. Paths and the command keep their bytes."""


def _gpu_backend(text: str) -> str:
    return cli_args.gpu_backend(text, open_replay=True)


def parse_age(text: str) -> float:
    """``30d``, ``12h``, ``90m``, ``45s``, ``2w`` → seconds."""
    seconds = cli_args.duration_seconds(text)
    if seconds is None:
        raise argparse.ArgumentTypeError(
            f"expected a duration such as 30d, 12h, 90m or 2w, not {text!r}"
        )
    return seconds


def _top_interval(text: str) -> float:
    v = _interval(text)
    if not 0.2 <= v <= 60.0:
        raise argparse.ArgumentTypeError(f"must be between 0.2 and 60 seconds, not {text}")
    return v


class _Dropped:
    """The parser of a command that is not being run (:func:`build_parser` with ``only``):
    whatever is added to it is dropped, and every call returns it again, so that a command's
    parser-building code runs unchanged (argparse spends ~10 ms building every option of every
    command: ``run``'s fixed cost, benchmarks/bench_end.py)."""

    def __getattr__(self, name: str) -> Callable[..., _Dropped]:
        return self._drop

    def _drop(self, *args: object, **kwargs: object) -> _Dropped:
        return self


class _OnlyOne:
    """The commands' subparsers, giving the real parser to the command named ``only`` alone;
    every other command is listed (name, aliases and help) with no options."""

    def __init__(self, sub: argparse._SubParsersAction[_Parser], only: str) -> None:
        self._sub = sub
        self._only = only

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser | _Dropped:
        aliases = kwargs.get("aliases", ())
        if self._only == name or self._only in aliases:
            return self._sub.add_parser(name, **kwargs)
        self._sub.add_parser(name, help=kwargs.get("help"), aliases=aliases, listed_only=True)
        return _Dropped()


def _parser_factory() -> Callable[..., _Parser]:
    """The subcommands' ``parser_class``: a new parser for each command, except those
    :class:`_OnlyOne` lists without options (``listed_only``), which share one empty parser
    (building an ``ArgumentParser`` costs ~0.3 ms: 30 of them were most of ``run``'s parse)."""
    shared: list[_Parser] = []

    def make(*, listed_only: bool = False, **kwargs: Any) -> _Parser:
        if not listed_only:
            return _Parser(**kwargs)
        if not shared:
            shared.append(_Parser(prog=f"{PROG} COMMAND"))
        return shared[0]

    return make


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole command line; with ``only``, the options of that command alone (the others are
    listed, as ``--help`` shows them, but take no option): what :func:`main` parses with."""
    p = _Parser(
        prog=PROG,
        description="Measure what a command or training run does with its compute, and keep "
        "a record of every run.",
    )
    p.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    real = p.add_subparsers(
        dest="cmd", metavar="COMMAND", parser_class=cast("type[_Parser]", _parser_factory())
    )
    sub = (
        real if only is None else cast("argparse._SubParsersAction[_Parser]", _OnlyOne(real, only))
    )

    # the commands' parsers: only when a command line is parsed (--version needs none)
    from computewatch.cli.agent import add_agent_parser
    from computewatch.cli.alerts import add_alert_arguments, add_alerts_parser
    from computewatch.cli.bench import add_bench_parser
    from computewatch.cli.carbon import (
        add_carbon_parser,
        add_green_start_arguments,
        add_sci_argument,
    )
    from computewatch.cli.card import add_card_parser
    from computewatch.cli.check import add_check_parser
    from computewatch.cli.detect import add_detect_parser
    from computewatch.cli.diagnose import add_diagnose_parser
    from computewatch.cli.exporters import add_export_arguments
    from computewatch.cli.fleet import add_fleet_parser
    from computewatch.cli.flops import add_flops_parser
    from computewatch.cli.goodput import add_goodput_parser, start_step
    from computewatch.cli.governance import add_governance_parsers
    from computewatch.cli.log_to import add_log_to_argument
    from computewatch.cli.nodekey import add_nodekey_parser
    from computewatch.cli.profile import add_profile_parser, add_profile_run_arguments
    from computewatch.cli.push import add_push_parser
    from computewatch.cli.server import add_server_parser
    from computewatch.cli.traces import add_traces_parser

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
            "--accelerator-backend",
            dest="gpu_backend",
            type=_gpu_backend,
            default="auto",
            metavar="BACKEND",
            help=f"{BACKEND_CHOICES} (default auto: NVIDIA, then AMD, then TPU; fake "
            "(fake:8xH100-SXM, fake:4xTPU-v5e) and replayed devices are labelled simulated)",
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
            type=cli_args.whole,
            metavar="N",
            help="the run's planned steps: forecast time, energy, carbon, cost at completion",
        )
        add_sci_argument(g)
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
    r.add_argument("--name", type=_text, help="a name for the run (show/compare accept it)")
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
    r.add_argument(
        "--prometheus-token-file",
        metavar="FILE",
        help="with --prometheus: require this bearer token from scrapers (a file only you can "
        "read; a non-loopback address without one is warned about; docs/security.md)",
    )
    r.add_argument(
        "--prometheus-tls-cert", metavar="FILE", help="with --prometheus: serve HTTPS (PEM)"
    )
    r.add_argument("--prometheus-tls-key", metavar="FILE", help="... and this private key (PEM)")
    add_alert_arguments(r)
    add_green_start_arguments(r)  # --start-when-green, --max-delay, --threshold
    add_log_to_argument(r)
    add_export_arguments(r)  # --otlp, --emf
    add_profile_run_arguments(r)  # --profile-steps, --cprofile, --nsys
    gv = r.add_argument_group(
        "governance (what the run trains; the server sums each model's compute: docs/governance.md)"
    )
    gv.add_argument("--model", type=_text, metavar="NAME", help="the model this run trains")
    gv.add_argument(
        "--base-model", type=_text, metavar="NAME", help="the model it fine-tunes or modifies"
    )
    gv.add_argument(
        "--stage",
        choices=GOVERNANCE_STAGES,
        help="pretrain (default), or finetune (default with --base-model), rl, synthetic-data, "
        "distillation, eval, inference",
    )
    gv.add_argument(
        "--parameters",
        type=cli_args.count,
        metavar="N",
        help="the model's parameter count, for the 6 x parameters x tokens estimate (7e9 or 7B)",
    )
    r.add_argument(
        "--start-step",
        type=start_step,
        metavar="N",
        help="the training step this run resumes from (a restart from a checkpoint): "
        "`computewatch goodput` counts the steps redone since",
    )
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
        "--seconds",
        type=cli_args.seconds,
        default=60.0,
        help="with --record: how long (default 60)",
    )
    dv.add_argument(
        "--interval", type=_interval, default=1.0, help="with --record: seconds between readings"
    )

    ls = with_db(sub.add_parser("runs", help="list stored runs, newest first"))
    ls.add_argument("--json", action="store_true", help="JSON output")
    ls.add_argument("--limit", type=cli_args.whole, default=20, metavar="N", help="default 20")
    ls.add_argument("--tag", action="append", type=_tag, default=[], metavar="KEY=VALUE")

    sh = with_db(sub.add_parser("show", help="print the summary of a run"))
    sh.add_argument("run", type=_text, metavar="RUN", help="id, unique id prefix, name, or 'last'")
    sh.add_argument("--json", action="store_true", help="JSON output")
    with_accounting(sh)

    cp = with_db(sub.add_parser("compare", help="two runs side by side"))
    cp.add_argument("a", type=_text, metavar="RUN")
    cp.add_argument("b", type=_text, metavar="RUN")
    cp.add_argument("--json", action="store_true", help="JSON output")

    ex = with_db(sub.add_parser("export", help="write a run's samples as CSV, JSONL or Parquet"))
    ex.add_argument("run", type=_text, metavar="RUN")
    ex.add_argument("--format", choices=EXPORT_FORMATS, default="csv")
    ex.add_argument("-o", "--output", metavar="FILE", help="default: standard output")

    rp = with_db(
        sub.add_parser(
            "report",
            help="write a run's report: one self-contained HTML page with charts",
            description="Write one HTML file with the run's charts (zoom, hover), summary, "
            "GPUs and notes. It embeds everything it needs and opens with no network.",
        )
    )
    rp.add_argument("run", type=_text, metavar="RUN", help="id, unique id prefix, name, or 'last'")
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
    tp.add_argument("--iterations", type=cli_args.whole, metavar="N", help="stop after N snapshots")
    tp.add_argument(
        "--json", action="store_true", help="JSON: one document with --once, else one per line"
    )
    add_fleet_parser(sub)
    add_agent_parser(sub)
    add_alerts_parser(sub)
    add_diagnose_parser(sub)
    add_goodput_parser(sub)
    add_flops_parser(sub)
    add_card_parser(sub)
    add_carbon_parser(sub)
    add_profile_parser(sub)
    add_bench_parser(sub)
    add_check_parser(sub)
    add_server_parser(sub)
    add_governance_parsers(sub)
    add_push_parser(sub)
    add_nodekey_parser(sub)
    add_traces_parser(sub)
    add_detect_parser(sub)
    return p


_CORE = "computewatch.cli.commands"
COMMANDS: dict[str, tuple[str, str]] = {
    "ledger": ("computewatch.cli.ledger_run", "cmd_ledger"),
    "governance": ("computewatch.cli.governance_run", "cmd_governance"),
    "accounts": ("computewatch.cli.governance_run", "cmd_accounts"),
    "run": ("computewatch.cli.run", "cmd_run"),
    "devices": (_CORE, "cmd_devices"),
    "runs": (_CORE, "cmd_runs"),
    "show": (_CORE, "cmd_show"),
    "compare": (_CORE, "cmd_compare"),
    "export": (_CORE, "cmd_export"),
    "report": (_CORE, "cmd_report"),
    "gc": (_CORE, "cmd_gc"),
    "top": (_CORE, "cmd_top"),
    "fleet": ("computewatch.cli.fleet_run", "cmd_fleet"),
    "agent": ("computewatch.cli.agent_run", "run_agent"),
    "alerts": ("computewatch.cli.alerts", "cmd_alerts"),
    "diagnose": ("computewatch.cli.diagnose", "cmd_diagnose"),
    "goodput": ("computewatch.cli.goodput_run", "cmd_goodput"),
    "flops": ("computewatch.cli.flops_run", "cmd_flops"),
    "card": ("computewatch.cli.card", "cmd_card"),
    "when": ("computewatch.cli.carbon_run", "cmd_when"),
    "where": ("computewatch.cli.carbon_run", "cmd_where"),
    "profile": ("computewatch.cli.profile_run", "cmd_profile"),
    "bench": ("computewatch.cli.bench_run", "cmd_bench"),
    "check": ("computewatch.cli.check_run", "cmd_check"),
    "server": ("computewatch.cli.server_run", "cmd_server"),
    "push": ("computewatch.cli.push", "cmd_push"),
    "node-key": ("computewatch.cli.nodekey", "cmd_node_key"),
    "import": ("computewatch.cli.traces_run", "cmd_import"),
    "detect": ("computewatch.cli.detect_run", "cmd_detect"),
}
"""Each command's function, as (module, name): a module is imported only when its command runs,
so ``computewatch --version`` and ``--help`` load none of the library."""


def _command(name: str) -> Callable[[argparse.Namespace], int]:
    """The command's function, its module imported with the cyclic garbage collector paused:
    importing builds many objects and next to no garbage cycles, and the collections it would
    trigger (some 50 for ``run``) were ~7% of a short run's CPU (benchmarks/bench_end.py)."""
    module, func = COMMANDS[name]
    enabled = gc.isenabled()
    gc.disable()
    try:
        command: Callable[[argparse.Namespace], int] = getattr(
            importlib.import_module(module), func
        )
    finally:
        if enabled:
            gc.enable()
    return command


class _UnfailingFile(io.RawIOBase):
    """Standard error (or a closed standard output) as a file that never raises: a write that
    fails (EBADF, EPIPE, ENOSPC, EIO) is dropped, and so is every later one. The monitor's own
    messages must never cost the job its status or its run."""

    def __init__(self, fd: int | None) -> None:
        super().__init__()
        self._fd = fd

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        if self._fd is None:
            raise io.UnsupportedOperation("standard stream closed")
        return self._fd

    def isatty(self) -> bool:
        try:
            return self._fd is not None and os.isatty(self._fd)
        except OSError:
            return False

    def write(self, data: object) -> int:
        size = len(memoryview(cast(bytes, data)))
        if self._fd is not None:
            try:
                view = memoryview(cast(bytes, data))
                while view:
                    view = view[os.write(self._fd, view) :]
            except OSError:
                self._fd = None  # broken for good: say nothing more
        return size


def _unfailing_text(fd: int | None, encoding: str) -> TextIO:
    raw = _UnfailingFile(fd)
    return io.TextIOWrapper(
        io.BufferedWriter(raw),
        encoding=encoding,
        errors="backslashreplace",
        line_buffering=True,
        write_through=True,
    )


def _reserve_std_fds() -> None:
    """Put /dev/null on each of descriptors 0, 1 and 2 that is closed, so that no file this
    process opens lands there (and a job's or the monitor's stray write goes nowhere). Opened
    close-on-exec: the command still starts with them closed, as the caller asked."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            got = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)  # the lowest free: ``fd``
            if got > 2:
                os.close(got)


def _guard_std_streams() -> tuple[TextIO | None, TextIO | None]:
    """Make the standard streams safe to write for the whole command: a closed standard
    output becomes a discarding writer; standard error always goes through
    :class:`_UnfailingFile`. Only the process's own streams are replaced (a test harness's
    capture is left alone). Returns the originals, to restore."""
    saved = sys.stdout, sys.stderr
    _reserve_std_fds()
    if sys.stdout is None:
        sys.stdout = _unfailing_text(None, "utf-8")
    err = sys.stderr
    if err is None or err is sys.__stderr__:
        encoding = getattr(err, "encoding", None) or "utf-8"
        sys.stderr = _unfailing_text(None if err is None else 2, encoding)
    return saved


def _release_std_streams(saved: tuple[TextIO | None, TextIO | None]) -> None:
    """Flush the command's output now, while a failure can still be dealt with: a standard
    output that refuses the last bytes (EPIPE, ENOSPC) gets /dev/null in its place, so
    Python's own flush at exit cannot turn the exit status into 120."""
    out = sys.stdout
    try:
        out.flush()
    except (OSError, ValueError):
        with contextlib.suppress(OSError, ValueError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, out.fileno())
            os.close(devnull)
        with contextlib.suppress(OSError, ValueError):
            out.flush()
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.flush()
    if saved[0] is not None:
        sys.stdout = saved[0]
    if saved[1] is not None:
        sys.stderr = saved[1]


def main(argv: list[str] | None = None) -> int:
    """The ``computewatch`` command: ``argv`` (default: the process's own arguments) parsed,
    its command run, the exit status returned."""
    saved = _guard_std_streams()
    try:
        return _main(argv)
    finally:
        _release_std_streams(saved)
        if argv is None:  # the process's own command line: the process ends with it
            # The interpreter's shutdown collects the garbage of every generation, twice, over
            # every object the command loaded; frozen objects are left out (gc.freeze). What
            # needs closing was closed (the store, the output files, the streams flushed
            # above): ~10% of a short run's CPU (`run -- true`, benchmarks/bench_end.py).
            gc.freeze()


def _say(message: str) -> None:
    """One line on standard error, undecodable bytes escaped as everywhere else."""
    print(f"{PROG}: {clean_text(message)}", file=sys.stderr)


def _main(argv: list[str] | None) -> int:
    words = sys.argv[1:] if argv is None else argv
    if words[:1] == ["--version"]:  # what argparse prints for it, without building a parser
        print(f"{PROG} {__version__}")
        return 0
    # The command is the first word: the top level's only options (--help, --version) end
    # the parse. Anything else (a typo, no command) gets the whole parser and its message.
    parser = build_parser(words[0] if words and words[0] in COMMANDS else None)
    args = parser.parse_args(argv)
    if args.cmd is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        return _command(args.cmd)(args)
    except ComputewatchError as e:  # the one place a failure becomes a message and a status
        _say(str(e))
        return e.exit_code
    except BrokenPipeError:
        # The reader went away (``| head``): stop quietly, as other Unix tools do.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    except KeyboardInterrupt:
        return 130
    except OSError as e:
        _say(str(e.strerror or e))
        return 1
    except ModuleNotFoundError as e:  # an optional extra not installed, or a bug
        if os.environ.get("COMPUTEWATCH_DEBUG"):
            raise
        from computewatch.cli.extras import missing_extra_message  # on this failure only

        message = missing_extra_message(e, args.cmd)
        if message is None:
            _say(_internal(e))
            return 70
        _say(message)
        return 1
    except Exception as e:  # a bug: one line, and the traceback on request
        if _is_database_error(e):
            _say(f"database error: {e}")
            return 1
        if os.environ.get("COMPUTEWATCH_DEBUG"):
            raise
        _say(_internal(e))
        return 70  # EX_SOFTWARE (sysexits.h)


def _is_database_error(e: Exception) -> bool:
    """A ``sqlite3.Error``: said as a database error. Looked up where the store loaded it (a
    command that never imported sqlite3 cannot raise its errors), so that ``--version`` and
    ``--help`` do not import it."""
    sqlite3 = sys.modules.get("sqlite3")
    return sqlite3 is not None and isinstance(e, sqlite3.Error)


def _internal(e: BaseException) -> str:
    return (
        f"internal error: {type(e).__name__}: {e} "
        "(set COMPUTEWATCH_DEBUG=1 for the traceback, and please report it)"
    )


if __name__ == "__main__":
    sys.exit(main())
