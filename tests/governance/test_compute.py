"""Cumulative compute per model and its tiers: resumptions add up, a fine-tune adds to its base
for SB 53 and is judged apart for the EU one-third rule, forecasts cross before the crossing."""

from __future__ import annotations

from typing import Any

import pytest

from computewatch.governance.tiers import DEFAULT_TIERS, cluster_capacity, model_status, parse_tiers
from computewatch.lineage.compute import (
    Declaration,
    GovernanceError,
    RunCompute,
    declaration,
    per_model,
    run_compute,
)


def _fig(v: float, spread: float = 0.0, method: str = "estimated") -> dict[str, Any]:
    return {"value": v, "low": v * (1 - spread), "high": v * (1 + spread), "unit": "FLOP",
            "method": method, "assumptions": [], "source": None}  # fmt: skip


def _summary(
    counted: float | None,
    hardware: float,
    *,
    tokens: float = 0.0,
    forecast: float | None = None,
    gpus: int = 8,
    hours: float = 10.0,
) -> dict[str, Any]:
    hw = _fig(hardware, 0.15)
    flops = {**_fig(counted, 0.0, "counted"), "hardware_estimate": hw} if counted else hw
    s: dict[str, Any] = {
        "flops": flops,
        "duration_seconds": hours * 3600,
        "gpus": [{"model": "H100-SXM", "name": "NVIDIA H100 80GB HBM3"}] * gpus,
        "energy": {"facility": _fig(100.0 * hours)},
        "steps": {"count": 10, "tokens_total": tokens},
    }
    if forecast is not None:
        s["forecast"] = {"flops": _fig(forecast, 0.1)}
    return s


def _run(
    i: str, decl: Declaration, summary: dict[str, Any], status: str = "completed"
) -> RunCompute:
    return run_compute(i, summary, decl, status=status, started_at=0.0)


BASE = Declaration("acme-7b", None, "pretrain", 7e9)
TUNE = Declaration("acme-7b-chat", "acme-7b", "finetune", 7e9)


def test_resumed_runs_and_a_fine_tune_add_up() -> None:
    runs = [
        _run("a1", BASE, _summary(2e23, 2.5e23, tokens=1e12)),
        _run("a2", BASE, _summary(3e23, 3.5e23, tokens=2e12)),  # resumed after a crash
        _run("a3", BASE, _summary(None, 1e23)),  # restarted without the step counter
        _run("b1", TUNE, _summary(1e22, 1.2e22, tokens=1e11)),
        _run("e1", Declaration("acme-7b", None, "eval"), _summary(5e21, 6e21)),
    ]
    models = per_model(runs)
    a, b = models["acme-7b"], models["acme-7b-chat"]
    assert a.own["counted"].value == pytest.approx(5e23)  # the eval run is not training
    assert a.own["hardware"].value == pytest.approx(7e23)
    assert a.own["hardware"].high == pytest.approx(7e23 * 1.15)
    assert a.own["architecture"].value == pytest.approx(6 * 7e9 * 3e12)
    assert a.gpu_hours == pytest.approx(3 * 8 * 10)
    assert a.training_seconds == pytest.approx(3 * 36000)
    assert len(a.runs) == 4
    assert b.own["counted"].value == pytest.approx(1e22)
    assert b.cumulative["counted"].value == pytest.approx(5e23 + 1e22)  # SB 53: base included
    assert b.cumulative["architecture"].value == pytest.approx(6 * 7e9 * 3.1e12)
    assert b.base_known
    judged = a.judged()
    assert judged is not None  # the highest upper bound among the methods
    assert judged[0] == pytest.approx(7e23 * 1.15) and judged[1] == "hardware"


def test_tiers_judged_on_the_upper_bound() -> None:
    run = _run("a", BASE, _summary(None, 9e24))  # 9e24 ± 15 %: the upper end crosses 1e25
    models = per_model([run])
    states = {s.tier.name: s for s in model_status(models["acme-7b"], models)}
    assert states["eu-gpai"].state == "crossed"
    assert states["eu-systemic-risk"].state == "crossed"
    assert states["eu-systemic-risk"].judged_flop == pytest.approx(9e24 * 1.15)
    assert states["us-frontier"].state == "approaching"


def test_a_running_forecast_crosses_before_the_crossing() -> None:
    running = _run("a", BASE, _summary(None, 2e24, forecast=1.2e25), status="running")
    models = per_model([running])
    states = {s.tier.name: s.state for s in model_status(models["acme-7b"], models)}
    assert states["eu-systemic-risk"] == "forecast"
    done = per_model([_run("a", BASE, _summary(None, 2e24, forecast=1.2e25))])
    assert {s.tier.name: s.state for s in model_status(done["acme-7b"], done)}[
        "eu-systemic-risk"
    ] == "approaching"  # an ended run's forecast is not counted


def test_the_one_third_modification_rule() -> None:
    base = _run("a", BASE, _summary(3e23, 3e23))
    small = _run("b", TUNE, _summary(5e22, 5e22))
    models = per_model([base, small])
    st = {s.tier.name: s for s in model_status(models["acme-7b-chat"], models)}
    assert st["eu-modification"].state == "approaching"
    assert st["eu-modification"].threshold == pytest.approx(3e23 * 1.15 / 3)
    assert "does not apply" in st["eu-modification-systemic"].note
    big = _run("b", TUNE, _summary(2e23, 2e23))
    models = per_model([base, big])
    st = {s.tier.name: s for s in model_status(models["acme-7b-chat"], models)}
    assert st["eu-modification"].state == "crossed"


def test_an_unknown_original_uses_the_fallback() -> None:
    tune = _run("b", Declaration("other-chat", "llama-70b", "finetune"), _summary(4e22, 4e22))
    models = per_model([tune])
    assert not models["other-chat"].base_known
    st = {s.tier.name: s for s in model_status(models["other-chat"], models)}
    assert st["eu-modification"].state == "crossed"  # 4.6e22 > 1e23 / 3
    assert st["eu-modification"].threshold == pytest.approx(1e23 / 3)
    assert st["eu-modification-systemic"].state == "below"  # 4.6e22 < 10 % of 1e25 / 3


def test_a_cycle_of_base_models_is_an_error() -> None:
    runs = [
        _run("a", Declaration("x", "y", "finetune"), _summary(None, 1e20)),
        _run("b", Declaration("y", "x", "finetune"), _summary(None, 1e20)),
    ]
    with pytest.raises(GovernanceError, match="cycle"):
        per_model(runs)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((None, "base"), "needs a model"),
        (("m", None, "training"), "unknown stage"),
        (("m", "m"), "its own base"),
        (("m", None, None, -5.0), "positive count"),
    ],
)
def test_bad_declarations(args: tuple[Any, ...], message: str) -> None:
    with pytest.raises(GovernanceError, match=message):
        declaration(*args)


def test_declaration_defaults() -> None:
    assert declaration(None) is None
    d = declaration(" m ", "base")
    assert d == Declaration("m", "base", "finetune", None)


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
