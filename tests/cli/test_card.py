"""``computewatch card``: the Hugging Face ``co2_eq_emissions`` block (valid YAML front matter
with the spec's keys), Markdown and LaTeX, over one run or a whole training's several runs."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from computewatch.views.card import card_data, latex_escape, render_card

HF_KEYS = {"emissions", "source", "training_type", "geographical_location", "hardware_used"}


def _fig(value: float | None, method: str, unit: str) -> dict[str, Any]:
    low = None if value is None else value * 0.8
    high = None if value is None else value * 1.3
    return {"value": value, "unit": unit, "method": method, "low": low, "high": high,
            "assumptions": [], "source": "src"}  # fmt: skip


def _summary(rid: str, kwh: float, grams: float | None, gpus: int = 8) -> dict[str, Any]:
    return {
        "id": rid,
        "duration_seconds": 3600.0,
        "host": {"cpu_model": "AMD EPYC 9654"},
        "gpus": [{"index": i, "name": "NVIDIA H100 80GB HBM3"} for i in range(gpus)],
        "energy": {
            "facility": _fig(kwh, "measured", "kWh"),
            "components": {
                "gpu": _fig(kwh, "measured", "kWh"),
                "cpu": _fig(1, "modeled", "kWh"),
                "memory": _fig(1, "modeled", "kWh"),
            },
            "pue": {"value": 1.1, "low": 1.1, "high": 1.1, "source": "AWS (2024)"},
        },
        "carbon": {
            "total": _fig(grams, "modeled", "gCO2e"),
            "intensity": {
                "g_per_kwh": 380.0,
                "region": "DE",
                "name": "Germany",
                "source": "Ember (2024)",
            },
        },
        "cost": {"total": _fig(None, "modeled", "USD")},
    }


def test_runs_are_summed_with_their_ranges_and_methods() -> None:
    d = card_data([_summary("a", 10.0, 3800.0), _summary("b", 5.0, 1900.0)])  # type: ignore[list-item]
    assert d.energy_kwh.value == 15.0 and d.energy_kwh.low == pytest.approx(12.0)
    assert d.co2e_grams.value == 5700.0 and d.co2e_grams.high == pytest.approx(7410.0)
    assert d.gpu_seconds == 2 * 8 * 3600.0
    assert d.hardware == ["8 x NVIDIA H100 80GB HBM3", "CPU AMD EPYC 9654"]
    assert d.locations == ["Germany (DE)"]
    assert not d.cost_usd.known  # no price: said, never a zero


def test_huggingface_front_matter_is_valid_yaml_with_the_spec_keys() -> None:
    d = card_data([_summary("a", 10.0, 3800.0)], "fine-tuning")  # type: ignore[list-item]
    text = render_card(d, "huggingface")
    assert text.startswith("---\n")
    front = yaml.safe_load(text.split("---\n")[1])
    block = front["co2_eq_emissions"]
    assert set(block) == HF_KEYS
    assert block["emissions"] == 3800.0  # grams, as the spec says
    assert block["training_type"] == "fine-tuning"
    assert block["geographical_location"] == "Germany (DE)"
    assert block["hardware_used"] == "8 x NVIDIA H100 80GB HBM3, CPU AMD EPYC 9654"
    assert "modeled" in block["source"] and "Ember (2024)" in block["source"]
    body = text.split("---\n", 2)[2]
    assert "8 GPU-hours" in body and "3.8 kg CO2e (3.04 kg CO2e–4.94 kg CO2e)" in body


def test_a_run_without_carbon_leaves_emissions_out_and_says_so() -> None:
    d = card_data([_summary("a", 10.0, 3800.0), _summary("b", 5.0, None)])  # type: ignore[list-item]
    block = yaml.safe_load(render_card(d, "huggingface").split("---\n")[1])["co2_eq_emissions"]
    assert "emissions" not in block  # a partial sum would understate it
    assert "carbon unknown for run(s) b" in render_card(d, "markdown")


def test_latex_is_escaped() -> None:
    assert latex_escape("50% of $5 & a_b") == r"50\% of \$5 \& a\_b"
    d = card_data([_summary("a", 10.0, 3800.0)])  # type: ignore[list-item]
    out = render_card(d, "latex")
    assert r"CO\textsubscript{2}e" in out and "%" not in out.split("\n", 1)[1]


@pytest.mark.slow
def test_card_over_two_real_runs(cw: Any, tmp_path: Path) -> None:
    for name in ("stage1", "stage2"):
        sleep = [sys.executable, "-c", "import time; time.sleep(1)"]
        cw.ok("run", "--quiet", "--name", name, "--region", "FR",
              "--gpu-backend", "fake:2xH100-SXM", "--", *sleep)  # fmt: skip
    a, b = cw.show("stage1"), cw.show("stage2")
    out = tmp_path / "card.md"
    cw.ok("card", "stage1", "stage2", "--format", "huggingface", "-o", out)
    front = yaml.safe_load(out.read_text().split("---\n")[1])["co2_eq_emissions"]
    assert set(front) == HF_KEYS
    total = a["carbon"]["total"]["value"] + b["carbon"]["total"]["value"]
    assert front["emissions"] == pytest.approx(total, rel=1e-3)
    assert front["geographical_location"] == "France (FR)"
    assert front["hardware_used"].startswith("2 x NVIDIA H100 80GB HBM3")
    md = cw.ok("card", "stage1", "stage2", "--format", "markdown").stdout
    assert "## Environmental impact" in md and a["id"] in md and b["id"] in md
    tex = cw.ok("card", "stage2", "--format", "latex").stdout
    assert tex.startswith("% computewatch card: runs " + b["id"])
    r = cw("card", "nosuch")
    assert r.returncode == 1 and r.stderr.startswith("computewatch: no run matches 'nosuch'")
    r = cw("card", "stage1", "--format", "pdf")
    assert r.returncode == 2 and "choose from 'huggingface', 'markdown', 'latex'" in r.stderr
