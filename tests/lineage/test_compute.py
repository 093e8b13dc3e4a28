"""Cumulative compute per model: resumptions add up, a fine-tune adds to its base (SB 53's
cumulative rule), declarations are checked (the tiers judged on it: tests/governance)."""

from __future__ import annotations

from typing import Any

import pytest
from tests.lineage.declared_runs import BASE, TUNE, declared_run, flops_summary

from computewatch.lineage.compute import (
    Declaration,
    GovernanceError,
    declaration,
    lineage_cycle,
    per_model,
)


def test_resumed_runs_and_a_fine_tune_add_up() -> None:
    runs = [
        declared_run("a1", BASE, flops_summary(2e23, 2.5e23, tokens=1e12)),
        declared_run("a2", BASE, flops_summary(3e23, 3.5e23, tokens=2e12)),  # resumed after a crash
        declared_run("a3", BASE, flops_summary(None, 1e23)),  # restarted without the step counter
        declared_run("b1", TUNE, flops_summary(1e22, 1.2e22, tokens=1e11)),
        declared_run("e1", Declaration("acme-7b", None, "eval"), flops_summary(5e21, 6e21)),
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


def test_a_stored_cycle_of_base_models_sums_without_failing() -> None:
    runs = [
        declared_run("a", Declaration("x", "y", "finetune"), flops_summary(None, 1e20)),
        declared_run("b", Declaration("y", "x", "finetune"), flops_summary(None, 1e20)),
    ]
    models = per_model(runs)  # refused at ingest; one stored before never breaks the status
    assert models["x"].cumulative["hardware"].value == pytest.approx(2e20)
    assert models["y"].cumulative["hardware"].value == pytest.approx(1e20)
    assert not models["y"].base_known


def test_the_cycle_a_declaration_would_close_is_named() -> None:
    bases = {"b": ["c"], "c": ["a"], "z": ["a"]}
    assert lineage_cycle(bases, "a", "b") == "a -> b -> c -> a"
    assert lineage_cycle(bases, "a", "a") == "a -> a"
    assert lineage_cycle(bases, "d", "b") is None
    assert lineage_cycle({"y": ["x"]}, "x", "y") == "x -> y -> x"


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
