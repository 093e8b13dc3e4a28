"""``computewatch profile`` and the profiling flags of ``run`` (``--profile-steps A:B``,
``--cprofile``, ``--nsys``): the parsers only (the command is
:mod:`computewatch.cli.profile_run`; this module imports nothing of the library, so ``--help``
stays fast)."""

from __future__ import annotations

import argparse
import re
from typing import Any

from computewatch.cli import args as cli_args

__all__ = ["add_profile_parser", "add_profile_run_arguments", "step_range"]

_RANGE = re.compile(r"^\s*(\d+)\s*:\s*(\d+)\s*$")


def step_range(text: str) -> tuple[int, int]:
    """``A:B``: steps A to B (counted from 1, B included, A <= B)."""
    m = _RANGE.match(text)
    if m is None:
        raise argparse.ArgumentTypeError(f"not a step range A:B (e.g. 10:20): {text!r}")
    a, b = int(m.group(1)), int(m.group(2))
    if a < 1 or b < a:
        raise argparse.ArgumentTypeError(
            f"steps are counted from 1 and A <= B, not {text!r} (e.g. 10:20)"
        )
    return a, b


def add_profile_run_arguments(r: Any) -> None:
    """``run``'s profiler flags."""
    g = r.add_argument_group("profilers (linked to the run; docs/observability.md)")
    g.add_argument(
        "--profile-steps",
        type=step_range,
        metavar="A:B",
        help="run the PyTorch Profiler around steps A to B of the job (computewatch.track and "
        "computewatch.torch); a Chrome trace and the operator table are stored with the run",
    )
    g.add_argument(
        "--cprofile",
        action="store_true",
        help="run a Python command under cProfile (python -m cProfile); the statistics are "
        "stored with the run",
    )
    g.add_argument(
        "--nsys",
        action="store_true",
        help="wrap the command with Nsight Systems (nsys profile) and link its report",
    )


def add_profile_parser(sub: Any) -> None:
    """Add ``profile`` to the CLI's subcommands."""
    p = sub.add_parser(
        "profile",
        help="sample the Python stacks of a running run (py-spy): speedscope and flame graph",
        description="Sample the Python stacks of a running run's processes (or of any process "
        "by PID) with py-spy, write a speedscope profile and an SVG flame graph, and link them "
        "to the run (show, report). Needs the right to trace the process: root, its owner with "
        "kernel.yama.ptrace_scope = 0, or CAP_SYS_PTRACE.",
    )
    p.add_argument(
        "target", metavar="RUN|PID", help="a running run (id, prefix, name, 'last') or a PID"
    )
    p.add_argument(
        "--seconds",
        type=cli_args.seconds,
        default=10.0,
        metavar="N",
        help="how long to sample (default 10; whole seconds)",
    )
    p.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        help="the speedscope file (the SVG goes beside it, .svg), or the SVG when FILE ends in "
        ".svg (the profile goes beside it, .speedscope.json); default: the run's artifacts "
        "directory",
    )
    p.add_argument(
        "--rate", type=int, default=100, metavar="HZ", help="samples per second (default 100)"
    )
    p.add_argument(
        "--nonblocking",
        action="store_true",
        help="do not pause the process to sample it (less overhead, less exact stacks)",
    )
    p.add_argument(
        "--db",
        metavar="PATH",
        help="database file (default: $COMPUTEWATCH_HOME/computewatch.db)",
    )
