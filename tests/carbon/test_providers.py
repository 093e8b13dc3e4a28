"""The intensity providers against a local fake that answers with their documented JSON."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from computewatch.carbon.cache import CachedProvider
from computewatch.carbon.providers import (
    LB_PER_MWH_TO_G_PER_KWH,
    ElectricityMapsProvider,
    ProviderSettings,
    UkCarbonIntensityProvider,
    WattTimeProvider,
    em_zone,
    make_provider,
)
from computewatch.carbon.records import ProviderError, UnknownProviderError
from computewatch.testing.fake_carbon import FakeCarbonServer

T0 = dt.datetime(2026, 11, 30, 0, 0, tzinfo=dt.UTC)
VALUES = [300.0, 250.0, 120.0, 80.0, 95.0, 310.0]


@pytest.fixture
def srv() -> Iterator[FakeCarbonServer]:
    with FakeCarbonServer(VALUES, T0, 3600) as s:
        yield s


def test_electricitymaps_forecast_hourly(srv: FakeCarbonServer) -> None:
    p = ElectricityMapsProvider("test-token", srv.url + "/v3")
    s = p.forecast("DE", T0)
    assert [pt.g_per_kwh for pt in s.points] == VALUES
    assert {pt.provider for pt in s.points} == {"electricitymaps"}
    assert {pt.resolution_s for pt in s.points} == {3600}
    assert {pt.kind for pt in s.points} == {"forecast"}
    assert s.points[0].time == T0
    assert srv.requests[-1].startswith("/v3/carbon-intensity/forecast?zone=DE")


def test_electricitymaps_maps_a_cloud_region_to_its_zone(srv: FakeCarbonServer) -> None:
    zone = em_zone("aws:eu-north-1")
    assert zone.startswith("SE")
    with pytest.raises(UnknownProviderError, match="close matches: aws:eu-north-1"):
        em_zone("aws:eu-nort-1")


def test_electricitymaps_history_past_range() -> None:
    old = dt.datetime(2026, 1, 5, tzinfo=dt.UTC)  # older than the last 24 h: /past-range
    with FakeCarbonServer(VALUES, old) as srv:
        p = ElectricityMapsProvider("test-token", srv.url + "/v3")
        s = p.history("DE", old + dt.timedelta(hours=1), old + dt.timedelta(hours=3))
        assert [pt.g_per_kwh for pt in s.points] == [250.0, 120.0]
        assert {pt.kind for pt in s.points} == {"history"}
        assert "/past-range" in srv.requests[-1]


def test_electricitymaps_bad_token_is_one_clear_error(srv: FakeCarbonServer) -> None:
    p = ElectricityMapsProvider("wrong", srv.url + "/v3")
    with pytest.raises(ProviderError, match=r"rejected the credentials \(HTTP 401\)"):
        p.forecast("DE", T0)


def test_watttime_logs_in_and_converts_lb_per_mwh(srv: FakeCarbonServer) -> None:
    p = WattTimeProvider("user", "secret", srv.url)
    s = p.forecast("CAISO_NORTH", T0)
    assert [round(pt.g_per_kwh, 6) for pt in s.points] == VALUES
    assert "/login" in srv.requests
    assert any("MOER" in n for n in s.notes)
    assert pytest.approx(0.45359237) == LB_PER_MWH_TO_G_PER_KWH
    h = p.history("CAISO_NORTH", T0, T0 + dt.timedelta(hours=2))
    assert [round(pt.g_per_kwh, 6) for pt in h.points] == VALUES[:2]


def test_watttime_wrong_password(srv: FakeCarbonServer) -> None:
    p = WattTimeProvider("user", "nope", srv.url)
    with pytest.raises(ProviderError, match="WattTime rejected the credentials"):
        p.forecast("CAISO_NORTH", T0)


def test_watttime_unknown_region(srv: FakeCarbonServer) -> None:
    p = WattTimeProvider("user", "secret", srv.url)
    with pytest.raises(ProviderError, match="does not know region 'NOWHERE'"):
        p.forecast("NOWHERE", T0)


def test_uk_half_hourly() -> None:
    with FakeCarbonServer([200, 100, 50, 150], T0, 1800) as s:
        p = UkCarbonIntensityProvider(s.url)
        f = p.forecast("GB", T0)
        assert [pt.g_per_kwh for pt in f.points] == [200, 100, 50, 150]
        assert f.resolution_s == 1800
        assert s.requests[-1] == "/intensity/2026-11-30T00:00Z/fw48h"
        h = p.history("aws:eu-west-2", T0, T0 + dt.timedelta(hours=1))
        assert [pt.g_per_kwh for pt in h.points] == [200, 100]
        with pytest.raises(UnknownProviderError, match="Great Britain only"):
            p.forecast("FR", T0)


def test_rate_limit_says_so() -> None:
    with FakeCarbonServer(VALUES, T0) as s:
        s.fail_next(429, retry_after="60")
        p = UkCarbonIntensityProvider(s.url)
        with pytest.raises(ProviderError, match=r"rate limit reached \(HTTP 429\).*60 s"):
            p.forecast("GB", T0)
        s.fail_next(503)
        with pytest.raises(ProviderError, match=r"is failing \(HTTP 503\)"):
            p.forecast("GB", T0)
        s.fail_next(200, body=b"<html>maintenance</html>")
        with pytest.raises(ProviderError, match="not valid JSON"):
            p.forecast("GB", T0)
        assert p.forecast("GB", T0).points  # and then it works again


def test_unreachable_provider(free_port: Callable[[], int]) -> None:
    p = UkCarbonIntensityProvider(f"http://127.0.0.1:{free_port()}", timeout=2)
    with pytest.raises(ProviderError, match="unreachable"):
        p.forecast("GB", T0)


def test_unknown_provider_has_close_matches() -> None:
    with pytest.raises(UnknownProviderError, match="close matches: watttime"):
        make_provider("wattime", ProviderSettings())
    with pytest.raises(UnknownProviderError, match="needs a token"):
        make_provider("electricitymaps", ProviderSettings(), environ={})
    with pytest.raises(UnknownProviderError, match="needs an account"):
        make_provider("watttime", ProviderSettings(), environ={})
    wt = make_provider(
        "watttime", ProviderSettings(), environ={"WATTTIME_USERNAME": "u", "WATTTIME_PASSWORD": "p"}
    )
    assert "p" not in repr(wt).replace("api", "").replace("http", "")


def test_cache_saves_calls_and_expires(srv: FakeCarbonServer, tmp_path: Path) -> None:
    now = [time.time()]
    p = CachedProvider(
        UkCarbonIntensityProvider(srv.url), tmp_path, forecast_ttl_s=60, clock=lambda: now[0]
    )
    a = p.forecast("GB", T0)
    calls = len(srv.requests)
    b = p.forecast("GB", T0 + dt.timedelta(minutes=5))  # same quarter hour
    assert a == b and len(srv.requests) == calls and p.hits == 1
    now[0] += 10_000  # the entry's mtime is the real time; the clock moved past the TTL
    p.forecast("GB", T0)
    assert len(srv.requests) == calls + 1
