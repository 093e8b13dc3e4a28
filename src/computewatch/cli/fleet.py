"""``computewatch fleet``: the fleet report from Prometheus, as a table, JSON or an HTML page.

The flags live here; the command is :mod:`computewatch.cli.fleet_run`, loaded only when it runs.
Errors the user can fix (no Prometheus, a bad URL, an empty window, a bad option) are printed as
one line and give exit status 1 (2 for a bad option), without a traceback.
"""

from __future__ import annotations

import argparse
import math
import time
from datetime import UTC, datetime
from typing import Any

from computewatch.cli import args as cli_args
from computewatch.cli.args import GROUPINGS

__all__ = ["add_fleet_parser", "parse_time"]


def parse_time(text: str, *, now: float, before: float | None = None) -> float:
    """A point in time as Unix seconds: a duration (``7d``, ``90m``) back from ``before``
    (default ``now``), Unix seconds, or an ISO 8601 date or time (UTC unless it says)."""
    back = cli_args.duration_seconds(text)
    if back is not None:
        return (before if before is not None else now) - back
    try:
        v = float(text)
    except ValueError:
        pass
    else:
        if math.isfinite(v) and v > 0:
            return v
    try:
        dt = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a duration (7d, 12h, 90m), Unix seconds or an ISO 8601 time, not {text!r}"
        ) from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.timestamp()


def _when(text: str) -> str:
    parse_time(text, now=time.time())  # checked now; resolved against --until in cmd_fleet
    return text


def _usd_arg(text: str) -> float:
    v = cli_args.number(text)
    if not (math.isfinite(v) and v >= 0):
        raise argparse.ArgumentTypeError(f"must be a price of zero or more, not {text}")
    return v


def add_fleet_parser(sub: Any) -> None:
    """Add ``fleet`` to the CLI's subcommands (``sub``: the ``add_subparsers`` object)."""
    p = sub.add_parser(
        "fleet",
        help="GPU-hours, utilization, idle time, energy, cost and carbon per job, user, team "
        "or GPU model, from Prometheus",
        description="A fleet report from the Prometheus that scrapes computewatch agents "
        "(docs/fleet.md).",
    )
    p.add_argument(
        "--prometheus",
        required=True,
        metavar="URL",
        help="the Prometheus server, e.g. http://127.0.0.1:9090",
    )
    p.add_argument(
        "--since",
        type=_when,
        default="7d",
        metavar="WHEN",
        help="start: a duration back from --until (7d, 12h, 90m), Unix seconds or an ISO time "
        "(default 7d)",
    )
    p.add_argument(
        "--until",
        type=_when,
        default=None,
        metavar="WHEN",
        help="end: a duration back from now, Unix seconds or an ISO time (default now)",
    )
    p.add_argument(
        "--by", choices=GROUPINGS, default="team", help="how to group the jobs (default team)"
    )
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--html", metavar="FILE", help="also write a self-contained HTML report")
    p.add_argument(
        "--gpu-hour-usd",
        type=_usd_arg,
        metavar="USD",
        help="price of a GPU-hour (default: configuration, else the catalog by GPU model)",
    )
    p.add_argument(
        "--instance-type",
        metavar="PROVIDER:TYPE",
        help="price GPU-hours as this catalog instance's price per GPU (aws:p5.48xlarge)",
    )
    p.add_argument(
        "--region", metavar="CODE", help="the fleet's grid region for carbon (FR, US-CA, ...)"
    )
    p.add_argument("--pue", type=cli_args.pue, metavar="X", help="the facility's PUE")
    p.add_argument("--config", metavar="FILE", help="configuration file (docs/configuration.md)")
    p.add_argument(
        "--bearer-token-file",
        metavar="FILE",
        help="send the token in FILE as 'Authorization: Bearer' to Prometheus",
    )
    p.add_argument(
        "--timeout",
        type=cli_args.seconds,
        default=30.0,
        metavar="SECONDS",
        help="how long to wait for each query (default 30)",
    )
