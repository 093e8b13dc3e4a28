"""``computewatch run``'s capture on anomaly: the alert pack's step-time regression detector,
evaluated on the run's own exported samples each tick; when it fires, one py-spy sample of the
command (and a PyTorch Profiler window where the job uses ``computewatch.torch``), at most once
per interval (:class:`computewatch.profiling.anomaly.AnomalyCapture`; docs/observability.md).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import psutil

from computewatch.alerts.detectors import StepTimeRegression
from computewatch.alerts.expr import History, InstantSamples
from computewatch.alerts.rules import builtin_rules
from computewatch.metrics.model import MetricSample
from computewatch.profiling.anomaly import AnomalyCapture
from computewatch.profiling.artifacts import artifact_dir

__all__ = ["RegressionCapture", "command_pids", "regression_capture", "regression_params"]


def regression_params(overrides: Mapping[str, float | None]) -> dict[str, float]:
    """The built-in ``StepTimeRegression`` rule's parameters, with ``overrides`` (None: keep)."""
    params: dict[str, float] = {}
    for rule in builtin_rules().rules:
        if rule.detector == "step_time_regression":
            params = dict(rule.params)
    for k, v in overrides.items():
        if v is not None:
            params[k] = float(v)
    return params


def command_pids() -> list[int]:
    """The supervised command: this process's children, oldest first (py-spy excluded)."""
    try:
        kids = psutil.Process(os.getpid()).children()
        kids.sort(key=lambda p: p.create_time())
        return [p.pid for p in kids if p.name() != "py-spy"]
    except psutil.Error:
        return []


class RegressionCapture:
    """A :class:`~computewatch.metrics.model.MetricsSink`: feeds each tick to the detector and
    triggers the capture when it fires (quick: the capture runs on its own thread)."""

    def __init__(self, capture: AnomalyCapture, params: Mapping[str, float], db_path: Path) -> None:
        self.capture = capture
        self.db_path = db_path
        self.detector = StepTimeRegression(params)
        self._history = History()
        self.fired = 0

    def on_metrics(self, now: float, samples: Sequence[MetricSample]) -> None:
        hits = self.detector.evaluate(InstantSamples(now, samples, self._history))
        for labels, (value, detail) in hits.items():
            job = dict(labels).get("job", "")
            self.fired += 1
            self.capture.trigger(
                f"step time regression of {job}: {value:.0%} slower than its baseline ({detail})",
                artifact_dir(self.db_path, job) if job else None,
            )

    def close(self) -> None:
        self.capture.wait(self.capture.seconds + 30)


def regression_capture(
    db_path: Path,
    *,
    min_interval: float,
    seconds: float,
    overrides: Mapping[str, float | None],
    prefix: str,
) -> RegressionCapture:
    """The sink for one ``computewatch run`` whose database is ``db_path`` (the run's
    artifacts directory is found from the job label: the run's id)."""
    cap = AnomalyCapture(
        artifact_dir(db_path, "unknown", create=False),
        command_pids,
        min_interval=min_interval,
        seconds=seconds,
        prefix=prefix,
    )
    return RegressionCapture(cap, regression_params(overrides), db_path)
