"""Training-run detection: classify a job as training, inference, other or uncertain from its
GPU telemetry alone, with a calibrated probability, this job's evidence, a hardware-bound
compute ceiling and a review flag.

The library entry point is :func:`classify_series` (per-GPU series in, a :class:`Verdict` out);
:func:`classify_trace` classifies every job of a file read by :mod:`computewatch.traces`. The
model shipped in ``detect/models/`` is documented in docs/detection.md.
"""

from __future__ import annotations

from computewatch.detect.ceiling import REVIEW_FLOP_DEFAULT, ComputeCeiling, compute_ceiling
from computewatch.detect.classify import (
    LABELS,
    Evidence,
    Verdict,
    classify_series,
    classify_trace,
)
from computewatch.detect.features import (
    CALIBRATED_FEATURES,
    EVIDENCE_FEATURES,
    MIN_DURATION_SECONDS,
    MIN_SAMPLES,
    MODEL_FEATURES,
    TABLE_FEATURES,
    DetectError,
    GpuTelemetry,
    job_features,
)
from computewatch.detect.flops import FlopEstimate, estimate_flops
from computewatch.detect.model import CALIBRATED_FILE, MODEL_FILE, Forest, load_model

__all__ = [
    "CALIBRATED_FEATURES",
    "CALIBRATED_FILE",
    "EVIDENCE_FEATURES",
    "LABELS",
    "MIN_DURATION_SECONDS",
    "MIN_SAMPLES",
    "MODEL_FEATURES",
    "MODEL_FILE",
    "REVIEW_FLOP_DEFAULT",
    "TABLE_FEATURES",
    "ComputeCeiling",
    "DetectError",
    "Evidence",
    "FlopEstimate",
    "Forest",
    "GpuTelemetry",
    "Verdict",
    "classify_series",
    "classify_trace",
    "compute_ceiling",
    "estimate_flops",
    "job_features",
    "load_model",
]
