"""Fuzzing the training-run detector: any model document gives a Forest or the detector's own
error (a calibration that is not a monotone map within 0-1, or bounds out of order, are
refused), a loaded calibration maps any vote into 0-1 without going down; and any telemetry
gives a verdict or the detector's own error, with a label among the four, ``p_training`` in
0-1, evidence that adds up to the forest's vote, and ``uncertain`` whenever the job is under the
stated minimum of samples and duration."""

from __future__ import annotations

import json
import math
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from computewatch.detect import (
    CALIBRATED_FILE,
    LABELS,
    MIN_DURATION_SECONDS,
    MIN_SAMPLES,
    DetectError,
    GpuTelemetry,
    classify_series,
    load_model,
)
from computewatch.detect.model import Forest, parse_model

BASE = settings.get_profile("computewatch-fuzz")  # tests/fuzz/conftest.py
MODEL = load_model(shipped=CALIBRATED_FILE)
LEAF = {
    "left": [-1],
    "right": [-1],
    "feature": [0],
    "threshold": [0.0],
    "missing_left": [True],
    "p_training": [0.5],
}


def _doc(calibration: Any, bounds: Any) -> str:
    doc = {"format": "computewatch-forest", "model_version": "f", "features": ["a"]}
    doc |= {"trees": [LEAF], "calibration": calibration, "bounds": bounds}
    return json.dumps(doc)


_points = st.lists(st.floats(allow_nan=True, allow_infinity=True), max_size=6)


@settings(BASE, max_examples=BASE.max_examples * 100)
@given(
    st.one_of(
        st.builds(lambda x, y: {"x": x, "y": y}, _points, _points),
        st.builds(lambda v: v, st.none() | st.text(max_size=4) | st.integers()),
    ),
    st.one_of(
        st.none(),
        st.builds(lambda lo, hi: {"not_training": lo, "training": hi}, st.floats(), st.floats()),
    ),
    st.floats(allow_nan=False, min_value=-1.0, max_value=2.0),
    st.floats(allow_nan=False, min_value=-1.0, max_value=2.0),
)
def test_any_calibration_is_a_monotone_map_or_refused(
    calibration: Any, bounds: Any, a: float, b: float
) -> None:
    try:
        forest = parse_model(_doc(calibration, bounds), "m.json")
    except DetectError as e:
        assert str(e).startswith("m.json: not a usable detector model")
        return
    assert isinstance(forest, Forest)
    lo, hi = sorted((a, b))
    assert 0.0 <= forest.calibrate(lo) <= forest.calibrate(hi) <= 1.0
    if forest.bounds is not None:
        assert 0.0 <= forest.bounds.not_training < forest.bounds.training <= 1.0


_METRICS = ("gpu_utilization_ratio", "gpu_memory_used_bytes", "gpu_power_watts")
_value = st.one_of(
    st.none(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, 1.0, 1e308, -1.0, 5e-324]),
    st.floats(min_value=0.0, max_value=1.0),
)


@st.composite
def _telemetry(draw: st.DrawFn) -> list[GpuTelemetry]:
    steps = draw(st.lists(st.floats(min_value=1e-3, max_value=600.0), min_size=1, max_size=40))
    times = [sum(steps[: i + 1]) for i in range(len(steps))]
    n = len(times)
    out = []
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        present = [m for m in _METRICS if draw(st.booleans())]
        out.append(
            GpuTelemetry(
                times, {m: draw(st.lists(_value, min_size=n, max_size=n)) for m in present}
            )
        )
    return out


@settings(BASE, max_examples=BASE.max_examples * 25)
@given(_telemetry())
def test_any_telemetry_gives_a_sound_verdict(series: list[GpuTelemetry]) -> None:
    gpus = len(series)
    try:
        v = classify_series(series, model=MODEL, gpu_names=["NVIDIA H100 80GB HBM3"] * gpus)
    except DetectError as e:
        assert "job job:" in str(e) or "no samples" in str(e)
        return
    assert v.label in LABELS
    assert 0.0 <= v.p_training <= 1.0 and 0.0 <= v.p_forest <= 1.0
    total = v.evidence_base + sum(v.contributions.values())
    assert math.isclose(total, v.p_forest, abs_tol=1e-5)
    if v.samples < MIN_SAMPLES or v.duration_seconds < MIN_DURATION_SECONDS:
        assert v.label == "uncertain" and v.rule is not None and "minimum" in v.rule
    assert v.ceiling.flop >= 0.0 and math.isfinite(v.ceiling.flop)
