"""Bottleneck diagnosis: rules over a run's stored data that say why it is slow or wasteful,
with the evidence, what applying the suggestion would save and what to do (``computewatch
diagnose RUN``; every rule, threshold and the savings model are in ``docs/diagnosis.md``)."""

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from computewatch.config.thresholds import DEFAULTS, Thresholds, check_overrides
    from computewatch.diagnosis.engine import (
        Diagnosis,
        as_thresholds,
        diagnose,
        diagnose_run,
        diagnosed,
        run_rules,
    )
    from computewatch.diagnosis.findings import (
        AtStake,
        Evidence,
        Finding,
        JointSaving,
        Saving,
        Severity,
        TimeRange,
        joint_saving,
        ranked,
    )
    from computewatch.diagnosis.loader import NotApplicable, RunData

# Names load their module on first use: the views import computewatch.diagnosis.findings
# without loading the rules (start-up time of the CLI).
_HOME = {
    "Diagnosis": "engine",
    "as_thresholds": "engine",
    "diagnose": "engine",
    "diagnose_run": "engine",
    "diagnosed": "engine",
    "run_rules": "engine",
    "AtStake": "findings",
    "Evidence": "findings",
    "Finding": "findings",
    "JointSaving": "findings",
    "Saving": "findings",
    "joint_saving": "findings",
    "Severity": "findings",
    "TimeRange": "findings",
    "ranked": "findings",
    "NotApplicable": "loader",
    "RunData": "loader",
    "DEFAULTS": "computewatch.config.thresholds",
    "Thresholds": "computewatch.config.thresholds",
    "check_overrides": "computewatch.config.thresholds",
}


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(home if "." in home else f"{__name__}.{home}"), name)


__all__ = [
    "DEFAULTS",
    "AtStake",
    "Diagnosis",
    "Evidence",
    "Finding",
    "JointSaving",
    "NotApplicable",
    "RunData",
    "Saving",
    "Severity",
    "Thresholds",
    "TimeRange",
    "as_thresholds",
    "check_overrides",
    "diagnose",
    "diagnose_run",
    "diagnosed",
    "joint_saving",
    "ranked",
    "run_rules",
]
