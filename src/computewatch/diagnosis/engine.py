"""Run every rule over one run and rank what they find."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from computewatch.analysis.summary_types import DiagnosisSection
from computewatch.config.thresholds import DEFAULTS, Thresholds
from computewatch.diagnosis.findings import Finding, JointSaving, joint_saving, ranked
from computewatch.diagnosis.loader import NotApplicable, RunData
from computewatch.diagnosis.rules import (
    Rule,
    accelerator,
    data_loader,
    distributed,
    host,
    idle,
    steps,
    sync,
    throttling,
)
from computewatch.goodput.local import run_time
from computewatch.store import RunRow, StepRow, Store

DIAGNOSIS_SCHEMA_VERSION = 2  # 2: every finding carries its saving; the joint saving


def all_rules() -> Mapping[str, Rule]:
    """Every rule by id, in the order they are documented."""
    return {
        "data_starvation": data_loader.data_starvation,
        "low_gpu_utilization": accelerator.low_gpu_utilization,
        "host_device_sync": sync.host_device_sync,
        "low_mfu": accelerator.low_mfu,
        "gpu_memory_headroom": accelerator.gpu_memory_headroom,
        "cpu_bound": host.cpu_bound,
        "host_memory_pressure": host.memory_pressure,
        "io_bound": host.io_bound,
        "gpu_throttling": throttling.gpu_throttling,
        "step_regression": steps.step_regression,
        "outlier_steps": steps.outlier_steps,
        "idle_allocation": idle.idle_allocation,
        "stragglers": distributed.stragglers,
        "collective_communication": distributed.collective_communication,
    }


class Diagnosis(msgspec.Struct, frozen=True):
    """Ranked findings, what all their fixes together would save (``saving``), and for every
    rule that found nothing to look at, why."""

    findings: list[Finding]
    not_applicable: dict[str, str] = msgspec.field(default_factory=dict)
    failed: dict[str, str] = msgspec.field(default_factory=dict)
    checked: tuple[str, ...] = ()
    saving: JointSaving | None = None

    def as_dict(self) -> DiagnosisSection:
        """The JSON form: what the summary stores and ``diagnose --json`` prints."""
        joint = self.saving or joint_saving((), 0.0)
        return {
            "schema_version": DIAGNOSIS_SCHEMA_VERSION,
            "findings": [f.as_dict() for f in self.findings],
            "saving": joint.as_dict(),
            "checked": list(self.checked),
            "not_applicable": dict(self.not_applicable),
            "failed": dict(self.failed),
        }


def as_thresholds(thresholds: Thresholds | Mapping[str, Any] | None) -> Thresholds:
    """Defaults, a full :class:`Thresholds`, or the defaults with overrides (a ``[diagnosis]``
    mapping, checked)."""
    if thresholds is None:
        return DEFAULTS
    if isinstance(thresholds, Thresholds):
        return thresholds
    return DEFAULTS.with_overrides(thresholds)


def run_rules(
    data: RunData,
    thresholds: Thresholds | Mapping[str, Any] | None = None,
    rules: Mapping[str, Rule] | None = None,
) -> Diagnosis:
    """Apply each rule to ``data``. A rule that raises is reported under ``failed`` and the
    others go on: one broken rule never hides the rest."""
    th = as_thresholds(thresholds)
    found: list[Finding] = []
    na: dict[str, str] = {}
    failed: dict[str, str] = {}
    checked: list[str] = []
    for rule_id, rule in (rules or all_rules()).items():
        try:
            found += rule(data, th)
        except NotApplicable as e:
            na[rule_id] = str(e)
            continue
        except Exception as e:
            failed[rule_id] = f"{type(e).__name__}: {e}"
            continue
        checked.append(rule_id)
    joint = joint_saving(
        ((f.id, f.saving) for f in found), data.duration, data.usd_per_second, data.kwh_per_second
    )
    return Diagnosis(ranked(found), na, failed, tuple(checked), joint)


def diagnose_run(
    store: Store,
    run: RunRow,
    *,
    thresholds: Thresholds | Mapping[str, Any] | None = None,
    summary: Mapping[str, Any] | None = None,
    steps: Sequence[StepRow] | None = None,
) -> Diagnosis:
    """Load what the rules need from the store once (``steps``: the run's, when already read),
    then run them all."""
    th = as_thresholds(thresholds)
    return run_rules(RunData.load(store, run, summary, steps), th)


def diagnose(
    store: Store,
    run: RunRow,
    *,
    thresholds: Thresholds | Mapping[str, Any] | None = None,
    summary: Mapping[str, Any] | None = None,
) -> list[Finding]:
    """The run's findings, most to win first (by the seconds their fix saves, then money)."""
    return diagnose_run(store, run, thresholds=thresholds, summary=summary).findings


def diagnosed(
    store: Store,
    run: RunRow,
    summary: Mapping[str, Any],
    options: Any = None,
    steps: Sequence[StepRow] | None = None,
) -> DiagnosisSection:
    """The summary's ``diagnosis`` section, never raising (a run ends whatever the rules do).
    Thresholds come from the ``[diagnosis]`` section of ``options``: a
    :class:`computewatch.config.Config`, or accounting options holding one as ``config``."""
    try:
        config = getattr(options, "config", options)
        overrides = getattr(config, "diagnosis", None) or None
        section = diagnose_run(
            store, run, thresholds=overrides, summary=summary, steps=steps
        ).as_dict()
    except Exception as e:
        return {
            "schema_version": DIAGNOSIS_SCHEMA_VERSION,
            "findings": [],
            "error": f"diagnosis failed: {type(e).__name__}: {e}",
        }
    try:  # the run's time for goodput across restarts (the server rebuilds lineages from it)
        section["goodput"] = run_time(store, run, summary).as_json()
    except Exception:  # goodput then reads the run from the store, or goes without it
        pass
    return section
