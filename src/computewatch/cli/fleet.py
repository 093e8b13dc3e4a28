"""``computewatch fleet``: the fleet report from Prometheus, as a table, JSON or an HTML page.

The argparse setup and the command live here so the main CLI only wires them in. Errors the
user can fix (no Prometheus, a bad URL, an empty window, a bad option) are printed as one line
and give exit status 1 (2 for a bad option), without a traceback.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from rich.table import Table
from rich.text import Text

from computewatch.cli import args as cli_args
from computewatch.config import ConfigError, load_config
from computewatch.metrics.model import GROUPINGS
from computewatch.views.text import add_row, format_grams, format_kwh, format_usd, make_console

__all__ = ["add_fleet_parser", "cmd_fleet", "parse_time", "print_fleet"]

PROG = "computewatch"


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
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="how long to wait for each query (default 30)",
    )


def _fail(message: str, code: int = 1) -> int:
    print(f"{PROG}: {message}", file=sys.stderr)
    return code


def cmd_fleet(args: argparse.Namespace) -> int:
    """Run ``computewatch fleet``; returns the exit status."""
    from computewatch.fleet.promql import PrometheusClient, PromQLError
    from computewatch.fleet.report import FleetError, FleetOptions, fleet_charts, fleet_report

    now = time.time()
    try:
        cfg = load_config(args.config)
    except ConfigError as e:
        return _fail(str(e), 2)
    end = parse_time(args.until, now=now) if args.until else now
    start = parse_time(args.since, now=now, before=end)
    if not end > start:
        return _fail(f"--since must be before --until (the window from {args.since} is empty)", 2)
    if end > now + 60:
        return _fail("--until is in the future", 2)
    if not (args.timeout > 0 and math.isfinite(args.timeout)):
        return _fail("--timeout must be a positive number of seconds", 2)
    headers: dict[str, str] = {}
    if args.bearer_token_file:
        try:
            token = Path(args.bearer_token_file).expanduser().read_text().strip()
        except OSError as e:
            return _fail(f"cannot read {args.bearer_token_file}: {e.strerror or e}")
        headers["Authorization"] = f"Bearer {token}"
    opts = FleetOptions(
        start=start,
        end=end,
        by=args.by,
        gpu_hour_usd=args.gpu_hour_usd,
        instance_type=args.instance_type,
        region=args.region,
        pue=args.pue,
        config=cfg,
    )
    try:
        client = PrometheusClient(args.prometheus, timeout=args.timeout, headers=headers)
        report = fleet_report(client, opts)
        charts = fleet_charts(client, opts, report) if args.html else None
    except (FleetError, PromQLError) as e:
        return _fail(str(e))
    if args.html:
        from computewatch.views.html.fleet import write_fleet_html

        assert charts is not None
        try:
            written = write_fleet_html(report, charts, args.html)
        except OSError as e:
            return _fail(f"cannot write {args.html}: {e.strerror or e}")
        print(f"wrote {written}", file=sys.stderr)
    if args.json:
        json.dump(report, sys.stdout, indent=2, allow_nan=False)
        sys.stdout.write("\n")
    else:
        print_fleet(report, sys.stdout)
    return 0


def _hours(v: Any) -> str:
    return "n/a" if v is None else f"{float(v):,.1f}"


def print_fleet(report: dict[str, Any], out: TextIO) -> None:
    """The report as a table (one row per group and the total), then how it was computed."""
    con = make_console(out)
    w = report["window"]
    con.print(
        Text(
            f"fleet by {report['by']} · {w['start'][:19].replace('T', ' ')} to "
            f"{w['end'][:19].replace('T', ' ')} UTC · {report['prometheus']}",
            style="bold",
        )
    )
    t = Table(box=None, pad_edge=False)
    t.add_column(report["by"], no_wrap=True)
    for col in (
        "GPU-h",
        "idle GPU-h",
        "idle",
        "mean util",
        "facility energy",
        "cost",
        "carbon",
        "jobs",
    ):
        t.add_column(col, justify="right")
    for g in [*report["groups"], report["total"]]:
        label = g["label"] + (
            " (simulated)" if g["simulated"] and report["by"] != "gpu-model" else ""
        )
        idle = g["idle_share"]
        util = g["utilization_mean"]["value"]
        add_row(
            t,
            Text(label, style="bold") if g is report["total"] else label,
            _hours(g["gpu_hours"]["value"]),
            _hours(g["idle_gpu_hours"]["value"]),
            "n/a" if idle is None else f"{100 * idle:.1f}%",
            "n/a" if util is None else f"{100 * util:.1f}%",
            format_kwh(g["energy_facility_kwh"].get("value")),
            format_usd(g["cost_usd"].get("value")),
            format_grams(g["carbon_gco2e"].get("value")),
            str(g["jobs"]),
        )
    con.print(t)
    info = Table(show_header=False, box=None, pad_edge=False)
    info.add_column("what", style="bold")
    info.add_column("how")
    carbon = report["carbon"]
    pue = carbon["pue"]
    inten = carbon["intensity"]
    add_row(info, "energy", f"at the facility: IT energy x PUE {pue['value']:g} ({pue['source']})")
    add_row(
        info,
        "carbon",
        f"{inten['g_per_kwh']:g} gCO2e/kWh, {inten['name']} ({inten['region']}, found by "
        f"{inten['how']}; {inten['source']}) ±{inten['relative_uncertainty']:.0%}",
    )
    for model, rate in report["prices"].items():
        if rate is None:
            add_row(info, "price", f"{model}: no price known")
        else:
            add_row(info, "price", f"{model}: ${rate['usd']:.2f}/GPU-hour · {rate['method']}")
    add_row(
        info,
        "method",
        "GPU-hours, idle GPU-hours, utilization and energy from the agents' job counters "
        "(PromQL increase over the window); --json gives every method and query",
    )
    for n in report["notes"]:
        add_row(info, "note", Text(n, style="yellow"))
    con.print(info)
