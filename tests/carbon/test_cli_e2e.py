"""``when``, ``where``, ``run --start-when-green`` and accounting with time, through the real CLI
against fake providers and files whose optimum is known."""

from __future__ import annotations

import datetime as dt
import json
import signal
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from computewatch.testing.fake_carbon import FakeCarbonServer

T0 = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)
DAY = [400, 380, 360, 350, 340, 330, 300, 280, 250, 200, 150, 120, 100, 50, 40, 60, 200, 300,
       350, 400, 420, 430, 440, 450]  # fmt: skip


def write_csv(path: Path, start: dt.datetime, values: Sequence[float], step_s: int = 3600) -> Path:
    lines = ["time,g_per_kwh"]
    lines += [
        f"{(start + dt.timedelta(seconds=i * step_s)).isoformat()},{v}"
        for i, v in enumerate(values)
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def srv() -> Iterator[FakeCarbonServer]:
    with FakeCarbonServer(DAY, T0, 3600) as s:
        yield s


def test_when_finds_the_known_optimum_in_a_csv(cw: Any, tmp_path: Path) -> None:
    f = write_csv(tmp_path / "day.csv", T0, DAY)
    out = cw.json(
        "when", "--duration", "3h", "--intensity-file", f, "--within", "24h",
        "--now", "2026-12-01T00:00:00Z", "--energy", "10",
    )  # fmt: skip
    assert out["start"] == "2026-12-01T13:00:00Z"
    assert out["end"] == "2026-12-01T16:00:00Z"
    assert out["now"] == "2026-12-01T00:00:00Z"
    assert out["mean_g_per_kwh"] == pytest.approx(50)
    assert out["now_mean_g_per_kwh"] == pytest.approx(380)
    assert out["saving_g"] == pytest.approx(3300)
    assert out["saving_percent"] == pytest.approx(100 * 330 / 380)
    assert len(out["forecast"]) == 24 and out["forecast"][0]["time"] == "2026-12-01T00:00:00Z"
    assert out["resolution_seconds"] == 3600
    text = cw.ok("when", "--duration", "3h", "--intensity-file", f, "--now", "2026-12-01T00:00Z")
    assert "best start   2026-12-01T13:00:00Z" in text.stdout
    assert "12-01 13:00Z *" in text.stdout  # the chart marks the window


def test_when_parquet(cw: Any, tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    times = [T0 + dt.timedelta(hours=i) for i in range(24)]
    pq.write_table(pa.table({"time": times, "g_per_kwh": DAY}), tmp_path / "day.parquet")
    out = cw.json(
        "when", "--duration", "3h", "--intensity-file", tmp_path / "day.parquet",
        "--now", "2026-12-01T00:00:00Z",
    )  # fmt: skip
    assert out["start"] == "2026-12-01T13:00:00Z"


def _config(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "config.toml"
    p.write_text(text)
    return p


def test_when_with_each_provider(cw: Any, tmp_path: Path, srv: FakeCarbonServer) -> None:
    (tmp_path / "wt-password").write_text("secret\n")
    (tmp_path / "wt-password").chmod(0o600)  # a secret file others can read is refused
    cfg = _config(
        tmp_path,
        f'[carbon]\nelectricitymaps_token = "test-token"\nelectricitymaps_url = "{srv.url}/v3"\n'
        f'watttime_url = "{srv.url}"\nwatttime_username = "user"\n'
        f'watttime_password_file = "{tmp_path / "wt-password"}"\n'
        f'uk_carbon_intensity_url = "{srv.url}"\n',
    )
    now = ["--now", "2026-12-01T00:00:00Z", "--within", "24h", "--config", str(cfg)]
    em = cw.json(
        "when", "--duration", "3h", "--region", "DE", "--provider", "electricitymaps", *now
    )
    uk = cw.json("when", "--duration", "3h", "--region", "GB", *now)  # GB: the public API
    wt = cw.json(
        "when", "--duration", "3h", "--provider", "watttime", "--provider-region", "CAISO_NORTH",
        *now,
    )  # fmt: skip
    for out, provider in ((em, "electricitymaps"), (uk, "uk-carbon-intensity"), (wt, "watttime")):
        assert out["start"] == "2026-12-01T13:00:00Z", provider
        assert out["provider"] == provider
        assert {p["provider"] for p in out["forecast"]} == {provider}
    assert any("MOER" in n for n in wt["notes"])
    # a second plan within the quarter hour comes from the cache
    calls = len(srv.requests)
    cw.json("when", "--duration", "3h", "--region", "GB", *now)
    assert len(srv.requests) == calls


def test_where_orders_regions_and_costs_them(cw: Any) -> None:
    out = cw.json(
        "where", "--duration", "6h", "--energy", "100",
        "--regions", "aws:us-east-1,aws:eu-north-1,FR", "--usd-per-kwh", "0.1",
    )  # fmt: skip
    regions = [r["region"] for r in out["regions"]]
    assert regions[-1] == "aws:us-east-1"
    us = out["regions"][-1]
    assert us["pue"] == pytest.approx(1.14)
    assert us["g"] == pytest.approx(100 * us["pue"] * us["g_per_kwh"])
    assert us["usd"] == pytest.approx(100 * us["pue"] * 0.1)
    assert us["price_source"] == "--usd-per-kwh" and us["price_year"] is None
    bad = cw("where", "--duration", "6h", "--energy", "1", "--regions", "aws:eu-nort-1")
    assert bad.returncode == 2
    assert len(bad.stderr.strip().splitlines()) == 1
    assert "close matches: aws:eu-north-1" in bad.stderr


def test_where_prices_from_the_table_unless_given(cw: Any, tmp_path: Path) -> None:
    args = ("where", "--duration", "1h", "--energy", "10", "--regions", "aws:us-east-1,US-WY")
    out = cw.json(*args)
    by = {r["region"]: r for r in out["regions"]}
    us = by["aws:us-east-1"]
    assert us["usd_per_kwh"] == pytest.approx(0.0895) and us["price_year"] == 2023
    assert us["usd"] == pytest.approx(10 * us["pue"] * 0.0895)
    assert us["price_source"].startswith("grid US-VA: U.S. EIA Electric Power Annual")
    assert by["US-WY"]["usd"] is None and "no row for US-WY" in by["US-WY"]["price_source"]
    assert any("bills instance-hours" in n for n in out["notes"])
    text = cw(*args)
    assert text.returncode == 0, text.stderr
    assert "note  aws:us-east-1: price grid US-VA: U.S. EIA" in text.stdout
    assert "note  US-WY: no price" in text.stdout
    prices = tmp_path / "p.csv"
    prices.write_text("region,usd_per_kwh\naws:us-east-1,0.5\n")
    mine = cw.json(*args, "--prices", str(prices))
    by = {r["region"]: r for r in mine["regions"]}
    assert by["aws:us-east-1"]["usd_per_kwh"] == 0.5
    assert by["aws:us-east-1"]["price_source"] == f"--prices {prices}"
    assert by["US-WY"]["usd"] is None  # not in the file, no row in the table


@pytest.mark.slow
def test_start_when_green_waits_for_the_threshold_then_runs(cw: Any, tmp_path: Path) -> None:
    now = dt.datetime.now(dt.UTC)
    # green 10 s from now: the CLI's start (seconds on a loaded machine) comes before it
    f = write_csv(tmp_path / "soon.csv", now - dt.timedelta(seconds=10), [500, 10, 10], 20)
    r = cw.ok(
        "run", "--quiet", "--start-when-green", "--threshold", "50", "--intensity-file", f,
        "--", sys.executable, "-c", "pass",
    )  # fmt: skip
    assert "waiting until" in r.stderr and "at or below the threshold 50" in r.stderr
    assert cw.show()["status"] == "completed"


def test_start_when_green_now_when_already_best(cw: Any, tmp_path: Path) -> None:
    now = dt.datetime.now(dt.UTC)
    f = write_csv(tmp_path / "now.csv", now - dt.timedelta(minutes=5), [10, 300, 400], 3600)
    r = cw.ok("run", "--quiet", "--start-when-green", "--intensity-file", f, "--", "true")
    assert "starting now" in r.stderr


@pytest.mark.slow
def test_ctrl_c_stops_the_wait_without_running(cw: Any, tmp_path: Path) -> None:
    now = dt.datetime.now(dt.UTC)
    f = write_csv(tmp_path / "later.csv", now - dt.timedelta(minutes=5), [500, 10, 10], 3600)
    marker = tmp_path / "ran"
    p = cw.popen(
        "run", "--quiet", "--start-when-green", "--intensity-file", f,
        "--", "touch", marker,
    )  # fmt: skip
    assert p.stderr is not None
    line = p.stderr.readline()
    assert "waiting until" in line and "Ctrl-C" in line
    p.send_signal(signal.SIGINT)
    assert p.wait(timeout=30) == 130
    assert not marker.exists()


@pytest.mark.slow
def test_run_carbon_is_summed_over_its_hours_with_sci(cw: Any, tmp_path: Path) -> None:
    now = dt.datetime.now(dt.UTC).replace(minute=0, second=0, microsecond=0)
    f = write_csv(tmp_path / "grid.csv", now - dt.timedelta(hours=2), [100, 200, 300, 400])
    cfg = _config(
        tmp_path,
        f'[carbon]\nprovider = "file"\nintensity_file = "{f}"\nembodied = true\n'
        'sci_unit = "step"\n',
    )
    cw.ok(
        "run", "--quiet", "--config", cfg, "--region", "FR", "--gpu-backend", "fake:2xTPU-v5e",
        "--", sys.executable, "-c", "import time; time.sleep(1.5)",
    )  # fmt: skip
    s = cw.json("show", "last", "--config", str(cfg), "--sci-unit", "run")
    carbon = s["carbon"]
    hourly = carbon["hourly"]
    assert hourly["provider"].startswith("file:") and hourly["resolution_seconds"] == 3600
    assert hourly["covered_ratio"] == pytest.approx(1.0)
    assert {h["g_per_kwh"] for h in hourly["hours"]} <= {100.0, 200.0, 300.0, 400.0, 350.0}
    assert "summed over the run's hours" in carbon["operational"]["assumptions"][0]
    kwh = s["energy"]["facility"]["value"]
    assert carbon["operational"]["value"] == pytest.approx(
        sum(h["g"] for h in hourly["hours"]), rel=1e-3
    )
    assert carbon["operational"]["value"] <= kwh * 400 * 1.0001
    sci = carbon["sci"]
    assert sci["unit"] == "gCO2e per run" and sci["inputs"]["R"] == 1
    assert sci["value"] == pytest.approx(carbon["total"]["value"], rel=1e-6)
    assert sci["inputs"]["I_method"].startswith("hourly")
    assert sci["spec"].startswith("ISO/IEC 21031:2024")
    text = cw.ok("show", "last", "--config", str(cfg)).stdout
    assert "sci " in text and "per step" not in text  # no steps: the unit is unknown, said so
    assert "TPU-hours" in text


def test_hourly_json_roundtrip_is_plain_json(cw: Any, tmp_path: Path) -> None:
    f = write_csv(tmp_path / "day.csv", T0, DAY)
    out = cw.ok(
        "when", "--duration", "1h", "--intensity-file", f, "--now", T0.isoformat(), "--json"
    )
    json.loads(out.stdout)


def test_where_with_forecasts_where_a_provider_has_them(cw: Any, tmp_path: Path) -> None:
    now = dt.datetime.now(dt.UTC).replace(minute=0, second=0, microsecond=0)
    with FakeCarbonServer([20.0] * 60, now - dt.timedelta(hours=1), 3600) as srv:
        cfg = _config(tmp_path, f'[carbon]\nuk_carbon_intensity_url = "{srv.url}"\n')
        out = cw.json(
            "where", "--duration", "6h", "--energy", "10", "--regions", "GB,FR",
            "--forecast", "--config", str(cfg),
        )  # fmt: skip
    by = {r["region"]: r for r in out["regions"]}
    assert by["GB"]["g_per_kwh"] == pytest.approx(20.0)
    assert "uk-carbon-intensity forecast" in by["GB"]["intensity_source"]
    assert "yearly average" in by["FR"]["intensity_source"]
    assert any(n.startswith("FR: no forecast") for n in out["notes"])
    bad = cw("where", "--duration", "1h", "--energy", "1", "--regions", "GB", "--forecast",
             "--provider", "uk-carbon")  # fmt: skip
    assert bad.returncode == 2 and "close matches: uk-carbon-intensity" in bad.stderr
