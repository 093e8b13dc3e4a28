"""A small client of the Prometheus HTTP API (``/api/v1/query`` and ``/api/v1/query_range``).

Fleet reports read Prometheus, never the nodes (docs/fleet.md). This module only speaks
the documented JSON API (https://prometheus.io/docs/prometheus/latest/querying/api/), over the
standard library's ``urllib``, so it works with Prometheus and with the stores that serve the
same API (Thanos, Mimir, VictoriaMetrics). Every failure (no server, a bad URL, an HTTP error,
an answer that is not Prometheus's JSON, a query Prometheus rejects) becomes one
:class:`PromQLError` whose message says what happened and where.
"""

from __future__ import annotations

import json
import math
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from computewatch.errors import ComputewatchError
from computewatch.units import format_promql_duration

__all__ = [
    "InstantSample",
    "PromQLError",
    "PrometheusClient",
    "RangeSeries",
    "check_url",
    "format_duration",
]


class PromQLError(ComputewatchError):
    """Prometheus could not be reached or refused a query; the message is for the user."""


@dataclass(frozen=True, slots=True)
class InstantSample:
    """One series of an instant vector: its labels and its value at the query time."""

    labels: Mapping[str, str]
    value: float


@dataclass(frozen=True, slots=True)
class RangeSeries:
    """One series of a range query: its labels and (timestamp, value) points."""

    labels: Mapping[str, str]
    points: tuple[tuple[float, float], ...]


def check_url(url: str) -> str:
    """The base URL of a Prometheus server without a trailing slash; PromQLError unless it is
    an ``http``/``https`` URL with a host."""
    text = url.strip()
    try:
        parts = urllib.parse.urlsplit(text)
        port = parts.port  # raises ValueError for a port that is not a number
    except ValueError as e:
        raise PromQLError(f"not a valid Prometheus URL {url!r}: {e}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise PromQLError(
            f"not a valid Prometheus URL {url!r}: expected http://HOST:PORT (for example "
            "http://127.0.0.1:9090)"
        )
    if port == 0:
        raise PromQLError(f"not a valid Prometheus URL {url!r}: port 0")
    if parts.query or parts.fragment:
        raise PromQLError(f"not a valid Prometheus URL {url!r}: no query string or fragment")
    return text.rstrip("/")


def format_duration(seconds: float) -> str:
    """A PromQL range (``1h``, ``90s``) for a number of seconds, at least one second."""
    return format_promql_duration(max(1.0, seconds))


def _number(raw: Any) -> float:
    # Prometheus writes sample values as strings: "1.5", "NaN", "+Inf" (API docs, "Expression
    # query result formats"); float() reads all of them.
    try:
        return float(raw)
    except (TypeError, ValueError):
        raise PromQLError(f"Prometheus returned a value that is not a number: {raw!r}") from None


class PrometheusClient:
    """Queries one Prometheus server.

    ``url`` is the server's base URL (``http://127.0.0.1:9090``, or a path prefix such as
    ``https://host/prometheus``); ``headers`` are sent with each request (``Authorization``).
    """

    def __init__(
        self, url: str, *, timeout: float = 30.0, headers: Mapping[str, str] | None = None
    ) -> None:
        self.url = check_url(url)
        self.timeout = timeout
        self.headers = dict(headers or {})

    def instant(self, query: str, at: float | None = None) -> list[InstantSample]:
        """Evaluate ``query`` at ``at`` (Unix seconds; None: the server's now). A scalar result
        comes back as one sample without labels."""
        params = {"query": query}
        if at is not None:
            params["time"] = _ts(at)
        data = self._get("query", params, query)
        kind, result = data.get("resultType"), data.get("result")
        if kind == "vector" and isinstance(result, list):
            return [
                InstantSample(dict(item.get("metric") or {}), _number(item["value"][1]))
                for item in result
            ]
        if kind == "scalar" and isinstance(result, list):
            return [InstantSample({}, _number(result[1]))]
        raise PromQLError(
            f"query {query!r} gave a {kind} result where an instant vector was expected"
        )

    def range(self, query: str, start: float, end: float, step: float) -> list[RangeSeries]:
        """Evaluate ``query`` every ``step`` seconds from ``start`` to ``end`` (Unix seconds)."""
        if not step > 0 or not math.isfinite(step):
            raise PromQLError(f"a range query needs a positive step, not {step!r}")
        params = {"query": query, "start": _ts(start), "end": _ts(end), "step": f"{step:g}"}
        data = self._get("query_range", params, query)
        result = data.get("result")
        if data.get("resultType") != "matrix" or not isinstance(result, list):
            raise PromQLError(f"query {query!r} did not give a range vector")
        return [
            RangeSeries(
                dict(item.get("metric") or {}),
                tuple((float(t), _number(v)) for t, v in item.get("values") or []),
            )
            for item in result
        ]

    def _get(self, endpoint: str, params: Mapping[str, str], query: str) -> dict[str, Any]:
        url = f"{self.url}/api/v1/{endpoint}"
        # POST with a form body: the API accepts it for both endpoints, and long queries do not
        # run into URL length limits of proxies.
        body = urllib.parse.urlencode(params).encode()
        req = urllib.request.Request(url, data=body, method="POST", headers=self.headers)
        req.add_header("Content-Type", "application/x-www-form-urlencoded")
        req.add_header("Accept", "application/json")
        status: int
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                status = resp.status
                raw = resp.read()
                ctype = resp.headers.get("Content-Type", "")
        except urllib.error.HTTPError as e:
            status = e.code
            raw = e.read() if e.fp is not None else b""
            ctype = e.headers.get("Content-Type", "") if e.headers else ""
        except urllib.error.URLError as e:
            reason = e.reason
            why = getattr(reason, "strerror", None) or str(reason)
            raise PromQLError(f"cannot reach Prometheus at {self.url}: {why}") from None
        except TimeoutError:
            raise PromQLError(
                f"Prometheus at {self.url} did not answer within {self.timeout:g} s"
            ) from None
        except OSError as e:
            raise PromQLError(f"cannot reach Prometheus at {self.url}: {e.strerror or e}") from None
        try:
            doc = json.loads(raw)
        except (ValueError, UnicodeDecodeError, RecursionError):  # Recursion: nested too deeply
            doc = None
        if not isinstance(doc, dict) or "status" not in doc:
            what = ctype.split(";")[0] or "no content type"
            raise PromQLError(
                f"{url} answered HTTP {status} ({what}), not the Prometheus query API: is "
                f"{self.url} a Prometheus server?"
            )
        if doc.get("status") != "success":
            kind = doc.get("errorType") or f"HTTP {status}"
            raise PromQLError(
                f"Prometheus at {self.url} rejected the query {query!r}: {kind}: "
                f"{doc.get('error') or 'no reason given'}"
            )
        data = doc.get("data")
        if not isinstance(data, dict):
            raise PromQLError(f"{url} answered without a data object")
        return data


def _ts(t: float) -> str:
    if not math.isfinite(t):
        raise PromQLError(f"not a valid time: {t!r}")
    return f"{t:.3f}"
