"""The cheap evasions against the calibrated detector (``computewatch detect``'s model), and
what it does on each (docs/detection.md, "Evasion"): a training job throttled to a duty cycle,
with noise injected, split across short runs, or mixed with inference is never cleared as
confidently "not training", so at scale the review flag still stands; a job split into pieces
under the minimum is ``uncertain`` piece by piece, and its pieces' ceilings add up to the
whole's (what an account's total catches); a miner-like constant load is never ``training``.

The series are synthetic: a 1 Hz hour of data-parallel training on 8 H100s (busy at 96% with
an evaluation dip every 10 minutes, memory allocated in the first 30 s then held)."""

from __future__ import annotations

import math
import random

import pytest

from computewatch.detect import (
    CALIBRATED_FILE,
    MIN_SAMPLES,
    GpuTelemetry,
    Verdict,
    classify_series,
    load_model,
)
from computewatch.detect.model import Forest

H100 = "NVIDIA H100 80GB HBM3"
GIB = 2**30
GPUS = 8
SECONDS = 3600
REVIEW = 1e19  # 8 H100 × 1 h ≈ 5.7e19 FLOP of ceiling: "large" at this threshold


@pytest.fixture(scope="module")
def model() -> Forest:
    return load_model(shipped=CALIBRATED_FILE)


def _training(seed: int = 1) -> tuple[list[float], list[float]]:
    r = random.Random(seed)
    util = [
        min(1.0, max(0.0, (0.35 if t % 600 < 20 else 0.96) + r.gauss(0, 0.02)))
        for t in range(SECONDS)
    ]
    mem = [(70 if t > 30 else 10 + 2 * t) * GIB for t in range(SECONDS)]
    return util, mem


def _inference() -> list[float]:
    return [0.3 + 0.3 * math.sin(t / 37) ** 2 for t in range(SECONDS)]


def _classify(model: Forest, util: list[float], mem: list[float], start: int = 0) -> Verdict:
    times = [float(start + i) for i in range(len(util))]
    gpus = [
        GpuTelemetry(times, {"gpu_utilization_ratio": util, "gpu_memory_used_bytes": mem})
        for _ in range(GPUS)
    ]
    return classify_series(gpus, gpu_names=[H100] * GPUS, model=model, review_flop=REVIEW)


def _throttled(duty: float) -> list[float]:
    util, _ = _training()
    return [u if t % 60 < 60 * duty else 0.0 for t, u in enumerate(util)]


def _noisy(sigma: float) -> list[float]:
    util, _ = _training()
    r = random.Random(7)
    return [min(1.0, max(0.0, u + r.gauss(0, sigma))) for u in util]


def _mixed(share: float) -> list[float]:
    util, _ = _training()
    inf = _inference()
    return [inf[t] if t % 1200 < 1200 * share else util[t] for t in range(SECONDS)]


EVASIONS = {
    "duty cycle 75%": lambda: _throttled(0.75),
    "duty cycle 50%": lambda: _throttled(0.5),
    "duty cycle 25%": lambda: _throttled(0.25),
    "noise σ 0.05": lambda: _noisy(0.05),
    "noise σ 0.30": lambda: _noisy(0.3),
    "inference mixed in, 25% of the time": lambda: _mixed(0.25),
    "inference mixed in, 75% of the time": lambda: _mixed(0.75),
}


@pytest.mark.parametrize("evasion", sorted(EVASIONS))
def test_an_evasion_is_never_cleared_and_stays_flagged(model: Forest, evasion: str) -> None:
    _, mem = _training()
    v = _classify(model, EVASIONS[evasion](), mem)
    assert v.label != "training" or v.p_training >= model.bounds.training  # type: ignore[union-attr]
    assert v.label != "inference", (evasion, v.p_training)
    assert v.flag, (evasion, v.label, v.flag_reason)


def test_throttled_under_the_idle_rule_is_flagged_by_its_busy_share(model: Forest) -> None:
    """At a 10% duty cycle the idle rule says ``other``; only the busy samples' share of the
    ceiling counts then: flagged when that share reaches the threshold."""
    util, mem = _throttled(0.1), _training()[1]
    times = [float(t) for t in range(SECONDS)]
    gpus = [
        GpuTelemetry(times, {"gpu_utilization_ratio": util, "gpu_memory_used_bytes": mem})
        for _ in range(GPUS)
    ]
    for review, flagged in ((1e18, True), (1e19, False)):
        v = classify_series(gpus, gpu_names=[H100] * GPUS, model=model, review_flop=review)
        assert v.label == "other" and v.rule is not None and v.rule.startswith("idle")
        assert v.flag is flagged
        busy = v.ceiling.flop * (v.features["util_active_fraction"] or 0.0)
        assert (busy >= review) is flagged


def test_the_untouched_job_is_flagged(model: Forest) -> None:
    v = _classify(model, *_training())
    assert v.label in ("training", "uncertain") and v.flag


def test_a_split_job_is_uncertain_piece_by_piece_and_adds_up(model: Forest) -> None:
    util, mem = _training()
    piece = MIN_SAMPLES - 5  # seconds at 1 Hz: under the minimum
    whole = _classify(model, util, mem)
    pieces = [
        _classify(model, util[s : s + piece], mem[s : s + piece], start=s)
        for s in range(0, SECONDS, piece)
    ]
    assert all(p.label == "uncertain" and "minimum" in (p.rule or "") for p in pieces)
    assert not any(p.flag for p in pieces)  # each piece alone is small: the per-job evasion
    total = sum(p.ceiling.flop for p in pieces)
    gaps = len(pieces) * GPUS * whole.ceiling.peaks[0]  # one second between pieces
    assert total == pytest.approx(whole.ceiling.flop - gaps + GPUS * whole.ceiling.peaks[0])


def test_a_miner_like_constant_load_is_not_training(model: Forest) -> None:
    v = _classify(model, [1.0] * SECONDS, [5.0 * GIB] * SECONDS)
    assert v.label == "uncertain"
    assert v.rule is not None and v.rule.startswith("constant load")
    assert v.flag  # large, and not cleared


def test_a_small_miner_is_not_flagged_nor_training(model: Forest) -> None:
    times = [float(t) for t in range(600)]
    g = GpuTelemetry(
        times, {"gpu_utilization_ratio": [1.0] * 600, "gpu_memory_used_bytes": [5 * GIB] * 600}
    )
    v = classify_series([g], gpu_names=[H100], model=model)
    assert v.label == "uncertain" and not v.flag


def test_the_same_workload_gets_the_same_verdict_at_any_length(model: Forest) -> None:
    """The same 8-GPU training loop watched for 1 h at 1 s and for 6 h and 72 h at 10 s: one
    label, votes within 0.1 (the 1.0.0 model called it training at 1-2 h and inference at
    6-72 h)."""
    verdicts = []
    for hours, step in ((1, 1.0), (6, 10.0), (72, 10.0)):
        n = int(hours * 3600 / step)
        r = random.Random(1)
        util = [
            min(1.0, max(0.0, (0.35 if (i * step) % 600 < 20 else 0.96) + r.gauss(0, 0.02)))
            for i in range(n)
        ]
        mem = [(70 if i * step > 30 else 10) * GIB for i in range(n)]
        times = [i * step for i in range(n)]
        g = GpuTelemetry(times, {"gpu_utilization_ratio": util, "gpu_memory_used_bytes": mem})
        verdicts.append(classify_series([g] * GPUS, gpu_names=[H100] * GPUS, model=model))
    assert len({v.label for v in verdicts}) == 1
    votes = [v.p_forest for v in verdicts]
    assert max(votes) - min(votes) <= 0.1
