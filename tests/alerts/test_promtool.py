"""The Prometheus rules under deploy/ pass the real promtool and match the built-in pack."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from computewatch.alerts import builtin_rules
from computewatch.alerts.sink import budget_rules

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"
RULES = DEPLOY / "computewatch.rules.yml"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="Debian package promtool missing")


@needs_promtool
def test_promtool_check_rules() -> None:
    assert PROMTOOL is not None
    r = subprocess.run(
        [PROMTOOL, "check", "rules", str(RULES)], capture_output=True, text=True, check=False
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SUCCESS" in r.stdout


@needs_promtool
def test_promtool_unit_tests() -> None:
    assert PROMTOOL is not None
    r = subprocess.run(
        [PROMTOOL, "test", "rules", "computewatch.rules.test.yml"],
        capture_output=True,
        text=True,
        check=False,
        cwd=DEPLOY,
    )
    assert r.returncode == 0, r.stdout + r.stderr


def test_every_builtin_rule_has_a_prometheus_alert_of_the_same_name() -> None:
    doc = yaml.safe_load(RULES.read_text())
    alerts = {r["alert"]: r for g in doc["groups"] for r in g["rules"] if "alert" in r}
    ours = [*builtin_rules().rules, *budget_rules(1.0, 1.0)]
    assert {r.name for r in ours} == set(alerts)
    for r in ours:
        assert alerts[r.name]["labels"]["severity"] == r.severity, r.name
        want = f"{r.for_seconds / 60:g}m" if r.for_seconds else None
        assert alerts[r.name].get("for") == want, r.name
        if r.expr and r.name.startswith(("GpuAllocatedIdle", "GpuThrottled", "GpuLowUtil", "JobF")):
            assert " ".join(alerts[r.name]["expr"].split()) == " ".join(r.expr.split())
