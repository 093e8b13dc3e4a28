"""An on-disk cache of provider answers under ``$COMPUTEWATCH_HOME/carbon-cache``, with a TTL.

Forecasts change as providers re-run their models, so they are kept for ``forecast_ttl_s``
(default 15 minutes); history is kept for ``history_ttl_s`` (default 6 hours: recent hours are
revised as measurements arrive). A cache that cannot be read or written is skipped silently:
it only saves calls, it never decides a figure.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import time
from collections.abc import Callable
from pathlib import Path

from computewatch.carbon.providers import IntensityProvider
from computewatch.carbon.records import IntensityPoint, IntensitySeries, Kind, parse_time, utc_iso
from computewatch.paths import data_home, make_private_dirs

__all__ = ["CachedProvider", "default_cache_dir"]

FORECAST_TTL_S = 900.0
HISTORY_TTL_S = 6 * 3600.0


def default_cache_dir() -> Path:
    return data_home() / "carbon-cache"


class CachedProvider:
    """A provider whose answers are kept on disk for a while (same interface)."""

    def __init__(
        self,
        inner: IntensityProvider,
        cache_dir: Path | None = None,
        *,
        forecast_ttl_s: float = FORECAST_TTL_S,
        history_ttl_s: float = HISTORY_TTL_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.inner = inner
        self.name = inner.name
        self.dir = cache_dir if cache_dir is not None else default_cache_dir()
        self.forecast_ttl_s = forecast_ttl_s
        self.history_ttl_s = history_ttl_s
        self._clock = clock
        self.hits = 0

    def _path(self, *parts: str) -> Path:
        digest = hashlib.sha256("\0".join((self.name, *parts)).encode()).hexdigest()[:32]
        return self.dir / f"{self.name}-{digest}.json"

    def _load(self, path: Path, ttl: float) -> IntensitySeries | None:
        try:
            if self._clock() - path.stat().st_mtime > ttl:
                return None
            data = json.loads(path.read_text(encoding="utf-8"))
            pts = tuple(
                IntensityPoint(
                    parse_time(p["time"]),
                    float(p["g_per_kwh"]),
                    str(p["provider"]),
                    int(p["resolution_s"]),
                    _kind(p["kind"]),
                )
                for p in data["points"]
            )
            series = IntensitySeries(
                str(data["region"]), str(data["provider"]), pts, tuple(data["notes"])
            )
        except (OSError, ValueError, KeyError, TypeError, RecursionError):  # a broken cache: miss
            return None
        self.hits += 1
        return series

    def _save(self, path: Path, series: IntensitySeries) -> None:
        doc = {
            "region": series.region,
            "provider": series.provider,
            "notes": list(series.notes),
            "points": [
                {
                    "time": utc_iso(p.time),
                    "g_per_kwh": p.g_per_kwh,
                    "provider": p.provider,
                    "resolution_s": p.resolution_s,
                    "kind": p.kind,
                }
                for p in series.points
            ],
        }
        try:
            make_private_dirs(self.dir)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(doc), encoding="utf-8")
            os.replace(tmp, path)
        except OSError:
            pass

    def forecast(self, region: str, now: dt.datetime) -> IntensitySeries:
        # one entry per region and quarter hour: a plan made a minute later reuses it
        slot = utc_iso(now.replace(minute=now.minute - now.minute % 15, second=0, microsecond=0))
        path = self._path("forecast", region, slot)
        cached = self._load(path, self.forecast_ttl_s)
        if cached is not None:
            return cached
        series = self.inner.forecast(region, now)
        self._save(path, series)
        return series

    def history(self, region: str, start: dt.datetime, end: dt.datetime) -> IntensitySeries:
        path = self._path("history", region, utc_iso(start), utc_iso(end))
        cached = self._load(path, self.history_ttl_s)
        if cached is not None:
            return cached
        series = self.inner.history(region, start, end)
        self._save(path, series)
        return series


def _kind(value: object) -> Kind:
    if value == "forecast":
        return "forecast"
    if value == "history":
        return "history"
    raise ValueError(f"bad kind {value!r}")
