"""Accounting end to end: the real CLI on real child processes, flags and configuration files.

Each test runs with no configuration file and no region variables of its own machine, so the
location and prices are only what the test gives.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from computewatch.accounting.region import CLOUD_REGION_VARIABLES, REGION_VARIABLE

PY = sys.executable
FIGURE_KEYS = {"value", "unit", "method", "low", "high", "assumptions"}

STEPS = """
import sys, time
from pathlib import Path
import computewatch

Path(sys.argv[1]).write_text("ran")
with computewatch.track():
    for _ in range(20):
        time.sleep(0.01)
        computewatch.step(samples=8, tokens=64)
"""

MARKER = """
import sys, time
from pathlib import Path

Path(sys.argv[1]).write_text("ran")
time.sleep(0.3)
"""


@pytest.fixture(autouse=True)
def _clean_context(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Children inherit this environment: no configuration file, no region variables."""
    monkeypatch.delenv("COMPUTEWATCH_CONFIG", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    for name in (REGION_VARIABLE, *(v for v, _ in CLOUD_REGION_VARIABLES)):
        monkeypatch.delenv(name, raising=False)


def flat(text: str) -> str:
    """Text output with rich's line wrapping undone."""
    return " ".join(text.split())


def is_figure(f: Any) -> bool:
    return isinstance(f, dict) and set(f) >= FIGURE_KEYS


def test_run_adds_accounting_sections(
    cw: Any, tmp_path: Path, make_script: Callable[[str, str], Path]
) -> None:
    script = make_script("train.py", STEPS)
    out = tmp_path / "summary.json"
    r = cw.ok(
        "run", "--interval", "0.1", "--region", "FR", "--total-steps", "100",
        "--json", out, "--", PY, script, tmp_path / "marker",
    )  # fmt: skip
    s = json.loads(out.read_text())
    assert s["steps"]["count"] == 20
    e = s["energy"]
    assert is_figure(e["facility"]) and is_figure(e["device"])
    assert e["facility"]["unit"] == "kWh" and e["facility"]["value"] > 0
    assert {"cpu", "memory"} <= set(e["components"])
    assert all(is_figure(c) for c in e["components"].values())
    c = s["carbon"]
    assert is_figure(c["total"]) and is_figure(c["operational"])
    assert (c["intensity"]["region"], c["intensity"]["how"]) == ("FR", "--region")
    assert c["intensity"]["g_per_kwh"] == 44.0
    # carbon = facility energy x 44 g/kWh (both rounded to 6 significant digits)
    assert c["operational"]["value"] == pytest.approx(e["facility"]["value"] * 44, rel=1e-5)
    assert is_figure(s["cost"]["total"]) and s["cost"]["total"]["unit"] == "USD"
    f = s["flops"]
    assert is_figure(f) and f["unit"] == "FLOP"
    assert f["value"] is None  # no GPU: nothing estimated, and said
    fc = s["forecast"]
    assert (fc["total_steps"], fc["steps_done"], fc["complete"]) == (100, 20, False)
    assert is_figure(fc["wall_seconds_at_completion"]) and is_figure(fc["energy_kwh"])
    assert fc["wall_seconds_at_completion"]["value"] > s["duration_seconds"]
    text = flat(r.stderr)
    for label in ("energy", "carbon", "cost", "forecast"):
        assert f" {label} " in f" {text} ", label
    assert f"at the facility (PUE {e['pue']['value']:g})" in text
    assert "g/kWh, France" in text
    if s["cost"]["total"]["value"] is None:  # no price here (no DMI instance type)
        assert "set [cost] instance_type" in text  # printed as typed, not read as markup


def test_unknown_region_stops_before_the_command(cw: Any, tmp_path: Path, make_script: Any) -> None:
    script = make_script("m.py", MARKER)
    marker = tmp_path / "marker"
    r = cw("run", "--region", "nowhere", "--", PY, script, marker)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "unknown region 'nowhere'" in lines[0], r.stderr
    assert "Traceback" not in r.stderr
    assert not marker.exists()


def test_bad_configuration_stops_before_the_command(
    cw: Any, tmp_path: Path, make_script: Any
) -> None:
    script = make_script("m.py", MARKER)
    marker = tmp_path / "marker"
    cfg = tmp_path / "bad.toml"
    cfg.write_text("[cost]\nusd_per_hour = -1\n")
    r = cw("run", "--config", cfg, "--", PY, script, marker)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert f"{cfg}: cost.usd_per_hour = -1 must not be negative" in lines[0]
    assert not marker.exists()


def test_gpu_hour_price_from_the_configuration(cw: Any, tmp_path: Path, make_script: Any) -> None:
    script = make_script("m.py", MARKER)
    cfg = tmp_path / "cw.toml"
    cfg.write_text("[cost]\nusd_per_gpu_hour = 2.0\n")
    out = tmp_path / "s.json"
    cw.ok(
        "run", "--interval", "0.1", "--config", cfg, "--gpu-backend", "fake:2xA100-80GB",
        "--region", "FR", "--json", out, "--", PY, script, tmp_path / "marker",
    )  # fmt: skip
    s = json.loads(out.read_text())
    assert len(s["gpus"]) == 2
    hours = s["duration_seconds"] / 3600
    # 2 GPUs x hours x $2.0 per GPU-hour
    assert s["cost"]["total"]["value"] == pytest.approx(2 * hours * 2.0, rel=1e-5)
    assert s["cost"]["compute"]["source"] == "configuration"
    # the fake A100s have energy counters: the GPU part is measured
    assert s["energy"]["components"]["gpu"]["method"] == "measured"
    assert s["flops"]["value"] > 0 and s["flops"]["devices"][0]["simulated"] is True


def test_show_recomputes_in_another_region(cw: Any, tmp_path: Path, make_script: Any) -> None:
    script = make_script("m.py", MARKER)
    cw.ok("run", "--quiet", "--interval", "0.1", "--region", "FR", "--", PY, script, tmp_path / "m")
    de = cw.json("show", "last", "--region", "DE")
    assert (de["carbon"]["intensity"]["region"], de["carbon"]["intensity"]["g_per_kwh"]) == (
        "DE",
        344.0,
    )
    fac = de["energy"]["facility"]["value"]
    assert de["carbon"]["operational"]["value"] == pytest.approx(fac * 344, rel=1e-5)
    stored = cw.show("last")  # the stored summary keeps France
    assert (
        stored["carbon"]["intensity"]["region"],
        stored["carbon"]["intensity"]["g_per_kwh"],
    ) == (
        "FR",
        44.0,
    )
    again = cw.show("last")
    assert again == stored
    r = cw("show", "last", "--region", "nowhere")
    assert r.returncode == 2 and "unknown region 'nowhere'" in r.stderr


def test_a_name_with_markup_prints_literally(cw: Any, tmp_path: Path, make_script: Any) -> None:
    script = make_script("m.py", MARKER)
    r = cw.ok(
        "run", "--name", "[bold]x", "--interval", "0.1", "--region", "FR",
        "--", PY, script, tmp_path / "m",
    )  # fmt: skip
    assert "[bold]x" in flat(r.stderr)
    shown = cw.ok("show", "last")
    assert "[bold]x" in flat(shown.stdout)
