"""``computewatch when``, ``computewatch where`` and the wait of ``run --start-when-green``
(docs/carbon.md): thin layers over :mod:`computewatch.carbon`."""

from __future__ import annotations

import argparse
import csv
import dataclasses
import datetime as dt
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from computewatch.carbon.cache import CachedProvider
from computewatch.carbon.providers import (
    ELECTRICITYMAPS,
    FILE,
    UK,
    WATTTIME,
    FileProvider,
    IntensityProvider,
    make_provider,
    settings_from_config,
    uk_region,
)
from computewatch.carbon.records import (
    IntensityError,
    IntensitySeries,
    ProviderError,
    UnknownProviderError,
    parse_time,
    to_utc,
    utc_iso,
)
from computewatch.carbon.regions import RegionFigure, compare_regions, grid_row
from computewatch.carbon.window import WindowPlan, best_window, mean_intensity
from computewatch.config import Config, ConfigError, load_config
from computewatch.errors import PROG, ComputewatchError, UsageError
from computewatch.jsonout import dump
from computewatch.units import format_duration, format_grams, format_usd

__all__ = ["cmd_when", "cmd_where", "plan_green_start", "wait_for_green"]

_BAR = 40
CLOUD_PRICE_NOTE = (
    "cloud regions: the provider bills instance-hours, not kWh; the table's price is the "
    "grid's average price per kWh (what a facility there pays), to compare regions, not your bill"
)


def _config(args: argparse.Namespace) -> Config:
    try:
        return load_config(getattr(args, "config", None))
    except ConfigError as e:
        raise UsageError(str(e)) from None


def _now(text: str | None) -> dt.datetime:
    if not text:
        return dt.datetime.now(dt.UTC)
    try:
        return parse_time(text)
    except ValueError:
        raise UsageError(f"--now: {text!r} is not an ISO 8601 time") from None


@dataclasses.dataclass(frozen=True, slots=True)
class Source:
    provider: IntensityProvider
    name: str
    region: str


def resolve_source(
    cfg: Config,
    *,
    region: str | None,
    intensity_file: str | None,
    provider: str | None,
    provider_region: str | None,
) -> Source:
    """The provider and region to ask; UsageError (with close matches) for a bad one."""
    if intensity_file:
        return Source(FileProvider(Path(intensity_file).expanduser()), FILE, "file")
    name = provider or cfg.carbon_provider
    code = region or cfg.region
    if region is not None:
        grid_row(region)  # an unknown code: an error with its close matches, first
    if name is None:
        if code is not None and _is_gb(code):
            name = UK
        elif cfg.electricitymaps_token:
            name = ELECTRICITYMAPS
        else:
            raise UsageError(
                "no hourly intensity to plan with: give --intensity-file FILE, --provider NAME "
                "(uk-carbon-intensity needs no account) or set [carbon] provider (docs/carbon.md)"
            )
    settings = settings_from_config(cfg)
    inner = make_provider(name, settings)
    where = provider_region or cfg.carbon_provider_region
    if name == FILE:
        return Source(inner, FILE, "file")
    if where is None:
        if name == WATTTIME:
            raise UsageError("WattTime needs --provider-region (a WattTime region: CAISO_NORTH)")
        if code is None:
            raise UsageError("give --region CODE (or set [location] region)")
        grid_row(code)  # an unknown code: its close matches
        if name == UK:
            uk_region(code)
        where = code
    return Source(CachedProvider(inner), name, where)


def _is_gb(code: str) -> bool:
    try:
        uk_region(code)
    except UnknownProviderError:
        return False
    return True


# -- when -------------------------------------------------------------------------------------


def _plan(
    args: argparse.Namespace, cfg: Config, now: dt.datetime
) -> tuple[WindowPlan, IntensitySeries, Source]:
    src = resolve_source(
        cfg,
        region=args.region,
        intensity_file=args.intensity_file,
        provider=args.provider,
        provider_region=args.provider_region,
    )
    try:
        series = src.provider.forecast(src.region, now)
    except ProviderError as e:
        raise ComputewatchError(
            f"{e}; without a forecast no start time can be planned (the yearly average is the "
            "same at every hour)"
        ) from None
    plan = best_window(series, args.duration, now, args.within, energy_kwh=args.energy)
    return plan, series, src


def cmd_when(args: argparse.Namespace) -> int:
    cfg = _config(args)
    now = _now(args.now)
    plan, series, src = _plan(args, cfg, now)
    if args.json:
        dump(when_json(plan, series, src, now, args.within), sys.stdout)
        return 0
    out = sys.stdout
    wait = (plan.start - now).total_seconds()
    when = "now" if wait < 1 else f"in {format_duration(wait)}"
    print(f"best start   {utc_iso(plan.start)} ({when}), ending {utc_iso(plan.end)}", file=out)
    print(
        f"intensity    {plan.mean_g_per_kwh:.1f} g/kWh over that window vs "
        f"{plan.now_mean_g_per_kwh:.1f} g/kWh starting now",
        file=out,
    )
    print(
        f"saving       {format_grams(plan.saving_g)} ({plan.saving_ratio:.1%}) for "
        f"{plan.energy_kwh:g} kWh spread evenly over {format_duration(plan.duration_s)}",
        file=out,
    )
    res = series.resolution_s or 0
    print(
        f"forecast     {series.provider}, {series.region}, every {format_duration(res)}, "
        f"{utc_iso(series.start or now)} to {utc_iso(series.end or now)}",
        file=out,
    )
    for n in (*series.notes, *plan.notes):
        print(f"note         {n}", file=out)
    print("", file=out)
    chart(series, plan, now, now + dt.timedelta(seconds=args.within + args.duration), out)
    return 0


def when_json(
    plan: WindowPlan, series: IntensitySeries, src: Source, now: dt.datetime, within: float
) -> dict[str, object]:
    return {
        "now": utc_iso(now),
        "start": utc_iso(plan.start),
        "end": utc_iso(plan.end),
        "duration_seconds": plan.duration_s,
        "within_seconds": within,
        "wait_seconds": max((plan.start - now).total_seconds(), 0.0),
        "mean_g_per_kwh": plan.mean_g_per_kwh,
        "now_mean_g_per_kwh": plan.now_mean_g_per_kwh,
        "saving_g_per_kwh": plan.saving_g_per_kwh,
        "saving_percent": plan.saving_ratio * 100,
        "energy_kwh": plan.energy_kwh,
        "saving_g": plan.saving_g,
        "best_g": plan.best_g,
        "now_g": plan.now_g,
        "covered_ratio": plan.covered_ratio,
        "provider": series.provider,
        "region": series.region,
        "resolution_seconds": series.resolution_s,
        "notes": [*series.notes, *plan.notes],
        "forecast": [
            {
                "time": utc_iso(p.time),
                "g_per_kwh": p.g_per_kwh,
                "resolution_seconds": p.resolution_s,
                "kind": p.kind,
                "provider": p.provider,
            }
            for p in series.points
        ],
    }


def chart(
    series: IntensitySeries,
    plan: WindowPlan,
    start: dt.datetime,
    end: dt.datetime,
    out: TextIO,
    max_rows: int = 48,
) -> None:
    """The forecast as one bar per row (hourly means when finer), ``*`` in the best window."""
    pts = series.between(start, end).points
    if not pts:
        return
    step = 3600 if (series.resolution_s or 3600) < 3600 else series.resolution_s or 3600
    rows: dict[int, list[float]] = {}
    for p in pts:
        key = int(p.time.timestamp() // step)
        rows.setdefault(key, []).append(p.g_per_kwh)
    keys = sorted(rows)
    while len(keys) > max_rows:  # merge pairs of rows until it fits
        step *= 2
        merged: dict[int, list[float]] = {}
        for k in keys:
            merged.setdefault(k // 2, []).extend(rows[k])
        rows, keys = merged, sorted(merged)
    means = {k: sum(v) / len(v) for k, v in rows.items()}
    top = max(means.values()) or 1.0
    w0, w1 = plan.start.timestamp(), plan.end.timestamp()
    for k in keys:
        t = k * step
        mark = "*" if t + step > w0 and t < w1 else " "
        bar = "#" * max(1, round(means[k] / top * _BAR))
        stamp = dt.datetime.fromtimestamp(t, dt.UTC).strftime("%m-%d %H:%M")
        print(f"{stamp}Z {mark} {means[k]:7.1f} {bar}", file=out)
    print(f"(g/kWh; * = best window; {series.provider})", file=out)


# -- where ------------------------------------------------------------------------------------


def _prices(path: str) -> dict[str, float]:
    p = Path(path).expanduser()
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"--prices: cannot read {p}: {e}") from None
    out: dict[str, float] = {}
    rows = csv.reader(line for line in text.splitlines() if line.strip() and line[0] != "#")
    for i, row in enumerate(rows, start=1):
        if i == 1 and row and row[0].strip().lower() == "region":
            continue
        try:
            code, value = row[0].strip(), float(row[1])
        except (IndexError, ValueError):
            raise UsageError(f"--prices: {p}, row {i}: expected region,usd_per_kwh") from None
        if not 0 <= value < 1e3:
            raise UsageError(f"--prices: {p}, row {i}: {value} is not a price per kWh")
        out[grid_row(code).code] = value
    return out


def cmd_where(args: argparse.Namespace) -> int:
    cfg = _config(args)
    prices = _prices(args.prices) if args.prices else {}
    default = args.usd_per_kwh if args.usd_per_kwh is not None else cfg.usd_per_kwh
    source = "--usd-per-kwh" if args.usd_per_kwh is not None else "[cost] usd_per_kwh"
    rows_in = [grid_row(c).code for c in args.regions]  # unknown codes: close matches
    intensities: dict[str, tuple[float, str]] = {}
    notes: list[str] = []
    if args.forecast:
        now = dt.datetime.now(dt.UTC)
        if args.provider:  # an unknown name: one error with close matches, not a note a region
            make_provider(args.provider, settings_from_config(cfg))
        for code in rows_in:
            try:
                src = resolve_source(
                    cfg,
                    region=code,
                    intensity_file=None,
                    provider=args.provider,
                    provider_region=args.provider_region,
                )
                s = src.provider.forecast(src.region, now)
                window = s.between(now, now + dt.timedelta(seconds=args.duration))
                g = mean_intensity(window if window.points else s)
                intensities[code] = (g, f"{s.provider} forecast mean over the next run")
            except ComputewatchError as e:  # down, rate-limited, no provider for the region
                notes.append(f"{code}: no forecast ({e}); the yearly average is used")
    figs = compare_regions(
        rows_in,
        args.energy,
        prices=prices,
        prices_source=f"--prices {args.prices}",
        default_price=default,
        price_source=source,
        intensities=intensities,
    )
    if any(f.price_year is not None and ":" in f.region for f in figs):
        notes.append(CLOUD_PRICE_NOTE)
    if args.json:
        dump(
            {
                "energy_kwh": args.energy,
                "duration_seconds": args.duration,
                "regions": [dataclasses.asdict(f) for f in figs],
                "notes": notes,
            },
            sys.stdout,
        )
        return 0
    _where_table(figs, args.energy, args.duration, notes)
    return 0


def _where_table(figs: list[RegionFigure], kwh: float, duration: float, notes: list[str]) -> None:
    out = sys.stdout
    print(
        f"the same job ({kwh:g} kWh IT energy over {format_duration(duration)}) by region, "
        "lowest emissions first",
        file=out,
    )
    print(
        f"{'region':<22} {'g/kWh':>7} {'PUE':>5} {'kWh':>9} {'CO2e':>12} {'$/kWh':>7} {'cost':>10}",
        file=out,
    )
    for f in figs:
        kwh_price = "n/a" if f.usd_per_kwh is None else f"{f.usd_per_kwh:.4f}"
        print(
            f"{f.region:<22} {f.g_per_kwh:>7.0f} {f.pue:>5.2f} {f.facility_kwh:>9.3f} "
            f"{format_grams(f.g):>12} {kwh_price:>7} {format_usd(f.usd):>10}",
            file=out,
        )
    best, worst = figs[0], figs[-1]
    if worst.g > 0 and len(figs) > 1:
        print(
            f"\n{best.region} emits {1 - best.g / worst.g:.0%} less than {worst.region}", file=out
        )
    for f in figs:
        print(f"note  {f.region}: {f.intensity_source}; PUE {f.pue_source}", file=out)
        lead = "price " if f.usd_per_kwh is not None else ""
        print(f"note  {f.region}: {lead}{f.price_source}", file=out)
    for n in notes:
        print(f"note  {n}", file=out)


# -- run --start-when-green ---------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class GreenStart:
    """When to start and why."""

    start: dt.datetime
    reason: str


def plan_green_start(
    series: IntensitySeries,
    now: dt.datetime,
    max_delay: float,
    expected: float,
    threshold: float | None,
) -> GreenStart:
    """The earliest time at or below ``threshold`` within ``max_delay`` (if given), else the
    start of the best window of ``expected`` seconds within ``max_delay``."""
    now = to_utc(now)
    latest = now + dt.timedelta(seconds=max_delay)
    if threshold is not None:
        for p in series.points:
            if p.end <= now or p.time > latest:
                continue
            if p.g_per_kwh <= threshold:
                at = max(p.time, now)
                return GreenStart(
                    at,
                    f"the forecast reaches {p.g_per_kwh:g} g/kWh (at or below the threshold "
                    f"{threshold:g}) at {utc_iso(at)}",
                )
    plan = best_window(series, expected, now, max_delay)
    why = (
        f"the best {format_duration(expected)} window within {format_duration(max_delay)} "
        f"starts at {utc_iso(plan.start)}: {plan.mean_g_per_kwh:.0f} g/kWh vs "
        f"{plan.now_mean_g_per_kwh:.0f} now ({plan.saving_ratio:.0%} less)"
    )
    if threshold is not None:
        why = f"the forecast never reaches {threshold:g} g/kWh within the delay; {why}"
    return GreenStart(plan.start, why)


def wait_for_green(
    args: argparse.Namespace,
    cfg: Config,
    *,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.time,
    err: TextIO | None = None,
) -> None:
    """Wait before the job starts, saying why and until when; Ctrl-C stops the wait (the
    command is then not run). A provider that fails: say so and start now."""
    out = err or sys.stderr
    now = dt.datetime.fromtimestamp(clock(), dt.UTC)
    try:
        src = resolve_source(
            cfg,
            region=args.region,
            intensity_file=args.intensity_file,
            provider=None,
            provider_region=None,
        )
        series = src.provider.forecast(src.region, now)
        green = plan_green_start(
            series, now, args.max_delay, args.expected_duration, args.threshold
        )
    except (ProviderError, IntensityError) as e:
        print(f"{PROG}: no intensity forecast ({e}); starting now", file=out)
        return
    wait = (green.start - now).total_seconds()
    if wait < 1:
        print(f"{PROG}: starting now: {green.reason}", file=out)
        return
    print(
        f"{PROG}: waiting until {utc_iso(green.start)} (in {format_duration(wait)}) for a "
        f"greener grid: {green.reason}; Ctrl-C stops without running the command",
        file=out,
        flush=True,
    )
    deadline = clock() + wait
    while (left := deadline - clock()) > 0:
        sleep(min(left, 30.0))
    print(f"{PROG}: starting at {utc_iso(dt.datetime.now(dt.UTC))}", file=out)
