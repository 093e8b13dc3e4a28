"""``computewatch fleet``: the report from Prometheus as a table, JSON or an HTML page (the
flags are in :mod:`computewatch.cli.fleet`; the CLI loads this module only when it runs)."""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from rich.table import Table
from rich.text import Text

from computewatch import jsonout
from computewatch.cli.fleet import parse_time
from computewatch.config import ConfigError, load_config
from computewatch.errors import ComputewatchError, UsageError
from computewatch.fleet.promql import PrometheusClient
from computewatch.fleet.report import FleetOptions, fleet_charts, fleet_report
from computewatch.paths import check_private_file
from computewatch.units import format_grams, format_kwh, format_number, format_percent, format_usd
from computewatch.views.text import add_row, make_console

__all__ = ["cmd_fleet", "print_fleet"]


def cmd_fleet(args: argparse.Namespace) -> int:
    """Run ``computewatch fleet``; returns the exit status."""
    now = time.time()
    try:
        cfg = load_config(args.config)
    except ConfigError as e:
        raise UsageError(str(e)) from None
    end = parse_time(args.until, now=now) if args.until else now
    start = parse_time(args.since, now=now, before=end)
    if not end > start:
        raise UsageError(f"--since must be before --until (the window from {args.since} is empty)")
    if end > now + 60:
        raise UsageError("--until is in the future")
    if not (args.timeout > 0 and math.isfinite(args.timeout)):
        raise UsageError("--timeout must be a positive number of seconds")
    headers: dict[str, str] = {}
    if args.bearer_token_file:
        token_file = Path(args.bearer_token_file).expanduser()
        check_private_file(token_file, "token file (--bearer-token-file)", UsageError)
        try:
            token = token_file.read_text().strip()
        except OSError as e:
            raise ComputewatchError(
                f"cannot read {args.bearer_token_file}: {e.strerror or e}"
            ) from None
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
    # FleetError and PromQLError go up to main: one line, status 1
    client = PrometheusClient(args.prometheus, timeout=args.timeout, headers=headers)
    report = fleet_report(client, opts)
    charts = fleet_charts(client, opts, report) if args.html else None
    if args.html:
        from computewatch.views.html.fleet import write_fleet_html  # only with --html

        assert charts is not None
        try:
            written = write_fleet_html(report, charts, args.html)
        except OSError as e:
            raise ComputewatchError(f"cannot write {args.html}: {e.strerror or e}") from None
        print(f"wrote {written}", file=sys.stderr)
    if args.json:
        jsonout.dump(report, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print_fleet(report, sys.stdout)
    return 0


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
            format_number(g["gpu_hours"]["value"]),
            format_number(g["idle_gpu_hours"]["value"]),
            format_percent(idle),
            format_percent(util),
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
