"""The SCI always has its M (the specification requires it): estimated for every run, while
the carbon total adds the embodied share only with ``[carbon] embodied = true``; on TPUs the
estimate says it uses the per-GPU figure."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest


def test_sci_has_m_by_default_and_the_total_stays_operational(cw: Any) -> None:
    cw.ok("run", "--quiet", "--name", "r", "--region", "FR", "--", "sleep", "1")
    carbon = cw.json("show", "r")["carbon"]
    sci = carbon["sci"]
    assert sci["inputs"]["M_g"] > 0
    assert "embodied" not in carbon
    assert carbon["total"]["value"] == pytest.approx(carbon["operational"]["value"])
    # R = 1 run: SCI = E x I + M, more than the operational total by M
    assert sci["value"] == pytest.approx(carbon["operational"]["value"] + sci["inputs"]["M_g"])
    assert not any("M = 0" in n for n in sci["notes"])


def test_embodied_on_tpus_says_which_figure_it_uses(cw: Any, tmp_path: Path) -> None:
    cfg = tmp_path / "embodied.toml"
    cfg.write_text("[carbon]\nembodied = true\n")
    cw.ok(
        "run", "--quiet", "--config", cfg, "--gpu-backend", "fake:4xTPU-v5e", "--name", "t",
        "--", "sleep", "1",
    )  # fmt: skip
    carbon = cw.json("show", "t")["carbon"]
    said = " ".join(carbon["embodied"]["assumptions"])
    assert "4 TPU chip(s)" in said and "the estimate for one GPU" in said
    assert "GPU(s)" not in said
