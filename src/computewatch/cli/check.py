"""``computewatch check``: a run's resources against a baseline run or file, for CI (exit 0
within limits, 1 on a regression, 2 for a usage error or a missing baseline). The command is
:mod:`computewatch.cli.check_run`."""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["add_check_parser"]


def _alpha(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        v = -1.0
    if not 0 < v < 1:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1, not {text!r}")
    return v


def add_check_parser(sub: Any) -> None:
    """Add ``check`` to the CLI's subcommands."""
    p = sub.add_parser(
        "check",
        help="gate a run's resources against a baseline (CI): exit 1 on a regression",
        description="Compare RUN's step time, memory, energy, cost ... with a baseline run or "
        "baseline file, each figure with its own uncertainty (step times by their samples, "
        "energy and cost by their low-high range). Exit 0 within limits, 1 on a regression or "
        "a figure missing on one side, 2 for a run or baseline that does not exist or cannot "
        "be read. Default limits: step_time_p50, peak_memory and energy_per_step +10%%.",
    )
    p.add_argument("run", metavar="RUN", help="id, unique id prefix, name, or 'last'")
    p.add_argument("--baseline", metavar="RUN|FILE", help="a run, or a baseline file (JSON)")
    p.add_argument(
        "--max",
        action="append",
        default=[],
        metavar="METRIC=+N%",
        help="repeatable: the most METRIC may grow, e.g. step_time_p50=+10%%",
    )
    p.add_argument(
        "--min",
        action="append",
        default=[],
        metavar="METRIC=-N%",
        help="repeatable, higher-is-better metrics: e.g. throughput=-5%%",
    )
    p.add_argument(
        "--noise-aware",
        action="store_true",
        help="step times: compare the two runs' step-time samples (Mann-Whitney U) rather "
        "than two numbers (the default; kept for scripts that give it)",
    )
    p.add_argument(
        "--values-only",
        action="store_true",
        help="step times: compare two numbers (the medians) without their samples' noise",
    )
    p.add_argument("--alpha", type=_alpha, default=0.01, help="significance, default 0.01")
    p.add_argument(
        "--write-baseline", metavar="FILE", help="write RUN's figures as a baseline file and exit"
    )
    p.add_argument("--json", action="store_true", help="JSON output")
    p.add_argument("--db", metavar="PATH", help="database file (default: as 'run')")
