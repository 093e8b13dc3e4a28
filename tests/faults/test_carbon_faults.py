"""Carbon providers that are down, rate-limit or answer nonsense, bad intensity files and a TPU
metric service that is not there: one clear line, the yearly figure where a run needs one, and
never a failed or lost run."""

from __future__ import annotations

import datetime as dt
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from computewatch.catalog.tpu import tpu_rows
from computewatch.sources.tpu import TpuChipInfo, TpuSource
from computewatch.testing.fake_carbon import FakeCarbonServer

T0 = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)


@pytest.fixture
def srv() -> Iterator[FakeCarbonServer]:
    with FakeCarbonServer([300, 100, 200], T0, 1800) as s:
        yield s


def _config(tmp_path: Path, url: str) -> Path:
    p = tmp_path / "config.toml"
    p.write_text(f'[carbon]\nprovider = "uk-carbon-intensity"\nuk_carbon_intensity_url = "{url}"\n')
    return p


def _one_line(r: Any) -> str:
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert "Traceback" not in r.stderr
    return str(lines[0])


def test_when_provider_down(cw: Any, tmp_path: Path, free_port: Callable[[], int]) -> None:
    cfg = _config(tmp_path, f"http://127.0.0.1:{free_port()}")
    r = cw("when", "--duration", "1h", "--region", "GB", "--config", cfg, "--now", T0.isoformat())
    assert r.returncode == 1
    line = _one_line(r)
    assert "unreachable" in line and "yearly average is the same at every hour" in line


def test_when_rate_limited_and_failing(cw: Any, tmp_path: Path, srv: FakeCarbonServer) -> None:
    cfg = _config(tmp_path, srv.url)
    args = ("when", "--duration", "1h", "--region", "GB", "--config", cfg, "--now", T0.isoformat())
    srv.fail_next(429, retry_after="120")
    r = cw(*args)
    assert r.returncode == 1 and "rate limit reached (HTTP 429)" in _one_line(r)
    srv.fail_next(200, body=b"<html>down for maintenance</html>")
    r = cw(*args)
    assert r.returncode == 1 and "not valid JSON" in _one_line(r)
    srv.fail_next(200, body=b'{"data": "nope"}')
    r = cw(*args)
    assert r.returncode == 1 and "no 'data' list" in _one_line(r)


def test_unknown_provider_and_region(cw: Any, tmp_path: Path) -> None:
    r = cw("when", "--duration", "1h", "--region", "GB", "--provider", "electricitymap")
    assert r.returncode == 2 and "close matches: electricitymaps" in _one_line(r)
    r = cw("when", "--duration", "1h", "--region", "Frnace", "--provider", "uk-carbon-intensity")
    assert r.returncode == 2 and "close matches: FR" in _one_line(r)
    bad = tmp_path / "bad.toml"
    bad.write_text('[carbon]\nprovider = "carbonapi"\n')
    r = cw("when", "--duration", "1h", "--region", "GB", "--config", bad)
    assert r.returncode == 2 and "must be one of" in _one_line(r)
    r = cw("when", "--duration", "1h", "--region", "GB", "--provider", "watttime")
    assert r.returncode == 2 and "needs an account" in _one_line(r)


def test_bad_intensity_files(cw: Any, tmp_path: Path) -> None:
    cases = {
        "empty.csv": ("", "empty file"),
        "header.csv": ("when,value\n2026-12-01T00:00Z,1\n", "header"),
        "time.csv": ("time,g_per_kwh\nyesterday,1\n", "line 2: time 'yesterday'"),
        "value.csv": ("time,g_per_kwh\n2026-12-01T00:00Z,-5\n", "line 2: g_per_kwh"),
        "repeat.csv": ("time,g_per_kwh\n2026-12-01T00:00Z,1\n2026-12-01T00:00Z,2\n", "repeats"),
        "binary.csv": ("\udcff", "not a UTF-8"),
        "broken.parquet": ("not parquet", "not a readable Parquet file"),
    }
    for name, (text, said) in cases.items():
        p = tmp_path / name
        p.write_bytes(text.encode("utf-8", "surrogateescape"))
        r = cw("when", "--duration", "1h", "--intensity-file", p)
        assert r.returncode == 1, name
        assert said in _one_line(r), (name, r.stderr)
    r = cw("when", "--duration", "1h", "--intensity-file", tmp_path / "missing.csv")
    assert r.returncode == 1 and "does not exist" in _one_line(r)


@pytest.mark.slow
def test_run_keeps_the_yearly_figure_when_the_provider_is_down(
    cw: Any, tmp_path: Path, free_port: Callable[[], int]
) -> None:
    cfg = _config(tmp_path, f"http://127.0.0.1:{free_port()}")
    r = cw("run", "--quiet", "--config", cfg, "--region", "GB", "--", sys.executable, "-c", "pass")
    assert r.returncode == 0, r.stderr
    s = cw.show()
    carbon = s["carbon"]
    assert "hourly" not in carbon
    said = " ".join(carbon["operational"]["assumptions"])
    assert "hourly intensity unavailable" in said and "the yearly figure is used" in said
    assert carbon["intensity"]["source"].startswith("Ember")  # GB's yearly row
    assert carbon["sci"]["inputs"]["I_method"].startswith("yearly average")


@pytest.mark.slow
def test_start_when_green_with_the_provider_down_starts_now(
    cw: Any, tmp_path: Path, free_port: Callable[[], int]
) -> None:
    cfg = _config(tmp_path, f"http://127.0.0.1:{free_port()}")
    marker = tmp_path / "ran"
    r = cw(
        "run", "--quiet", "--config", cfg, "--region", "GB", "--start-when-green",
        "--", "touch", marker,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "no intensity forecast" in r.stderr and "starting now" in r.stderr
    assert marker.exists()


def test_tpu_metric_service_absent_is_notes_not_errors(free_port: Callable[[], int]) -> None:
    row = tpu_rows()["TPU-v5p"]
    chip = TpuChipInfo(0, "0000:00:04.0", row, "/dev/vfio/0")
    src = TpuSource(f"127.0.0.1:{free_port()}", [chip], timeout=0.5)
    try:
        for _ in range(4):
            assert src.read() == []
        assert any("not answering" in n for n in src.notes)
        assert src.devices[0].model == "TPU-v5p"
    finally:
        src.close()
