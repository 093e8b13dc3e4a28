"""Classify a job from its GPU telemetry: training, inference or other, with ``p_training`` and
the evidence (the features that weighed most, with their values next to the medians of each
class in the training data), and for training a hardware-based FLOP estimate.

``label`` is ``other`` when the idle rule fires (utilization under 5% in 90% of the samples: a
rule, not learned, as the labelled data has no idle jobs); else ``training`` when
``p_training >= 0.5``, else ``inference``. Only totals, features and labels leave this module:
no command line, code or data of the job.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from computewatch.detect.features import (
    ACTIVE,
    MODEL_FEATURES,
    DetectError,
    GpuTelemetry,
    job_features,
)
from computewatch.detect.flops import FlopEstimate, estimate_flops
from computewatch.detect.model import Forest, load_model
from computewatch.traces import Trace

__all__ = ["Evidence", "Verdict", "classify_series", "classify_trace"]

THRESHOLD = 0.5
EVIDENCE_COUNT = 5


@dataclasses.dataclass(frozen=True, slots=True)
class Evidence:
    """One feature behind a verdict: its value, its weight in the model, and the medians of
    that feature for training and inference jobs in the training data."""

    feature: str
    value: float | None
    importance: float
    training_median: float | None
    inference_median: float | None


@dataclasses.dataclass(frozen=True, slots=True)
class Verdict:
    """The classification of one job."""

    job: str
    label: str  # training | inference | other
    p_training: float
    rule: str | None  # the rule that set the label, when one did (idle)
    evidence: list[Evidence]
    missing: list[str]  # model features the telemetry could not give
    features: dict[str, float | None]
    gpu_count: int
    duration_seconds: float
    flops: FlopEstimate | None
    model_version: str


def _num(v: float) -> float | None:
    return None if math.isnan(v) else v


def classify_series(
    gpus: Sequence[GpuTelemetry],
    *,
    job: str = "job",
    gpu_names: Sequence[str | None] | None = None,
    model: Forest | None = None,
    precision: str | None = None,
) -> Verdict:
    """Classify one job from its GPUs' series (any subset of the metrics in
    :data:`computewatch.traces.METRICS`, at any interval). The library entry point the agent
    calls: ``gpu_names`` (as nvidia-smi prints them) let a training verdict carry a FLOP
    estimate."""
    forest = model or load_model()
    feats = job_features(gpus)
    known = [f for f in MODEL_FEATURES if not math.isnan(feats[f])]
    if not known:
        raise DetectError(
            f"job {job}: neither GPU utilization nor memory used is in the telemetry; the "
            "detector needs at least one of them"
        )
    p = forest.p_training(feats)
    rule: str | None = None
    if not math.isnan(feats["util_p90"]) and feats["util_p90"] < ACTIVE:
        label = "other"
        rule = f"idle: GPU utilization under {ACTIVE:.0%} in 90% of the samples"
    else:
        label = "training" if p >= THRESHOLD else "inference"
    medians = forest.training.get("class_medians") or {}
    ranked = sorted(known, key=lambda f: -forest.importances.get(f, 0.0))[:EVIDENCE_COUNT]
    evidence = [
        Evidence(
            f,
            _num(feats[f]),
            round(forest.importances.get(f, 0.0), 4),
            (medians.get("training") or {}).get(f),
            (medians.get("inference") or {}).get(f),
        )
        for f in ranked
    ]
    durations = [(g.times[-1] - g.times[0]) if len(g.times) > 1 else 0.0 for g in gpus]
    flops = None
    if label == "training":
        names = list(gpu_names) if gpu_names is not None else [None] * len(gpus)
        utils = []
        for g in gpus:
            u = [
                v
                for v in g.metrics.get("gpu_utilization_ratio", ())
                if v is not None and not math.isnan(v)
            ]
            utils.append(sum(u) / len(u) if u else None)
        flops = estimate_flops(list(zip(names, durations, utils, strict=False)), precision)
    return Verdict(
        job=job,
        label=label,
        p_training=round(p, 4),
        rule=rule,
        evidence=evidence,
        missing=[f for f in MODEL_FEATURES if math.isnan(feats[f])],
        features={k: _num(v) for k, v in feats.items()},
        gpu_count=len(gpus),
        duration_seconds=feats["duration_seconds"],
        flops=flops,
        model_version=forest.version,
    )


def classify_trace(
    trace: Trace, *, model: Forest | None = None, precision: str | None = None
) -> list[Verdict]:
    """Classify every job of an imported trace."""
    forest = model or load_model()
    out = []
    for j in trace.jobs:
        gpus = [GpuTelemetry(g.times, g.metrics) for g in j.gpus]
        try:
            out.append(
                classify_series(
                    gpus,
                    job=j.job,
                    gpu_names=[g.name for g in j.gpus],
                    model=forest,
                    precision=precision,
                )
            )
        except DetectError as e:
            raise DetectError(f"{trace.path}: {e}") from None
    return out
