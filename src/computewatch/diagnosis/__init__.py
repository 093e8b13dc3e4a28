"""Bottleneck diagnosis: rules over a run's stored data that say why it is slow or wasteful,
with the evidence, what is at stake and what to do (``computewatch diagnose RUN``; every rule and
threshold is described in ``docs/diagnosis.md``)."""

from computewatch.diagnosis.engine import (
    Diagnosis,
    as_thresholds,
    diagnose,
    diagnose_run,
    diagnosed,
    run_rules,
)
from computewatch.diagnosis.findings import AtStake, Evidence, Finding, Severity, TimeRange, ranked
from computewatch.diagnosis.loader import NotApplicable, RunData
from computewatch.diagnosis.thresholds import DEFAULTS, Thresholds, check_overrides

__all__ = [
    "DEFAULTS",
    "AtStake",
    "Diagnosis",
    "Evidence",
    "Finding",
    "NotApplicable",
    "RunData",
    "Severity",
    "Thresholds",
    "TimeRange",
    "as_thresholds",
    "check_overrides",
    "diagnose",
    "diagnose_run",
    "diagnosed",
    "ranked",
    "run_rules",
]
