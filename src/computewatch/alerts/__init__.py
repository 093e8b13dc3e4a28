"""Alert rules over the exported metrics, a built-in rule pack, and notifications.

The same rules run in ``computewatch run --alerts`` and in the agent (both build their sink with
:func:`sink_from_args`); ``deploy/prometheus/computewatch.rules.yml`` says the built-in pack in
PromQL for teams that evaluate alerts in Prometheus. docs/alerts.md is the user's guide.
"""

from __future__ import annotations

from computewatch.alerts.engine import FIRING, RESOLVED, AlertEvent, Engine
from computewatch.alerts.notify import Target, parse_target
from computewatch.alerts.rules import (
    AlertsError,
    Rule,
    RulesError,
    RuleSet,
    builtin_rules,
    load_rules,
    parse_rules,
)
from computewatch.alerts.sink import AlertSink, budget_rules, sink_from_args

__all__ = [
    "FIRING",
    "RESOLVED",
    "AlertEvent",
    "AlertSink",
    "AlertsError",
    "Engine",
    "Rule",
    "RuleSet",
    "RulesError",
    "Target",
    "budget_rules",
    "builtin_rules",
    "load_rules",
    "parse_rules",
    "parse_target",
    "sink_from_args",
]
