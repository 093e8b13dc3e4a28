"""Live grid carbon intensity from the Electricity Maps API, for users who configure a token.

Only called when the user configured a token (the caller decides; docs/carbon.md: no network call
unless configured). Uses urllib so it needs no dependency. Every failure (HTTP error, timeout,
refused connection, malformed JSON) becomes a LiveIntensityError with a one-line message the
caller can print as a warning before falling back to the table figure.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import http.client
import json
import urllib.error
import urllib.parse
import urllib.request

from computewatch._version import __version__
from computewatch.errors import ComputewatchError

__all__ = [
    "DEFAULT_BASE_URL",
    "LiveIntensity",
    "LiveIntensityClient",
    "LiveIntensityError",
]

DEFAULT_BASE_URL = "https://api.electricitymap.org/v3"
_MAX_BODY_BYTES = 1 << 20  # the answer is a few hundred bytes; refuse anything absurd


class LiveIntensityError(ComputewatchError):
    """Live intensity could not be had; the message says why, in one line."""


@dataclasses.dataclass(frozen=True, slots=True)
class LiveIntensity:
    """The latest carbon intensity of a zone, as Electricity Maps reports it."""

    zone: str
    g_per_kwh: float  # gCO2e per kWh
    datetime: dt.datetime  # the hour the figure is for, timezone-aware
    source: str = "Electricity Maps (live)"


def _http_error_message(code: int, zone: str) -> str:
    if code in (401, 403):
        return f"Electricity Maps rejected the token (HTTP {code})"
    if code == 404:
        return f"Electricity Maps does not know zone {zone!r} (HTTP 404)"
    if code == 429:
        return "Electricity Maps rate limit reached (HTTP 429); try again later"
    if code >= 500:
        return f"Electricity Maps server error (HTTP {code})"
    return f"Electricity Maps answered HTTP {code}"


class LiveIntensityClient:
    """Client for ``GET /carbon-intensity/latest?zone=...`` with the ``auth-token`` header."""

    def __init__(self, token: str, base_url: str = DEFAULT_BASE_URL, timeout: float = 5.0) -> None:
        if not token:
            raise ValueError("an Electricity Maps token is required")
        scheme = urllib.parse.urlsplit(base_url).scheme
        if scheme not in ("http", "https"):
            raise ValueError(f"base URL must be http or https, not {base_url!r}")
        if not timeout > 0:
            raise ValueError("timeout must be positive")
        self._token = token
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout

    def __repr__(self) -> str:  # never show the token
        return f"LiveIntensityClient(base_url={self.base_url!r}, timeout={self.timeout!r})"

    def latest(self, zone: str) -> LiveIntensity:
        """The latest intensity of ``zone``, an Electricity Maps zone ("DE", "US-CAL-CISO")."""
        query = urllib.parse.urlencode({"zone": zone})
        request = urllib.request.Request(
            f"{self.base_url}/carbon-intensity/latest?{query}",
            headers={
                "auth-token": self._token,
                "Accept": "application/json",
                "User-Agent": f"computewatch/{__version__}",
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                body = response.read(_MAX_BODY_BYTES + 1)
        except urllib.error.HTTPError as exc:
            exc.close()
            raise LiveIntensityError(_http_error_message(exc.code, zone)) from None
        except urllib.error.URLError as exc:
            raise LiveIntensityError(self._network_message(exc.reason)) from None
        except (OSError, http.client.HTTPException) as exc:
            raise LiveIntensityError(self._network_message(exc)) from None
        if len(body) > _MAX_BODY_BYTES:
            raise LiveIntensityError("Electricity Maps answer is too large to be a reading")
        return _parse(body, zone)

    def _network_message(self, reason: object) -> str:
        if isinstance(reason, TimeoutError):
            return f"Electricity Maps did not answer within {self.timeout:g} s ({self.base_url})"
        if isinstance(reason, ConnectionRefusedError):
            return f"could not connect to {self.base_url}: connection refused"
        return f"could not reach {self.base_url}: {reason}"


def _parse(body: bytes, zone: str) -> LiveIntensity:
    try:
        data = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise LiveIntensityError("Electricity Maps answer is not valid JSON") from None
    except RecursionError:  # json's decoder recurses once per nested array or object
        raise LiveIntensityError("Electricity Maps answer nests too deeply") from None
    if not isinstance(data, dict):
        raise LiveIntensityError("Electricity Maps answer is not a JSON object")
    value = data.get("carbonIntensity")
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        raise LiveIntensityError(
            f"Electricity Maps answer has no usable carbonIntensity ({value!r})"
        )
    stamp = data.get("datetime")
    try:
        when = dt.datetime.fromisoformat(stamp) if isinstance(stamp, str) else None
    except ValueError:
        when = None
    if when is None:
        raise LiveIntensityError(f"Electricity Maps answer has no usable datetime ({stamp!r})")
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    answered_zone = data.get("zone")
    return LiveIntensity(
        zone=answered_zone if isinstance(answered_zone, str) and answered_zone else zone,
        g_per_kwh=float(value),
        datetime=when,
    )
