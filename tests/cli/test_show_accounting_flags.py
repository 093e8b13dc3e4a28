"""``show RUN`` with accounting flags accounts the run again: ``--sci-unit`` is one of them, and
the ``--region`` and ``--pue`` the run was made with hold unless given again (a ``--config``
alone must not replace the run's region with the world average)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest


def test_sci_unit_alone_accounts_the_run_again(
    cw: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = tmp_path / "per-step.toml"
    cfg.write_text('[carbon]\nsci_unit = "step"\n')
    monkeypatch.setenv("COMPUTEWATCH_CONFIG", str(cfg))  # the user's configuration file
    cw.ok("run", "--quiet", "--name", "sci", "--", "true")
    assert cw.json("show", "sci")["carbon"]["sci"]["unit"] == "gCO2e per step"
    assert cw.json("show", "sci", "--sci-unit", "run")["carbon"]["sci"]["unit"] == "gCO2e per run"


def test_a_config_keeps_the_region_and_pue_the_run_named(cw: Any, tmp_path: Path) -> None:
    cw.ok("run", "--quiet", "--region", "FR", "--pue", "1.4", "--name", "fr", "--", "true")
    cfg = tmp_path / "prices.toml"
    cfg.write_text("[cost]\nusd_per_hour = 2.0\n")
    shown = cw.json("show", "fr", "--config", cfg)
    intensity = shown["carbon"]["intensity"]
    assert (intensity["region"], intensity["how"]) == ("FR", "--region")
    assumptions = " ".join(shown["carbon"]["total"]["assumptions"])
    assert "France" in assumptions and "world" not in assumptions.lower()
    assert shown["energy"]["pue"]["value"] == 1.4
    # given again, a flag wins
    assert cw.json("show", "fr", "--region", "DE")["carbon"]["intensity"]["region"] == "DE"
    assert cw.json("show", "fr", "--pue", "1.1")["energy"]["pue"]["value"] == 1.1
