"""`sink_from_args`, the factory `run --alerts` and the agent share."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from computewatch.alerts import AlertsError, AlertSink, RulesError, Target, sink_from_args
from computewatch.config import Config


def make(tmp_path: Path, **kw: object) -> AlertSink:
    args: dict[str, object] = {
        "notify": [],
        "budget_usd": None,
        "budget_kwh": None,
        "out": io.StringIO(),
        "dmi_root": str(tmp_path),
    }
    args.update(kw)
    rules = args.pop("rules", None)
    return sink_from_args(rules, **args)  # type: ignore[arg-type]


def test_builtin_pack_with_the_terminal_by_default(tmp_path: Path) -> None:
    sink = make(tmp_path)
    try:
        assert [t for t, _ in sink.deliveries] == [Target("terminal")]
        names = [c.rule.name for c in sink.engine.compiled]
        assert "GpuMemoryHigh" in names and "JobCostBudgetExceeded" not in names
    finally:
        sink.close()


def test_file_receivers_notify_targets_and_budgets(tmp_path: Path) -> None:
    f = tmp_path / "rules.yaml"
    f.write_text("receivers: ['webhook:http://127.0.0.1:9/x', terminal]\nrules: []\n")
    sink = make(
        tmp_path,
        rules=str(f),
        notify=["terminal", "slack:http://127.0.0.1:9/s"],
        budget_usd=5.0,
        budget_kwh=2.0,
        config=Config(usd_per_hour=3.0),
    )
    try:
        kinds = [t.kind for t, _ in sink.deliveries]
        assert kinds == ["terminal", "slack", "webhook"]
        names = [c.rule.name for c in sink.engine.compiled]
        assert names[-2:] == ["JobEnergyBudgetExceeded", "JobCostBudgetExceeded"]
    finally:
        sink.close()


def test_errors(tmp_path: Path) -> None:
    with pytest.raises(AlertsError, match="cost budget: a cost budget needs a price"):
        make(tmp_path, budget_usd=5.0, config=Config())
    with pytest.raises(AlertsError, match="--budget-kwh must be a positive number"):
        make(tmp_path, budget_kwh=0.0)
    with pytest.raises(AlertsError, match="--notify: notification target"):
        make(tmp_path, notify=["pager:x"])
    bad = tmp_path / "bad.yaml"
    bad.write_text("rules:\n  - name: X\n    expr: 'rate(x[5m] > 1'\n")
    with pytest.raises(RulesError, match=r"bad.yaml:3: rule X: expr column 12: expected '\)'"):
        make(tmp_path, rules=str(bad))
