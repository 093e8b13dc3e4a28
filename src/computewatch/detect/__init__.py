"""Training-run detection: classify a job as training, inference or other from its GPU
telemetry alone, with a probability and the evidence.

The library entry point is :func:`classify_series` (per-GPU series in, a :class:`Verdict` out);
:func:`classify_trace` classifies every job of a file read by :mod:`computewatch.traces`. The
model shipped in ``detect/models/`` is documented in docs/detection.md.
"""

from __future__ import annotations

from computewatch.detect.classify import Evidence, Verdict, classify_series, classify_trace
from computewatch.detect.features import (
    EVIDENCE_FEATURES,
    MODEL_FEATURES,
    DetectError,
    GpuTelemetry,
    job_features,
)
from computewatch.detect.flops import FlopEstimate, estimate_flops
from computewatch.detect.model import Forest, load_model

__all__ = [
    "EVIDENCE_FEATURES",
    "MODEL_FEATURES",
    "DetectError",
    "Evidence",
    "FlopEstimate",
    "Forest",
    "GpuTelemetry",
    "Verdict",
    "classify_series",
    "classify_trace",
    "estimate_flops",
    "job_features",
    "load_model",
]
