"""Hourly (or finer) grid carbon intensity, forecast and history, behind one interface.

Providers: Electricity Maps (API token), WattTime (account), the UK's public Carbon Intensity
API (no account) and a CSV or Parquet file of the user's. Each returns an
:class:`~computewatch.carbon.records.IntensitySeries` whose points say the provider, their time
resolution and whether they are a forecast or history. No call is made unless the user chose the
provider (docs/carbon.md: no network call unless configured); every network failure is a
:class:`~computewatch.carbon.records.ProviderError` with one line saying why.

Documented answers these clients read:

- Electricity Maps v3: ``GET /carbon-intensity/forecast?zone=Z`` -> ``{"zone": Z, "forecast":
  [{"carbonIntensity": g, "datetime": ISO}, ...]}``; ``GET /carbon-intensity/history?zone=Z``
  (last 24 h) -> ``{"history": [...]}`` and ``GET /carbon-intensity/past-range?zone=Z&start=&end=``
  -> ``{"data": [...]}``; header ``auth-token``; hourly points, lifecycle gCO2e/kWh.
- WattTime v3: ``GET /login`` with HTTP basic auth -> ``{"token": T}``; ``GET
  /v3/forecast?region=R&signal_type=co2_moer`` and ``GET /v3/historical?region=R&start=&end=
  &signal_type=co2_moer`` with ``Authorization: Bearer T`` -> ``{"data": [{"point_time": ISO,
  "value": v}], "meta": {"data_point_period_seconds": 300, "units": "lbs_co2_per_mwh"}}``. The
  MOER (marginal emissions rate) is in lb CO2/MWh: times 0.45359237 gives g/kWh. It is the
  marginal plant's rate, not the grid's average, and CO2 only: every figure says so.
- UK Carbon Intensity (National Grid ESO, api.carbonintensity.org.uk, no account): ``GET
  /intensity/{from}/fw48h`` and ``GET /intensity/{from}/{to}`` -> ``{"data": [{"from": ISO,
  "to": ISO, "intensity": {"forecast": g, "actual": g|null, "index": "low"}}]}``; half-hourly,
  Great Britain national figure, operational (not lifecycle) gCO2/kWh.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import difflib
import math
import os
import urllib.parse
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

import msgspec

from computewatch.carbon.http import check_base_url, get_json
from computewatch.carbon.intensity_file import read_intensity_file
from computewatch.carbon.records import (
    FORECAST,
    HISTORY,
    IntensityPoint,
    IntensitySeries,
    Kind,
    ProviderError,
    UnknownProviderError,
    parse_time,
    to_utc,
    utc_iso,
)
from computewatch.catalog.reference import grid_rows, normalize_code
from computewatch.config import Config
from computewatch.paths import check_private_file

__all__ = [
    "ELECTRICITYMAPS",
    "FILE",
    "LB_PER_MWH_TO_G_PER_KWH",
    "PROVIDERS",
    "UK",
    "WATTTIME",
    "ElectricityMapsProvider",
    "FileProvider",
    "IntensityProvider",
    "ProviderSettings",
    "UkCarbonIntensityProvider",
    "WattTimeProvider",
    "make_provider",
    "settings_from_config",
]

ELECTRICITYMAPS = "electricitymaps"
WATTTIME = "watttime"
UK = "uk-carbon-intensity"
FILE = "file"
PROVIDERS = (ELECTRICITYMAPS, WATTTIME, UK, FILE)

EM_DEFAULT_URL = "https://api.electricitymap.org/v3"
WATTTIME_DEFAULT_URL = "https://api.watttime.org"
UK_DEFAULT_URL = "https://api.carbonintensity.org.uk"
LB_PER_MWH_TO_G_PER_KWH = 0.45359237  # 1 lb = 453.59237 g (exact); 1 MWh = 1000 kWh


class IntensityProvider(Protocol):
    """A source of grid intensity over time for a region."""

    name: str

    def forecast(self, region: str, now: dt.datetime) -> IntensitySeries:
        """The forecast from about ``now`` on, as far as the provider gives it."""
        ...

    def history(self, region: str, start: dt.datetime, end: dt.datetime) -> IntensitySeries:
        """Measured (or, where the provider has no measurement yet, estimated) intensity over
        ``[start, end)``."""
        ...


@dataclasses.dataclass(frozen=True, slots=True)
class ProviderSettings:
    """What the providers need from the configuration and the environment."""

    electricitymaps_token: str | None = None
    electricitymaps_url: str = EM_DEFAULT_URL
    watttime_username: str | None = None
    watttime_password: str | None = None
    watttime_url: str = WATTTIME_DEFAULT_URL
    uk_url: str = UK_DEFAULT_URL
    intensity_file: Path | None = None
    timeout: float = 10.0

    def __repr__(self) -> str:  # never show a secret
        return (
            f"ProviderSettings(electricitymaps_url={self.electricitymaps_url!r}, "
            f"watttime_url={self.watttime_url!r}, uk_url={self.uk_url!r}, "
            f"intensity_file={self.intensity_file!r})"
        )


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    v = float(value)
    return v if math.isfinite(v) and v >= 0 else None


def _time(value: object) -> dt.datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return parse_time(value)
    except ValueError:
        return None


def _items(data: object, key: str, provider: str) -> list[Mapping[str, object]]:
    if not isinstance(data, dict):
        raise ProviderError(f"{provider}: the answer is not a JSON object")
    items = data.get(key)
    if not isinstance(items, list):
        raise ProviderError(f"{provider}: the answer has no {key!r} list")
    return [i for i in items if isinstance(i, dict)]


def _nonempty(series: IntensitySeries, provider: str, what: str) -> IntensitySeries:
    if not series.points:
        raise ProviderError(f"{provider} gave no usable intensity for {what}")
    return series


# -- Electricity Maps ---------------------------------------------------------------------------


def em_zone(region: str) -> str:
    """The Electricity Maps zone for a table code (``aws:eu-north-1`` -> ``SE-SE3``) or a zone
    the table knows; UnknownProviderError with close matches otherwise."""
    rows = grid_rows()
    row = rows.get(normalize_code(region))
    if row is not None and row.zone:
        return row.zone
    zones = {r.zone for r in rows.values() if r.zone}
    if region.strip() in zones:
        return region.strip()
    raise UnknownProviderError(
        f"unknown region {region!r} for Electricity Maps; "
        + _suggest(region, [*rows, *sorted(zones)])
    )


def _suggest(text: str, choices: list[str]) -> str:
    folded = {c.casefold(): c for c in choices}
    hits = difflib.get_close_matches(text.strip().casefold(), list(folded), n=5, cutoff=0.6)
    if not hits:
        return "no close match"
    return "close matches: " + ", ".join(folded[h] for h in hits)


class ElectricityMapsProvider:
    """Electricity Maps v3 forecast, history and past range (token required)."""

    name = ELECTRICITYMAPS

    def __init__(self, token: str, base_url: str = EM_DEFAULT_URL, timeout: float = 10.0) -> None:
        if not token:
            raise UnknownProviderError(
                "Electricity Maps needs a token: set [carbon] electricitymaps_token"
            )
        self._token = token
        self.base_url = check_base_url(base_url, "Electricity Maps")
        self.timeout = timeout

    def __repr__(self) -> str:
        return f"ElectricityMapsProvider(base_url={self.base_url!r})"

    def _get(self, path: str, query: dict[str, str], zone: str) -> object:
        url = f"{self.base_url}{path}?{urllib.parse.urlencode(query)}"
        return get_json(
            url,
            provider="Electricity Maps",
            what=f"zone {zone!r}",
            headers={"auth-token": self._token},
            timeout=self.timeout,
        )

    def _series(self, zone: str, items: list[Mapping[str, object]], kind: Kind) -> IntensitySeries:
        pts = []
        for item in items:
            t, g = _time(item.get("datetime")), _number(item.get("carbonIntensity"))
            if t is not None and g is not None:
                pts.append(IntensityPoint(t, g, self.name, 3600, kind))
        notes = ("Electricity Maps: hourly, lifecycle gCO2e/kWh (grid average)",)
        return IntensitySeries.build(zone, self.name, pts, notes)

    def forecast(self, region: str, now: dt.datetime) -> IntensitySeries:
        zone = em_zone(region)
        data = self._get("/carbon-intensity/forecast", {"zone": zone}, zone)
        series = self._series(zone, _items(data, "forecast", "Electricity Maps"), FORECAST)
        return _nonempty(series, "Electricity Maps", f"zone {zone}")

    def history(self, region: str, start: dt.datetime, end: dt.datetime) -> IntensitySeries:
        zone = em_zone(region)
        if to_utc(start) >= dt.datetime.now(dt.UTC) - dt.timedelta(hours=24):
            data = self._get("/carbon-intensity/history", {"zone": zone}, zone)
            items = _items(data, "history", "Electricity Maps")
        else:
            q = {"zone": zone, "start": utc_iso(start), "end": utc_iso(end)}
            data = self._get("/carbon-intensity/past-range", q, zone)
            items = _items(data, "data", "Electricity Maps")
        return self._series(zone, items, HISTORY).between(start, end)


# -- WattTime -----------------------------------------------------------------------------------


class WattTimeProvider:
    """WattTime v3 MOER forecast and history (account required; token from ``/login``)."""

    name = WATTTIME

    def __init__(
        self,
        username: str,
        password: str,
        base_url: str = WATTTIME_DEFAULT_URL,
        timeout: float = 10.0,
    ) -> None:
        if not username or not password:
            raise UnknownProviderError(
                "WattTime needs an account: set WATTTIME_USERNAME and WATTTIME_PASSWORD, or "
                "[carbon] watttime_username and watttime_password_file"
            )
        self._auth = (username, password)
        self._token: str | None = None
        self.base_url = check_base_url(base_url, "WattTime")
        self.timeout = timeout

    def __repr__(self) -> str:
        return f"WattTimeProvider(base_url={self.base_url!r})"

    def _login(self) -> str:
        if self._token is None:
            data = get_json(
                f"{self.base_url}/login",
                provider="WattTime",
                what="the account",
                basic_auth=self._auth,
                timeout=self.timeout,
            )
            token = data.get("token") if isinstance(data, dict) else None
            if not isinstance(token, str) or not token:
                raise ProviderError("WattTime: /login answered without a token")
            self._token = token
        return self._token

    def _get(self, path: str, query: dict[str, str], region: str) -> object:
        url = f"{self.base_url}{path}?{urllib.parse.urlencode(query)}"
        return get_json(
            url,
            provider="WattTime",
            what=f"region {region!r}",
            headers={"Authorization": f"Bearer {self._login()}"},
            timeout=self.timeout,
        )

    def _series(self, region: str, data: object, kind: Kind) -> IntensitySeries:
        items = _items(data, "data", "WattTime")
        meta = data.get("meta") if isinstance(data, dict) else None
        meta = meta if isinstance(meta, dict) else {}
        period = meta.get("data_point_period_seconds")
        step = int(period) if isinstance(period, int) and period > 0 else 300
        units = meta.get("units", "lbs_co2_per_mwh")
        if units not in ("lbs_co2_per_mwh", None):
            raise ProviderError(f"WattTime: unexpected units {units!r} (expected lbs_co2_per_mwh)")
        pts = []
        for item in items:
            t, v = _time(item.get("point_time")), _number(item.get("value"))
            if t is not None and v is not None:
                pts.append(IntensityPoint(t, v * LB_PER_MWH_TO_G_PER_KWH, self.name, step, kind))
        notes = (
            "WattTime: marginal operating emissions rate (MOER, CO2 only) converted from lb/MWh "
            f"(x {LB_PER_MWH_TO_G_PER_KWH}); not the grid average the yearly table uses",
        )
        return IntensitySeries.build(region, self.name, pts, notes)

    def forecast(self, region: str, now: dt.datetime) -> IntensitySeries:
        data = self._get("/v3/forecast", {"region": region, "signal_type": "co2_moer"}, region)
        return _nonempty(self._series(region, data, FORECAST), "WattTime", f"region {region}")

    def history(self, region: str, start: dt.datetime, end: dt.datetime) -> IntensitySeries:
        q = {
            "region": region,
            "start": utc_iso(start),
            "end": utc_iso(end),
            "signal_type": "co2_moer",
        }
        data = self._get("/v3/historical", q, region)
        return self._series(region, data, HISTORY).between(start, end)


# -- UK Carbon Intensity ------------------------------------------------------------------------


def uk_region(region: str) -> str:
    """``GB`` for any table code on the GB grid; UnknownProviderError otherwise (the API's
    national figure is Great Britain's)."""
    code = normalize_code(region)
    row = grid_rows().get(code)
    if code == "GB" or (row is not None and "GB" in (row.grid, row.zone, row.code)):
        return "GB"
    gb = [c for c, r in grid_rows().items() if "GB" in (r.grid, r.zone, r.code)]
    raise UnknownProviderError(
        f"the UK Carbon Intensity API covers Great Britain only, not {region!r}; "
        f"use one of: {', '.join(gb[:8])}"
    )


def _uk_time(t: dt.datetime) -> str:
    return to_utc(t).strftime("%Y-%m-%dT%H:%MZ")


class UkCarbonIntensityProvider:
    """National Grid ESO's Carbon Intensity API for Great Britain (public, no account)."""

    name = UK

    def __init__(self, base_url: str = UK_DEFAULT_URL, timeout: float = 10.0) -> None:
        self.base_url = check_base_url(base_url, "UK Carbon Intensity")
        self.timeout = timeout

    def _series(self, data: object, kind: Kind) -> IntensitySeries:
        pts = []
        estimated = 0
        for item in _items(data, "data", "UK Carbon Intensity"):
            t, end = _time(item.get("from")), _time(item.get("to"))
            inten = item.get("intensity")
            if t is None or not isinstance(inten, dict):
                continue
            g = _number(inten.get("actual")) if kind == HISTORY else None
            if g is None:
                g = _number(inten.get("forecast"))
                estimated += kind == HISTORY
            if g is None:
                continue
            step = int((end - t).total_seconds()) if end is not None and end > t else 1800
            pts.append(IntensityPoint(t, g, self.name, step, kind))
        notes = ["UK Carbon Intensity: half-hourly, Great Britain, operational gCO2/kWh"]
        if estimated:
            notes.append(f"{estimated} half-hour(s) had no actual figure yet: forecast used")
        return IntensitySeries.build("GB", self.name, pts, notes)

    def forecast(self, region: str, now: dt.datetime) -> IntensitySeries:
        uk_region(region)
        url = f"{self.base_url}/intensity/{_uk_time(now)}/fw48h"
        data = get_json(url, provider="UK Carbon Intensity", what="that time", timeout=self.timeout)
        return _nonempty(self._series(data, FORECAST), "UK Carbon Intensity", "Great Britain")

    def history(self, region: str, start: dt.datetime, end: dt.datetime) -> IntensitySeries:
        uk_region(region)
        url = f"{self.base_url}/intensity/{_uk_time(start)}/{_uk_time(end)}"
        data = get_json(
            url, provider="UK Carbon Intensity", what="that range", timeout=self.timeout
        )
        return self._series(data, HISTORY).between(start, end)


# -- a file of the user's -----------------------------------------------------------------------


class FileProvider:
    """A CSV or Parquet file with ``time,g_per_kwh`` (ISO 8601 times), for one region: its
    points are the forecast from ``now`` on and the history before it."""

    name = FILE

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._series = read_intensity_file(self.path)

    def forecast(self, region: str, now: dt.datetime) -> IntensitySeries:
        s = self._series
        pts = [msgspec.structs.replace(p, kind=FORECAST) for p in s.points if p.end > to_utc(now)]
        if not pts:
            raise ProviderError(f"{self.path}: no intensity at or after {utc_iso(now)}")
        return IntensitySeries(region, s.provider, tuple(pts), s.notes)

    def history(self, region: str, start: dt.datetime, end: dt.datetime) -> IntensitySeries:
        s = self._series.between(start, end)
        pts = tuple(msgspec.structs.replace(p, kind=HISTORY) for p in s.points)
        return IntensitySeries(region, s.provider, pts, s.notes)


def make_provider(
    name: str,
    settings: ProviderSettings,
    *,
    environ: Mapping[str, str] = os.environ,
) -> IntensityProvider:
    """The provider ``name`` (one of :data:`PROVIDERS`), set up from ``settings``;
    UnknownProviderError with close matches for another name or missing credentials."""
    key = name.strip().lower()
    if key == ELECTRICITYMAPS:
        token = settings.electricitymaps_token or environ.get("ELECTRICITYMAPS_TOKEN", "")
        return ElectricityMapsProvider(token, settings.electricitymaps_url, settings.timeout)
    if key == WATTTIME:
        user = settings.watttime_username or environ.get("WATTTIME_USERNAME", "")
        password = settings.watttime_password or environ.get("WATTTIME_PASSWORD", "")
        return WattTimeProvider(user, password, settings.watttime_url, settings.timeout)
    if key == UK:
        return UkCarbonIntensityProvider(settings.uk_url, settings.timeout)
    if key == FILE:
        if settings.intensity_file is None:
            raise UnknownProviderError(
                "the file provider needs a file: --intensity-file FILE or [carbon] intensity_file"
            )
        return FileProvider(settings.intensity_file)
    raise UnknownProviderError(
        f"unknown carbon intensity provider {name!r}; {_suggest(name, list(PROVIDERS))} "
        f"(known: {', '.join(PROVIDERS)})"
    )


def settings_from_config(
    cfg: Config, *, intensity_file: Path | None = None, environ: Mapping[str, str] = os.environ
) -> ProviderSettings:
    """The providers' settings from the configuration; the WattTime password from
    ``[carbon] watttime_password_file`` (its first line; refused when other users could read or
    change it), else ``WATTTIME_PASSWORD``."""
    password = environ.get("WATTTIME_PASSWORD") or None
    if cfg.watttime_password_file is not None:
        check_private_file(cfg.watttime_password_file, "WattTime password file", ProviderError)
        try:
            password = cfg.watttime_password_file.read_text(encoding="utf-8").splitlines()[0]
        except (OSError, UnicodeDecodeError, IndexError) as e:
            raise ProviderError(
                f"cannot read the WattTime password file {cfg.watttime_password_file}: {e}"
            ) from None
    return ProviderSettings(
        electricitymaps_token=cfg.electricitymaps_token or environ.get("ELECTRICITYMAPS_TOKEN"),
        electricitymaps_url=cfg.electricitymaps_url or EM_DEFAULT_URL,
        watttime_username=cfg.watttime_username or environ.get("WATTTIME_USERNAME"),
        watttime_password=password,
        watttime_url=cfg.watttime_url or WATTTIME_DEFAULT_URL,
        uk_url=cfg.uk_carbon_intensity_url or UK_DEFAULT_URL,
        intensity_file=intensity_file or cfg.intensity_file,
    )
