"""``computewatch goodput``'s parser, and ``run --start-step``'s type: loaded with the CLI,
so this module imports nothing of the library."""

from __future__ import annotations

import argparse
from typing import Any

from computewatch.escape import clean_text


def start_step(text: str) -> int:
    """A training step: a whole number of at least 0."""
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be at least 0, not {v}")
    return v


def add_goodput_parser(sub: Any) -> argparse.ArgumentParser:
    """Add ``goodput`` to the CLI's subcommands."""
    p: argparse.ArgumentParser = sub.add_parser(
        "goodput",
        help="a training's goodput across its runs: productive time and what was lost",
        description="The runs of one model (declared with run --model) or one job (tagged "
        "job=KEY), in time order, as one training: goodput (productive step time over the "
        "time from the first run's start to the last run's end) and badput by category "
        "(initialization, data_wait, checkpoint_save, lost_progress, restart_gap, idle) in "
        "seconds, share, GPU-hours, energy and cost; the same per run; and the checkpoint "
        "interval that the measured failure rate and checkpoint time call for (Young/Daly). "
        "docs/diagnosis.md, 'Goodput'.",
    )
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--model", type=clean_text, metavar="M", help="the model's runs")
    which.add_argument("--job", type=clean_text, metavar="KEY", help="the runs tagged job=KEY")
    p.add_argument("--json", action="store_true", help="JSON output")
    p.add_argument(
        "--server",
        metavar="URL",
        help="ask a computewatch server (default: the local store; COMPUTEWATCH_SERVER or "
        "[server] url are used only with this flag)",
    )
    p.add_argument("--token", metavar="T", help="with --server: its token (COMPUTEWATCH_TOKEN)")
    p.add_argument(
        "--db",
        metavar="PATH",
        help="the local database file (default: $COMPUTEWATCH_HOME/computewatch.db, else "
        "~/.local/share/computewatch/computewatch.db)",
    )
    p.add_argument("--config", metavar="FILE", help="configuration file (for [server])")
    return p
