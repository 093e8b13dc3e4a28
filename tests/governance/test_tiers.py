"""Compute tiers of a model: judged on the upper bound, forecasts cross before the crossing, a
fine-tune is judged apart for the EU one-third rule, configured tiers and cluster capacity (the
compute summed per model: tests/lineage/test_compute.py)."""

from __future__ import annotations

import pytest
from tests.lineage.declared_runs import BASE, TUNE, declared_run, flops_summary

from computewatch.governance.tiers import DEFAULT_TIERS, cluster_capacity, model_status, parse_tiers
from computewatch.lineage.compute import Declaration, GovernanceError, per_model


def test_tiers_judged_on_the_upper_bound() -> None:
    run = declared_run(
        "a", BASE, flops_summary(None, 9e24)
    )  # 9e24 ± 15 %: the upper end crosses 1e25
    models = per_model([run])
    states = {s.tier.name: s for s in model_status(models["acme-7b"], models)}
    assert states["eu-gpai"].state == "crossed"
    assert states["eu-systemic-risk"].state == "crossed"
    assert states["eu-systemic-risk"].judged_flop == pytest.approx(9e24 * 1.15)
    assert states["us-frontier"].state == "approaching"


def test_a_running_forecast_crosses_before_the_crossing() -> None:
    running = declared_run("a", BASE, flops_summary(None, 2e24, forecast=1.2e25), status="running")
    models = per_model([running])
    states = {s.tier.name: s.state for s in model_status(models["acme-7b"], models)}
    assert states["eu-systemic-risk"] == "forecast"
    done = per_model([declared_run("a", BASE, flops_summary(None, 2e24, forecast=1.2e25))])
    assert {s.tier.name: s.state for s in model_status(done["acme-7b"], done)}[
        "eu-systemic-risk"
    ] == "approaching"  # an ended run's forecast is not counted


def test_the_one_third_modification_rule() -> None:
    base = declared_run("a", BASE, flops_summary(3e23, 3e23))
    small = declared_run("b", TUNE, flops_summary(5e22, 5e22))
    models = per_model([base, small])
    st = {s.tier.name: s for s in model_status(models["acme-7b-chat"], models)}
    assert st["eu-modification"].state == "approaching"
    assert st["eu-modification"].threshold == pytest.approx(3e23 * 1.15 / 3)
    assert "does not apply" in st["eu-modification-systemic"].note
    big = declared_run("b", TUNE, flops_summary(2e23, 2e23))
    models = per_model([base, big])
    st = {s.tier.name: s for s in model_status(models["acme-7b-chat"], models)}
    assert st["eu-modification"].state == "crossed"


def test_an_unknown_original_uses_the_fallback() -> None:
    tune = declared_run(
        "b", Declaration("other-chat", "llama-70b", "finetune"), flops_summary(4e22, 4e22)
    )
    models = per_model([tune])
    assert not models["other-chat"].base_known
    st = {s.tier.name: s for s in model_status(models["other-chat"], models)}
    assert st["eu-modification"].state == "crossed"  # 4.6e22 > 1e23 / 3
    assert st["eu-modification"].threshold == pytest.approx(1e23 / 3)
    assert st["eu-modification-systemic"].state == "below"  # 4.6e22 < 10 % of 1e25 / 3


def test_configured_tiers() -> None:
    tiers = {t.name: t for t in parse_tiers({"eu-systemic-risk": {"deadline_days": 7},
                                             "internal-review": 1e22}, "cfg")}  # fmt: skip
    assert tiers["eu-systemic-risk"].deadline_days == 7
    assert tiers["internal-review"].threshold == 1e22
    assert len(tiers) == len(DEFAULT_TIERS) + 1
    with pytest.raises(GovernanceError, match="positive finite"):
        parse_tiers({"x": -1}, "cfg")
    with pytest.raises(GovernanceError, match="deadline_days"):
        parse_tiers({"x": {"deadline_days": "soon"}}, "cfg")


def test_cluster_capacity() -> None:
    flops, unknown = cluster_capacity(
        {"n1": ["H100-SXM"] * 4 + ["NVIDIA H100 80GB HBM3"] * 4, "n2": ["Mystery GPU"]}
    )
    assert flops == pytest.approx(8 * 989.4e12, rel=0.01)
    assert unknown == ["Mystery GPU"]
