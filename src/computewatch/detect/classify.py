"""Classify a job from its GPU telemetry: training, inference, other or uncertain, with a
calibrated ``p_training``, this job's evidence (the features that moved its verdict and by how
much: tree-path contributions), a hardware-bound compute ceiling and a review flag, and for
training a hardware-based FLOP estimate.

``label``:

- ``uncertain`` when the job is under the stated minimum (:data:`MIN_SAMPLES` samples and
  :data:`MIN_DURATION_SECONDS` of telemetry), whatever the model says; and when the calibrated
  ``p_training`` lies strictly between the model's bounds;
- ``other`` when the idle rule fires (utilization under 5% in 90% of the samples: a rule, not
  learned);
- ``training`` at or above the upper bound, ``inference`` at or below the lower one.

``flag`` is true when the ceiling (devices × highest dense peak × seconds) reaches the review
threshold and the label is not a confident "not training": ``inference`` from a calibrated
model; for ``other`` (idle by rule) only the busy samples' share of the ceiling counts, so a
large job throttled under the idle rule's 10% is still flagged. Only
totals, features and labels leave this module: no command line, code or data of the job.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from computewatch.detect.ceiling import REVIEW_FLOP_DEFAULT, ComputeCeiling, compute_ceiling
from computewatch.detect.features import (
    ACTIVE,
    MIN_DURATION_SECONDS,
    MIN_SAMPLES,
    SIGNALS,
    DetectError,
    GpuTelemetry,
    job_features,
    present_signals,
    sample_count,
)
from computewatch.detect.flops import FlopEstimate, estimate_flops
from computewatch.detect.model import Forest, load_model
from computewatch.traces import Trace

__all__ = ["Evidence", "Verdict", "classify_series", "classify_trace", "constant_load"]

EVIDENCE_COUNT = 5
CONSTANT_STD = 0.02
CONSTANT_LEVEL = 0.9
"""A constant load: utilization at or above 90% in 90% of the samples with a standard
deviation under 2 points, and memory flat (cv under 1%). A miner, a burn-in, a saturated batch
inference and a saturated training loop all look like this; the telemetry holds no rhythm to
tell them apart, so the verdict is at most ``uncertain`` (the compute ceiling still flags a
large one)."""
LABELS = ("training", "inference", "other", "uncertain")


@dataclasses.dataclass(frozen=True, slots=True)
class Evidence:
    """One feature that moved this job's verdict: its value, its contribution to the forest's
    vote along this job's decision path (signed: + towards training), and the medians of that
    feature for training and inference jobs in the training data."""

    feature: str
    value: float | None
    contribution: float
    training_median: float | None
    inference_median: float | None


@dataclasses.dataclass(frozen=True, slots=True)
class Verdict:
    """The classification of one job."""

    job: str
    label: str  # training | inference | other | uncertain
    p_training: float  # calibrated
    rule: str | None  # the rule that set the label, when one did (minimum, idle, constant)
    evidence: list[Evidence]
    missing: list[str]  # signals (metric names) the model reads that the telemetry lacks
    features: dict[str, float | None]
    gpu_count: int
    duration_seconds: float
    flops: FlopEstimate | None
    model_version: str
    p_forest: float  # the forest's vote, before calibration
    evidence_base: float  # the forest's base rate: the vote before any split
    contributions: dict[str, float]  # every model feature's path contribution
    samples: int
    ceiling: ComputeCeiling
    flag: bool
    flag_reason: str | None


def _num(v: float) -> float | None:
    return None if math.isnan(v) else v


def constant_load(feats: dict[str, float]) -> bool:
    """Whether the features are those of a constant load (:data:`CONSTANT_STD`)."""
    std, p10, mem_cv = feats["util_std"], feats["util_p10"], feats["mem_cv"]
    return (
        not math.isnan(std)
        and std < CONSTANT_STD
        and p10 >= CONSTANT_LEVEL
        and (math.isnan(mem_cv) or mem_cv < 0.01)
    )


def _short(samples: int, duration: float) -> str | None:
    if samples >= MIN_SAMPLES and duration >= MIN_DURATION_SECONDS:
        return None
    return (
        f"under the minimum: {samples} samples over {duration:.0f} s; a verdict needs at least "
        f"{MIN_SAMPLES} samples and {MIN_DURATION_SECONDS:.0f} s of telemetry"
    )


def classify_series(
    gpus: Sequence[GpuTelemetry],
    *,
    job: str = "job",
    gpu_names: Sequence[str | None] | None = None,
    model: Forest | None = None,
    precision: str | None = None,
    review_flop: float | None = None,
) -> Verdict:
    """Classify one job from its GPUs' series (any subset of the metrics in
    :data:`computewatch.traces.METRICS`, at any interval). The library entry point the agent
    calls: ``gpu_names`` (as nvidia-smi prints them) give the ceiling its peaks and a training
    verdict its FLOP estimate; ``review_flop`` (default :data:`REVIEW_FLOP_DEFAULT`) is the
    ceiling that sets ``flag``."""
    forest = model or load_model()
    feats = job_features(gpus)
    known = [f for f in forest.features if not math.isnan(feats.get(f, math.nan))]
    present = present_signals(gpus)
    if not known and not ({SIGNALS["util"], SIGNALS["mem"]} & present):
        raise DetectError(
            f"job {job}: neither GPU utilization nor memory used is in the telemetry; the "
            "detector needs at least one of them"
        )
    vote = forest.p_training(feats)
    base, contrib = forest.contributions(feats)
    p = forest.calibrate(vote)
    samples = sample_count(gpus)
    duration = feats["duration_seconds"]
    rule = _short(samples, duration)
    bounds = forest.bounds
    if rule is not None:
        label = "uncertain"
    elif not math.isnan(feats["util_p90"]) and feats["util_p90"] < ACTIVE:
        label = "other"
        rule = f"idle: GPU utilization under {ACTIVE:.0%} in 90% of the samples"
    elif bounds is None:  # an uncalibrated model: its vote at 0.5 decides, no band
        label = "training" if p >= 0.5 else "inference"
    elif constant_load(feats) and p > bounds.not_training:
        label = "uncertain"
        rule = (
            f"constant load: utilization ≥ {CONSTANT_LEVEL:.0%} with σ under "
            f"{CONSTANT_STD * 100:.0f} points and flat memory; no training rhythm to tell it "
            "from mining or batch inference"
        )
    elif p >= bounds.training:
        label = "training"
    elif p <= bounds.not_training:
        label = "inference"
    else:
        label = "uncertain"
    medians = forest.training.get("class_medians") or {}
    moved = [f for f in forest.features if abs(contrib.get(f, 0.0)) > 1e-9]
    ranked = sorted(moved, key=lambda f: -abs(contrib[f]))[:EVIDENCE_COUNT]
    evidence = [
        Evidence(
            f,
            _num(feats.get(f, math.nan)),
            round(contrib[f], 4),
            (medians.get("training") or {}).get(f),
            (medians.get("inference") or {}).get(f),
        )
        for f in ranked
    ]
    names = list(gpu_names) if gpu_names is not None else [None] * len(gpus)
    names += [None] * (len(gpus) - len(names))
    durations = [(g.times[-1] - g.times[0]) if len(g.times) > 1 else 0.0 for g in gpus]
    flops = None
    if label == "training":
        utils = []
        for g in gpus:
            u = [
                v
                for v in g.metrics.get("gpu_utilization_ratio", ())
                if v is not None and not math.isnan(v)
            ]
            utils.append(sum(u) / len(u) if u else None)
        flops = estimate_flops(list(zip(names, durations, utils, strict=False)), precision)
    ceiling = compute_ceiling(names[: len(gpus)], duration)
    threshold = REVIEW_FLOP_DEFAULT if review_flop is None else review_flop
    active = feats["util_active_fraction"]
    busy = ceiling.flop * (1.0 if math.isnan(active) else active)
    if label == "other":  # idle by rule: only the busy samples' share of the ceiling counts
        flag = busy >= threshold
        why = f"its busy samples alone ({active:.0%}) could have done {busy:.3g} FLOP"
    else:
        flag = ceiling.flop >= threshold and not (label == "inference" and bounds is not None)
        why = f"the hardware could have done {ceiling.flop:.3g} FLOP in this telemetry"
    flag_reason = (
        f"{why}, at or above the review threshold {threshold:.3g}, and the verdict is not a "
        "confident 'not training'"
        if flag
        else None
    )
    signals = {
        SIGNALS[f.split("_", 1)[0]] for f in forest.features if f.split("_", 1)[0] in SIGNALS
    }
    return Verdict(
        job=job,
        label=label,
        p_training=round(p, 4),
        rule=rule,
        evidence=evidence,
        missing=sorted(signals - present),
        features={k: _num(v) for k, v in feats.items()},
        gpu_count=len(gpus),
        duration_seconds=duration,
        flops=flops,
        model_version=forest.version,
        p_forest=round(vote, 6),
        evidence_base=base,
        contributions=contrib,
        samples=samples,
        ceiling=ceiling,
        flag=flag,
        flag_reason=flag_reason,
    )


def classify_trace(
    trace: Trace,
    *,
    model: Forest | None = None,
    precision: str | None = None,
    review_flop: float | None = None,
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
                    review_flop=review_flop,
                )
            )
        except DetectError as e:
            raise DetectError(f"{trace.path}: {e}") from None
    return out
