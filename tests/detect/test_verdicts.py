"""What a verdict promises whatever the model: ``uncertain`` under the stated minimum of samples
and duration and between the calibrated bounds; per-job evidence (tree-path contributions that
add up to the forest's vote); "not in the telemetry" only for absent signals; a hardware-bound
compute ceiling with a review flag that no label but a confident "not training" lowers; and the
shipped feature table recomputed from raw series."""

from __future__ import annotations

import csv
import json
import math
from collections import defaultdict
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from computewatch.detect import (
    MIN_DURATION_SECONDS,
    MIN_SAMPLES,
    MODEL_FEATURES,
    REVIEW_FLOP_DEFAULT,
    TABLE_FEATURES,
    GpuTelemetry,
    classify_series,
    compute_ceiling,
    job_features,
)
from computewatch.detect.model import Forest, parse_model

HERE = Path(__file__).parent
HELDOUT = HERE / "data" / "migprofiler_heldout.csv"
TABLE = resources.files("computewatch.detect") / "models" / "training_features.csv"
H100 = "NVIDIA H100 80GB HBM3"
GIB = 2**30


def _forest(
    tree: dict[str, list[Any]] | None = None, *, low: float = 0.2, high: float = 0.8
) -> Forest:
    """A one-tree forest: by default a single leaf at 0.5; bounds ``low``/``high``."""
    t = tree or {
        "left": [-1],
        "right": [-1],
        "feature": [0],
        "threshold": [0.0],
        "missing_left": [True],
        "p_training": [0.5],
    }
    doc = {
        "format": "computewatch-forest",
        "model_version": "test",
        "features": list(MODEL_FEATURES),
        "trees": [t],
        "calibration": {"method": "identity", "x": [0.0, 1.0], "y": [0.0, 1.0]},
        "bounds": {"not_training": low, "training": high},
    }
    return parse_model(json.dumps(doc), "test.json")


def _leaf(p: float) -> Forest:
    return _forest(
        {
            "left": [-1],
            "right": [-1],
            "feature": [0],
            "threshold": [0.0],
            "missing_left": [True],
            "p_training": [p],
        }
    )


def _gpu(n: int, step: float = 1.0, util: float | None = 0.97, mem: float | None = 40 * GIB) -> Any:
    metrics: dict[str, list[float | None]] = {}
    if util is not None:
        metrics["gpu_utilization_ratio"] = [util if i % 60 >= 5 else 0.3 for i in range(n)]
    if mem is not None:
        metrics["gpu_memory_used_bytes"] = [mem] * n
    return GpuTelemetry([i * step for i in range(n)], metrics)


# -- the minimum ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("samples", "step"),
    [
        (3, 1.0),  # 3 s of data
        (MIN_SAMPLES - 1, 60.0),  # long enough, too few samples
        (MIN_SAMPLES + 5, 0.5),  # enough samples, too short
    ],
)
def test_under_the_minimum_is_uncertain(samples: int, step: float) -> None:
    for forest in (_leaf(1.0), _leaf(0.0), None):
        v = classify_series([_gpu(samples, step)], model=forest)
        assert v.label == "uncertain", (samples, step, v.label)
        assert v.rule is not None and "minimum" in v.rule
        assert str(MIN_SAMPLES) in v.rule


def test_the_minimum_itself_is_enough() -> None:
    n = max(MIN_SAMPLES, int(MIN_DURATION_SECONDS) + 1)
    assert classify_series([_gpu(n)], model=_leaf(1.0)).label == "training"
    assert classify_series([_gpu(n)], model=_leaf(0.0)).label == "inference"


def test_idle_under_the_minimum_is_uncertain_too() -> None:
    v = classify_series([_gpu(5, util=0.0)], model=_leaf(0.0))
    assert v.label == "uncertain"


# -- the calibrated band ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("p", "label"),
    [(0.0, "inference"), (0.2, "inference"), (0.21, "uncertain"), (0.5, "uncertain"),
     (0.79, "uncertain"), (0.8, "training"), (1.0, "training")],
)  # fmt: skip
def test_between_the_bounds_is_uncertain(p: float, label: str) -> None:
    v = classify_series([_gpu(600)], model=_leaf(p))
    assert v.label == label
    assert v.p_training == pytest.approx(p)


def test_calibration_maps_the_vote() -> None:
    doc = json.loads(json.dumps({"x": [0.0, 0.5, 1.0], "y": [0.0, 0.1, 1.0]}))
    f = _leaf(0.5)
    g = parse_model(
        json.dumps(
            {
                "format": "computewatch-forest",
                "model_version": "t",
                "features": list(MODEL_FEATURES),
                "trees": [
                    {
                        "left": [-1],
                        "right": [-1],
                        "feature": [0],
                        "threshold": [0.0],
                        "missing_left": [True],
                        "p_training": [0.75],
                    }
                ],
                "calibration": {"method": "isotonic", **doc},
                "bounds": {"not_training": 0.2, "training": 0.8},
            }
        ),
        "t.json",
    )
    assert f.calibrate(0.5) == 0.5
    assert g.calibrate(0.75) == pytest.approx(0.55)
    v = classify_series([_gpu(600)], model=g)
    assert v.p_forest == pytest.approx(0.75) and v.p_training == pytest.approx(0.55)
    assert v.label == "uncertain"


@pytest.mark.parametrize(
    "calibration",
    [
        {"x": [0.0, 1.0], "y": [0.0]},
        {"x": [0.5, 0.2], "y": [0.0, 1.0]},
        {"x": [0.0, 1.0], "y": [1.0, 0.0]},
        {"x": [0.0, 1.0], "y": [0.0, 2.0]},
    ],
)
def test_bad_calibration_is_refused(calibration: dict[str, list[float]]) -> None:
    from computewatch.detect import DetectError

    doc = {
        "format": "computewatch-forest",
        "model_version": "t",
        "features": ["a"],
        "trees": [
            {
                "left": [-1],
                "right": [-1],
                "feature": [0],
                "threshold": [0.0],
                "missing_left": [True],
                "p_training": [0.5],
            }
        ],
        "calibration": calibration,
    }
    with pytest.raises(DetectError, match="not a usable detector model"):
        parse_model(json.dumps(doc), "m.json")


# -- per-job evidence -------------------------------------------------------------------------


def _split_forest() -> Forest:
    i = MODEL_FEATURES.index("util_mean")
    return _forest(
        {
            "left": [1, -1, -1],
            "right": [2, -1, -1],
            "feature": [i, 0, 0],
            "threshold": [0.5, 0.0, 0.0],
            "missing_left": [True, False, False],
            "p_training": [0.5, 0.1, 0.9],
        }
    )


def test_evidence_is_this_jobs_path() -> None:
    forest = _split_forest()
    busy = classify_series([_gpu(600, util=0.97)], model=forest)
    quiet = classify_series([_gpu(600, util=0.2)], model=forest)
    assert busy.evidence[0].feature == "util_mean"
    assert busy.evidence[0].contribution == pytest.approx(0.4)
    assert quiet.evidence[0].contribution == pytest.approx(-0.4)
    for v in (busy, quiet):
        total = v.evidence_base + sum(e.contribution for e in v.evidence)
        assert total == pytest.approx(v.p_forest, abs=1e-5)
        assert all(e.contribution != 0 for e in v.evidence)  # no feature that did not move it


def test_shipped_evidence_differs_between_jobs_and_adds_up() -> None:
    wave = _gpu(900)
    flat_low = GpuTelemetry(
        [float(i) for i in range(900)],
        {
            "gpu_utilization_ratio": [0.3 + 0.2 * math.sin(i / 9) ** 2 for i in range(900)],
            "gpu_memory_used_bytes": [(8 + (i % 100) / 50) * GIB for i in range(900)],
        },
    )
    a = classify_series([wave])
    b = classify_series([flat_low])
    for v in (a, b):
        assert v.evidence
        total = v.evidence_base + sum(e.contribution for e in v.evidence)
        # every feature's contribution is kept in ``contributions``; the top ones in evidence
        assert v.evidence_base + sum(v.contributions.values()) == pytest.approx(
            v.p_forest, abs=1e-5
        )
        assert (
            abs(total - v.p_forest)
            <= sum(
                abs(c)
                for f, c in v.contributions.items()
                if f not in {e.feature for e in v.evidence}
            )
            + 1e-9
        )
    assert [(e.feature, e.contribution) for e in a.evidence] != [
        (e.feature, e.contribution) for e in b.evidence
    ]


# -- "not in the telemetry" -------------------------------------------------------------------


def test_a_constant_series_is_not_missing_its_signal() -> None:
    flat = GpuTelemetry(
        [float(i) for i in range(600)],
        {"gpu_utilization_ratio": [1.0] * 600, "gpu_memory_used_bytes": [5 * GIB] * 600},
    )
    v = classify_series([flat])
    assert "gpu_utilization_ratio" not in v.missing
    assert not any(f.startswith("util_") for f in v.missing)
    assert v.missing == sorted(v.missing)


def test_absent_signals_are_named() -> None:
    only_mem = GpuTelemetry([float(i) for i in range(600)], {"gpu_memory_used_bytes": [1e9] * 600})
    v = classify_series([only_mem])
    assert "gpu_utilization_ratio" in v.missing
    assert "gpu_memory_used_bytes" not in v.missing


# -- the compute ceiling and the review flag --------------------------------------------------


def test_ceiling_is_devices_times_peak_times_duration() -> None:
    c = compute_ceiling([H100] * 8, 3600.0)
    peak = 1979e12  # catalog: H100-SXM, the highest dense peak (fp8)
    assert c.flop == pytest.approx(8 * peak * 3600)
    assert "fp8" in " ".join(c.assumptions)
    unknown = compute_ceiling(["Mystery GPU"], 10.0)
    assert unknown.flop > 0 and "not in the catalog" in " ".join(unknown.assumptions)


def _fleet(gpus: int, seconds: float, step: float = 60.0) -> list[GpuTelemetry]:
    n = int(seconds / step) + 1
    return [_gpu(n, step) for _ in range(gpus)]


def test_large_long_job_is_flagged_unless_confidently_not_training() -> None:
    big = _fleet(64, 30 * 86400, step=3600.0)  # 64 H100 for 30 days: ~3.3e23 FLOP possible
    names = [H100] * 64
    for forest, flagged in ((_leaf(1.0), True), (_leaf(0.5), True), (_leaf(0.0), False)):
        v = classify_series(big, gpu_names=names, model=forest)
        assert v.ceiling.flop >= REVIEW_FLOP_DEFAULT
        assert v.flag is flagged, v.label
    small = classify_series(_fleet(1, 3600), gpu_names=[H100], model=_leaf(0.5))
    assert small.label == "uncertain" and not small.flag
    lowered = classify_series(_fleet(1, 3600), gpu_names=[H100], model=_leaf(0.5), review_flop=1e18)
    assert lowered.flag


def test_too_short_but_huge_is_flagged() -> None:
    """Under the minimum the label is uncertain, and the ceiling still counts."""
    v = classify_series([_gpu(5, 1.0) for _ in range(8)], gpu_names=[H100] * 8, review_flop=1e15)
    assert v.label == "uncertain" and v.flag


def test_detect_json_sorts_flagged_first(cw: Any, tmp_path: Path) -> None:
    rows = ["job,timestamp,gpu,name,gpu_utilization_ratio,gpu_memory_used_bytes"]
    for job, gpus in (("small", 1), ("large", 8)):
        for t in range(0, 7200, 60):
            for g in range(gpus):
                u = 0.3 if t % 600 < 60 else 0.97
                rows.append(f"{job},{1_700_000_000 + t},{g},{H100},{u},{40 * GIB}")
    f = tmp_path / "jobs.csv"
    f.write_text("\n".join(rows) + "\n")
    cfg = tmp_path / "cw.toml"
    cfg.write_text("[governance]\ndetect_review_flop = 1e20\n")
    jobs = json.loads(cw.ok("detect", f, "--json", "--config", cfg).stdout)["jobs"]
    assert jobs[0]["job"] == "large"
    assert jobs[0]["flag"] is True and jobs[0]["ceiling"]["flop"] >= 1e20
    assert jobs[1]["flag"] is False
    text = cw.ok("detect", f, "--config", cfg).stdout.splitlines()
    assert text[0].startswith(str(f)) and " large" in text[0] and "REVIEW" in text[0]


# -- the shipped feature table is what the feature code computes ------------------------------


def _table() -> dict[tuple[str, str], dict[str, str]]:
    with TABLE.open(encoding="utf-8") as fh:
        rows = list(csv.DictReader(ln for ln in fh if not ln.startswith("#")))
    return {(r["job_id"], r["subsample_seconds"]): r for r in rows}


def _raw_jobs() -> dict[str, list[tuple[float, float, float]]]:
    out: dict[str, list[tuple[float, float, float]]] = defaultdict(list)
    with HELDOUT.open(encoding="utf-8") as fh:
        for r in csv.DictReader(fh):
            out[r["job"]].append(
                (
                    float(r["timestamp"]),
                    float(r["gpu_utilization_ratio"]),
                    float(r["gpu_memory_used_bytes"]),
                )
            )
    return out


def test_shipped_table_recomputed_from_raw_series() -> None:
    """Every model feature of the shipped rows of these jobs, at every subsampling interval,
    recomputed from the raw series by today's feature code: a changed feature definition
    (a percentile, a threshold, a window) changes a value and fails here."""
    table = _table()
    raw = _raw_jobs()
    assert len(raw) >= 6
    compared = 0
    for name, pts in raw.items():
        jid = name.split("-", 1)[1]
        for k in ("1", "5", "15", "60"):
            row = table.get((jid, k))
            if row is None:
                continue
            sub = pts[:: int(k)]
            g = GpuTelemetry(
                [t for t, _, _ in sub],
                {
                    "gpu_utilization_ratio": [u for _, u, _ in sub],
                    "gpu_memory_used_bytes": [m for _, _, m in sub],
                },
            )
            f = job_features([g])
            for feat in TABLE_FEATURES:
                want = row[feat]
                got = f[feat]
                if want == "":
                    assert math.isnan(got), (name, k, feat, got)
                else:
                    assert got == pytest.approx(float(want), abs=2e-6), (name, k, feat)
                compared += 1
    assert compared >= 6 * 3 * len(TABLE_FEATURES)
