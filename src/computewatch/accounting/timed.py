"""Carbon with time: a run's operational carbon summed over its hours from a provider's hourly
intensity, and its SCI score (docs/carbon.md).

The run's facility energy is spread over time as its accelerators drew it where their energy
counters were stored (the GPU/TPU part, by the counters' increments), and evenly over the run
for the rest (CPU, memory, server: their counters are not per-tick reliable enough to matter
next to the hourly resolution). Every figure says which.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import msgspec

from computewatch.analysis.summary_types import HourlyCarbon, RunSummary
from computewatch.carbon.records import IntensityError, utc_iso
from computewatch.carbon.sci import SciScore, UnitCount, canonical_unit, sci_score
from computewatch.config import Config
from computewatch.records import Figure
from computewatch.store import RunRow, Store

if TYPE_CHECKING:  # types only: the providers load with a [carbon] provider (hourly_carbon)
    from computewatch.carbon.providers import IntensityProvider, ProviderSettings
    from computewatch.carbon.timed import EnergyInterval, TimedCarbon

__all__ = ["HourlyResult", "energy_profile", "hourly_carbon", "run_sci", "sci_units"]

J_PER_KWH = 3.6e6
_MAX_INTERVALS = 2000  # the profile's resolution: a 24 h run at 1 s ticks is read every ~43 s

ProviderFactory = Callable[[str, "ProviderSettings"], "IntensityProvider"]


class HourlyResult(msgspec.Struct, frozen=True):
    carbon: TimedCarbon
    section: HourlyCarbon
    notes: tuple[str, ...]


def energy_profile(
    store: Store, run: RunRow, facility_kwh: float, accel_facility_kwh: float
) -> tuple[list[EnergyInterval], str]:
    """The run's facility energy as intervals over wall time, and how it was spread."""
    from computewatch.carbon.timed import EnergyInterval  # hourly carbon only: see hourly_carbon

    bounds = store.tick_bounds(run.key)
    if bounds is None or bounds[1][2] <= bounds[0][2]:
        start = run.started_at
        end = run.ended_at or run.data_until or start
        return [EnergyInterval(start, max(end, start), facility_kwh)], "evenly (no ticks stored)"
    (first, _, w0), (last, _, w1) = bounds
    stride = max(1, (last - first) // _MAX_INTERVALS)
    ticks = store.ticks(run.key, stride=stride)
    if ticks[-1][0] != last:
        ticks.append((last, bounds[1][1], w1))
    rest = max(facility_kwh - accel_facility_kwh, 0.0)
    out = [EnergyInterval(w0, w1, rest)] if rest > 0 else []
    how = "evenly over the run"
    series = [s.idx for s in store.series(run.key) if s.name == "gpu_energy_joules_total"]
    if accel_facility_kwh > 0 and series:
        pts = store.points_of(run.key, series, stride=stride)
        seqs = [t[0] for t in ticks]
        wall = {t[0]: t[2] for t in ticks}
        inc = [0.0] * len(ticks)
        for values in pts.values():
            by_seq = dict(values)
            prev = None
            for i, seq in enumerate(seqs):
                v = by_seq.get(seq)
                if v is None:
                    continue
                if prev is not None and v >= prev:
                    inc[i] += v - prev
                prev = v
        total = sum(inc)
        if total > 0:
            for i in range(1, len(seqs)):
                if inc[i] > 0:
                    kwh = accel_facility_kwh * inc[i] / total
                    out.append(EnergyInterval(wall[seqs[i - 1]], wall[seqs[i]], kwh))
            return out, "accelerators' energy by their counters' increments, the rest evenly"
    if accel_facility_kwh > 0:
        out.append(EnergyInterval(w0, w1, accel_facility_kwh))
    return out, how


def hourly_carbon(
    store: Store,
    run: RunRow,
    cfg: Config,
    location_code: str,
    facility_kwh: float,
    accel_facility_kwh: float,
    fallback_g_per_kwh: float,
    *,
    environ: Mapping[str, str],
    factory: ProviderFactory | None = None,
) -> HourlyResult:
    """The run's operational carbon over time from ``cfg.carbon_provider``. Raises
    IntensityError (ProviderError included) when the provider cannot give it: the caller keeps
    the yearly figure and says why."""
    # only with a [carbon] provider: a run without one (most runs) never loads the providers,
    # their HTTP client and cache (start-up of `run`, benchmarks/bench_end.py)
    from computewatch.carbon.cache import CachedProvider
    from computewatch.carbon.providers import FILE, WATTTIME, make_provider, settings_from_config
    from computewatch.carbon.timed import timed_carbon

    name = cfg.carbon_provider or FILE
    settings = settings_from_config(cfg, environ=environ)
    inner = (factory or make_provider)(name, settings)
    provider: IntensityProvider = CachedProvider(inner) if name != FILE else inner
    region = cfg.carbon_provider_region or location_code
    if name == WATTTIME and not cfg.carbon_provider_region:
        raise IntensityError(
            "WattTime needs its own region code: set [carbon] provider_region (e.g. CAISO_NORTH)"
        )
    start = dt.datetime.fromtimestamp(run.started_at, dt.UTC)
    end_t = run.ended_at or run.data_until or run.started_at
    end = dt.datetime.fromtimestamp(end_t, dt.UTC)
    # the hour containing the start and the one after the end: whole provider intervals
    series = provider.history(region, start - dt.timedelta(hours=1), end + dt.timedelta(hours=1))
    if not series.points:
        raise IntensityError(
            f"{name} has no intensity for {region} between {utc_iso(start)} and {utc_iso(end)}"
        )
    intervals, how = energy_profile(store, run, facility_kwh, accel_facility_kwh)
    carbon = timed_carbon(intervals, series, fallback_g_per_kwh)
    notes = list(series.notes)
    if carbon.covered_ratio < 0.999:
        notes.append(
            f"hourly data covered {carbon.covered_ratio:.0%} of the run's energy; the rest is "
            f"at the yearly {fallback_g_per_kwh:g} g/kWh"
        )
    section: HourlyCarbon = {
        "provider": series.provider,
        "region": series.region,
        "resolution_seconds": carbon.resolution_s,
        "kind": series.points[0].kind,
        "covered_ratio": round(carbon.covered_ratio, 6),
        "profile": how,
        "hours": [
            {
                "hour": utc_iso(h.hour),
                "kwh": h.kwh,
                "g_per_kwh": round(h.g_per_kwh, 3),
                "g": h.g,
            }
            for h in carbon.hours
        ],
    }
    return HourlyResult(carbon, section, tuple(notes))


def sci_units(summary: RunSummary, unit: str) -> UnitCount:
    """How many functional units ``unit`` the run had, and from what."""
    u = canonical_unit(unit)
    steps = summary.get("steps") or {"count": 0}
    requests = summary.get("requests")
    if u == "run":
        return UnitCount(1.0, "one run")
    if u == "step":
        n = steps.get("count") or 0
        return UnitCount(float(n) if n else None, f"{n} steps reported" if n else "no steps")
    if u == "1M-tokens":
        tokens = steps.get("tokens_total")
        if tokens:
            return UnitCount(float(tokens), "tokens reported with the steps")
        if requests:
            t = (requests.get("tokens_in_total") or 0) + (requests.get("tokens_out_total") or 0)
            if t:
                return UnitCount(float(t), "tokens in and out of the served requests")
        return UnitCount(None, "no tokens reported (step(tokens=N) or requests' tokens)")
    if requests and requests.get("count"):
        return UnitCount(float(requests["count"]), "served requests")
    samples = steps.get("samples_total")
    if samples:
        return UnitCount(float(samples), "samples reported with the steps")
    return UnitCount(None, "no requests or samples reported")


def _num(v: float | None) -> float:
    return float(v) if v is not None else 0.0


def run_sci(
    summary: RunSummary,
    unit: str,
    facility: Figure,
    operational: Figure,
    embodied: Figure | None,
    intensity_method: str,
) -> SciScore:
    """The run's SCI: ((E x I) + M) per R with E the facility energy, E x I the operational
    carbon already computed (hourly where known), M the embodied share (0 when off)."""
    m = (0.0, 0.0, 0.0)
    if embodied is not None:
        m = (_num(embodied["value"]), _num(embodied["low"]), _num(embodied["high"]))
    return sci_score(
        energy_kwh=_num(facility["value"]),
        operational_g=_num(operational["value"]),
        operational_low=_num(operational["low"]),
        operational_high=_num(operational["high"]),
        embodied_g=m[0],
        embodied_low=m[1],
        embodied_high=m[2],
        unit=unit,
        units=sci_units(summary, unit),
        intensity_method=intensity_method,
    )
