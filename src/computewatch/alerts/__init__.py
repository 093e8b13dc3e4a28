"""Alert rules over the exported metrics, a built-in rule pack, and notifications.

The same rules run in ``computewatch run --alerts`` and in the agent (both build their sink with
:func:`sink_from_args`); ``deploy/prometheus/computewatch.rules.yml`` says the built-in pack in
PromQL for teams that evaluate alerts in Prometheus. docs/alerts.md is the user's guide.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from computewatch.alerts.engine import Engine
    from computewatch.alerts.event import FIRING, RESOLVED, AlertEvent
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

# The names below load their module on first use, so that the command line (which only needs
# the flag definitions of computewatch.cli.alerts) starts without the rules engine.
_HOME = {
    "FIRING": "event", "RESOLVED": "event", "AlertEvent": "event", "Engine": "engine",
    "Target": "notify", "parse_target": "notify",
    "AlertsError": "rules", "Rule": "rules", "RulesError": "rules", "RuleSet": "rules",
    "builtin_rules": "rules", "load_rules": "rules", "parse_rules": "rules",
    "AlertSink": "sink", "budget_rules": "sink", "sink_from_args": "sink",
}  # fmt: skip


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{home}"), name)


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
