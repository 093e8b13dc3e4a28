"""A local HTTP server that answers as Electricity Maps v3, WattTime v3 and the UK Carbon
Intensity API do, from a scripted intensity series, for tests and demos (all figures simulated).

One server speaks the three APIs on their documented paths, so a test points each provider's
base URL at it (Electricity Maps and the UK API at ``url``, WattTime at ``url``)::

    with FakeCarbonServer(values=[300, 120, 80, 250], start=t0, step_s=3600) as srv:
        provider = ElectricityMapsProvider("token", srv.url + "/v3")

Scripted failures: :meth:`fail_next` makes the next N requests answer an HTTP status (429 with
``Retry-After``, 500, 401...), or a body that is not JSON (``status=200, body=b"<html>"``);
``delay_s`` slows every answer (for timeouts). ``requests`` records every path asked.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import threading
import time
import urllib.parse
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType

from computewatch.carbon.records import parse_time, to_utc

__all__ = ["FakeCarbonServer", "ScriptedFailure"]

_LB_PER_MWH_PER_G_PER_KWH = 1 / 0.45359237


@dataclasses.dataclass(slots=True)
class ScriptedFailure:
    status: int
    body: bytes = b'{"error": "scripted"}'
    retry_after: str | None = None


class FakeCarbonServer:
    """The three providers' APIs on 127.0.0.1 and a free port; ``values`` in gCO2e/kWh from
    ``start`` every ``step_s`` seconds. ``token`` is the Electricity Maps token accepted,
    ``username``/``password`` the WattTime account; ``zones`` the zones/regions known."""

    def __init__(
        self,
        values: Sequence[float],
        start: dt.datetime,
        step_s: int = 3600,
        *,
        token: str = "test-token",
        username: str = "user",
        password: str = "secret",
        zones: Sequence[str] = ("DE", "SE-SE3", "GB", "US-VA", "CAISO_NORTH", "FR"),
        delay_s: float = 0.0,
    ) -> None:
        self.values = list(values)
        self.start = to_utc(start)
        self.step_s = step_s
        self.token = token
        self.username = username
        self.password = password
        self.zones = set(zones)
        self.delay_s = delay_s
        self.requests: list[str] = []
        self._failures: list[ScriptedFailure] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def fail_next(
        self,
        status: int,
        count: int = 1,
        *,
        body: bytes | None = None,
        retry_after: str | None = None,
    ) -> None:
        """Answer the next ``count`` requests with ``status`` (and ``body``)."""
        with self._lock:
            for _ in range(count):
                self._failures.append(
                    ScriptedFailure(status, body or b'{"error": "scripted"}', retry_after)
                )

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> FakeCarbonServer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- the data -------------------------------------------------------------------------------
    def points(
        self, start: dt.datetime | None = None, end: dt.datetime | None = None
    ) -> list[tuple[dt.datetime, float]]:
        out = []
        for i, v in enumerate(self.values):
            t = self.start + dt.timedelta(seconds=i * self.step_s)
            if start is not None and t + dt.timedelta(seconds=self.step_s) <= start:
                continue
            if end is not None and t >= end:
                continue
            out.append((t, v))
        return out

    # -- HTTP ----------------------------------------------------------------------------------
    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:  # quiet
                pass

            def do_GET(self) -> None:
                fake.requests.append(self.path)
                if fake.delay_s:
                    time.sleep(fake.delay_s)
                with fake._lock:
                    failure = fake._failures.pop(0) if fake._failures else None
                if failure is not None:
                    headers = {"Retry-After": failure.retry_after} if failure.retry_after else {}
                    self._send(failure.status, failure.body, headers)
                    return
                url = urllib.parse.urlsplit(self.path)
                q = dict(urllib.parse.parse_qsl(url.query))
                status, doc = fake._route(url.path, q, dict(self.headers.items()))
                self._send(status, json.dumps(doc).encode())

            def _send(
                self, status: int, body: bytes, headers: dict[str, str] | None = None
            ) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(body)

        return Handler

    def _route(self, path: str, q: dict[str, str], headers: dict[str, str]) -> tuple[int, object]:
        h = {k.lower(): v for k, v in headers.items()}
        # Electricity Maps v3
        if path.endswith("/carbon-intensity/forecast") or path.endswith(
            ("/carbon-intensity/history", "/carbon-intensity/past-range")
        ):
            if h.get("auth-token") != self.token:
                return 401, {"error": "invalid token"}
            zone = q.get("zone", "")
            if zone not in self.zones:
                return 404, {"error": f"zone {zone} not found"}
            if path.endswith("/past-range"):
                pts = self.points(parse_time(q["start"]), parse_time(q["end"]))
            else:
                pts = self.points()
            items = [
                {
                    "zone": zone,
                    "carbonIntensity": v,
                    "datetime": t.strftime("%Y-%m-%dT%H:%M:%S.000Z"),
                }
                for t, v in pts
            ]
            key = "forecast" if path.endswith("forecast") else "history"
            key = "data" if path.endswith("past-range") else key
            return 200, {"zone": zone, key: items, "updatedAt": "2026-11-30T00:00:00.000Z"}
        # WattTime v3
        if path == "/login":
            import base64  # only the login route decodes basic auth

            want = base64.b64encode(f"{self.username}:{self.password}".encode()).decode()
            if h.get("authorization") != f"Basic {want}":
                return 401, {"error": "bad credentials"}
            return 200, {"token": "wt-token"}
        if path in ("/v3/forecast", "/v3/historical"):
            if h.get("authorization") != "Bearer wt-token":
                return 401, {"error": "bad token"}
            region = q.get("region", "")
            if region not in self.zones:
                return 400, {"error": f"region {region} unknown"}
            if path == "/v3/historical":
                pts = self.points(parse_time(q["start"]), parse_time(q["end"]))
            else:
                pts = self.points()
            data = [
                {"point_time": t.isoformat(), "value": v * _LB_PER_MWH_PER_G_PER_KWH}
                for t, v in pts
            ]
            meta = {
                "data_point_period_seconds": self.step_s,
                "region": region,
                "signal_type": "co2_moer",
                "units": "lbs_co2_per_mwh",
                "generated_at": "2026-11-30T00:00:00+00:00",
            }
            return 200, {"data": data, "meta": meta}
        # UK Carbon Intensity
        if path.startswith("/intensity/"):
            parts = path.split("/")[2:]
            start = parse_time(parts[0])
            end = start + dt.timedelta(hours=48) if parts[1] == "fw48h" else parse_time(parts[1])
            items = []
            for t, v in self.points(start, end):
                to = t + dt.timedelta(seconds=self.step_s)
                items.append(
                    {
                        "from": t.strftime("%Y-%m-%dT%H:%MZ"),
                        "to": to.strftime("%Y-%m-%dT%H:%MZ"),
                        "intensity": {
                            "forecast": round(v),
                            "actual": round(v) if parts[1] != "fw48h" else None,
                            "index": "low" if v < 150 else "moderate",
                        },
                    }
                )
            return 200, {"data": items}
        return 404, {"error": f"no route {path}"}
