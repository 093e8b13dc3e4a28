"""The parsers of ``computewatch when`` and ``computewatch where`` (docs/carbon.md), and the
``run --start-when-green`` flags. Their commands live in ``computewatch.cli.carbon_run``, loaded
only when one runs (``--version`` and ``--help`` load none of the library)."""

from __future__ import annotations

import argparse
import re
from typing import Any

from computewatch.cli import args as cli_args

__all__ = ["add_carbon_parser", "add_green_start_arguments", "add_sci_argument"]

_PROVIDERS = ("electricitymaps", "watttime", "uk-carbon-intensity", "file")  # carbon.providers
SCI_UNITS = ("run", "step", "1M-tokens", "1k-inferences")  # carbon.sci


def _duration(text: str) -> float:
    t = text.strip()
    seconds = cli_args.duration_seconds(t.lstrip("-"))
    if seconds is not None and (t.startswith("-") or seconds <= 0):
        raise argparse.ArgumentTypeError(f"a duration must be more than 0, not {text!r}")
    if seconds is None:
        raise argparse.ArgumentTypeError(
            f"expected a duration such as 6h, 90m, 45s or 2d, not {text!r}"
        )
    return seconds


def _kwh(text: str) -> float:
    v = cli_args.number(text, "a number of kWh")
    if v <= 0:
        raise argparse.ArgumentTypeError(f"must be more than 0 kWh, not {text}")
    return v


def _g_per_kwh(text: str) -> float:
    v = cli_args.number(text, "a number of gCO2e/kWh")
    if v < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, not {text}")
    return v


def _usd(text: str) -> float:
    v = cli_args.number(text, "a price in dollars per kWh")
    if v < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, not {text}")
    return v


def _regions(text: str) -> list[str]:
    """Comma-separated region codes, each once (``FR,fr`` is FR once), in the order given."""
    codes: dict[str, str] = {}
    for c in (c.strip() for c in text.split(",")):
        if c:
            codes.setdefault(c.upper(), c)
    if not codes:
        raise argparse.ArgumentTypeError("expected a comma-separated list of region codes")
    return list(codes.values())


# A value such as -4h is an argument (then refused as negative), not an unknown option.
_NEGATIVE_DURATION = re.compile(r"^-\d+(\.\d+)?[a-zA-Z]*$")


def _negative_values_are_arguments(p: argparse.ArgumentParser) -> None:
    """``--duration -4h`` reaches the duration's check ("must be more than 0") instead of
    argparse's "expected one argument": argparse takes an argument that its negative-number
    pattern matches as a value when the parser has no option that looks like one. The pattern
    is an attribute of argparse's parser (CPython's Lib/argparse.py); without it, the flag's
    ``--duration=-4h`` form gives the same message."""
    if hasattr(p, "_negative_number_matcher"):
        p._negative_number_matcher = _NEGATIVE_DURATION


def _sci_unit(text: str) -> str:
    for u in SCI_UNITS:
        if u.lower() == text.strip().lower():
            return u
    raise argparse.ArgumentTypeError(f"expected one of {', '.join(SCI_UNITS)}, not {text!r}")


def _provider_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--provider",
        metavar="NAME",
        help=f"hourly intensity: {', '.join(_PROVIDERS)} (default: [carbon] provider; "
        "uk-carbon-intensity for GB regions; electricitymaps with a token)",
    )
    p.add_argument(
        "--provider-region",
        metavar="CODE",
        help="the provider's own region code when it differs (WattTime: CAISO_NORTH ...)",
    )
    p.add_argument("--config", metavar="FILE", help="configuration file")


def add_carbon_parser(sub: Any) -> None:
    """``when`` and ``where``."""
    w = sub.add_parser(
        "when",
        help="the start time that minimises a job's emissions over the intensity forecast",
        description="Find the start within --within that minimises the forecast emissions of "
        "a job of --duration, the saving against starting now, and a chart of the forecast.",
    )
    w.add_argument("--duration", type=_duration, required=True, metavar="DURATION")
    src = w.add_mutually_exclusive_group()
    src.add_argument("--region", metavar="CODE", help="FR, GB, aws:eu-north-1, DE ...")
    src.add_argument(
        "--intensity-file",
        metavar="FILE",
        help="CSV or Parquet with time,g_per_kwh (ISO 8601 times; no offset means UTC)",
    )
    w.add_argument(
        "--within",
        type=_duration,
        default=48 * 3600.0,
        metavar="DURATION",
        help="latest start, from now (default 48h)",
    )
    w.add_argument(
        "--now", metavar="TIME", help="the current time, ISO 8601 (reproducible plans, tests)"
    )
    w.add_argument(
        "--energy",
        type=_kwh,
        default=1.0,
        metavar="KWH",
        help="the job's energy, for the saving in grams (default 1 kWh, spread evenly)",
    )
    w.add_argument("--json", action="store_true", help="JSON output (times in ISO 8601 UTC)")
    _provider_args(w)
    _negative_values_are_arguments(w)

    r = sub.add_parser(
        "where",
        help="emissions and cost of the same job across regions (intensity, PUE, price)",
        description="Compare a job of --energy kWh (IT energy) across data-centre regions: "
        "each region's grid intensity, its provider's PUE and a price per kWh (yours, else "
        "the dated figure of the package's price table for the region's grid, else none).",
    )
    r.add_argument("--duration", type=_duration, required=True, metavar="DURATION")
    r.add_argument("--energy", type=_kwh, required=True, metavar="KWH", help="IT energy, kWh")
    r.add_argument(
        "--regions",
        type=_regions,
        required=True,
        metavar="LIST",
        help="comma-separated: aws:us-east-1,aws:eu-north-1,gcp:europe-west4,FR ...",
    )
    r.add_argument(
        "--usd-per-kwh",
        type=_usd,
        metavar="USD",
        help="one electricity price for every region (wins over the table)",
    )
    r.add_argument(
        "--prices", metavar="FILE", help="CSV region,usd_per_kwh: a price per region (wins)"
    )
    r.add_argument(
        "--forecast",
        action="store_true",
        help="use each region's forecast mean over the next --duration from the provider "
        "instead of the yearly average",
    )
    r.add_argument("--json", action="store_true", help="JSON output")
    _provider_args(r)
    _negative_values_are_arguments(r)


def add_green_start_arguments(p: argparse.ArgumentParser) -> None:
    """``run --start-when-green [--max-delay 12h] [--threshold G_PER_KWH]`` and ``--sci-unit``."""
    g = p.add_argument_group("carbon-aware start (docs/carbon.md)")
    g.add_argument(
        "--start-when-green",
        action="store_true",
        help="wait (saying why and until when) for the forecast's best window or --threshold",
    )
    g.add_argument(
        "--max-delay",
        type=_duration,
        default=12 * 3600.0,
        metavar="DURATION",
        help="with --start-when-green: wait at most this long (default 12h)",
    )
    g.add_argument(
        "--threshold",
        type=_g_per_kwh,
        metavar="G_PER_KWH",
        help="with --start-when-green: start at the first time the forecast is at or below it",
    )
    g.add_argument(
        "--expected-duration",
        type=_duration,
        default=3600.0,
        metavar="DURATION",
        help="with --start-when-green: the job's length for the best window (default 1h)",
    )
    g.add_argument(
        "--intensity-file",
        metavar="FILE",
        help="with --start-when-green: the forecast from a CSV or Parquet file (time,g_per_kwh)",
    )


def add_sci_argument(p: argparse._ActionsContainer) -> None:
    """``--sci-unit`` for commands that account a run."""
    p.add_argument(
        "--sci-unit",
        type=_sci_unit,
        metavar="UNIT",
        help=f"the SCI's functional unit: {', '.join(SCI_UNITS)} (default: [carbon] sci_unit, "
        "else run)",
    )
