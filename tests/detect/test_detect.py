"""The shipped detector: it loads, reproduces its reported held-out evaluation on the real
held-out jobs, classifies real held-out series, gives evidence and a FLOP estimate, and does not
call an idle GPU training."""

from __future__ import annotations

import csv
import json
import math
import sys
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from computewatch.detect import (
    MODEL_FEATURES,
    DetectError,
    GpuTelemetry,
    classify_series,
    classify_trace,
    estimate_flops,
    job_features,
    load_model,
)
from computewatch.detect.model import parse_model
from computewatch.traces import read_trace

HERE = Path(__file__).parent
HELDOUT = HERE / "data" / "migprofiler_heldout.csv"
TABLE = resources.files("computewatch.detect") / "models" / "training_features.csv"


def _rows() -> list[dict[str, str]]:
    with TABLE.open(encoding="utf-8") as fh:
        return list(csv.DictReader(ln for ln in fh if not ln.startswith("#")))


def test_model_loads_with_version_and_evaluation() -> None:
    m = load_model()
    assert m.version == "1.0.0"
    assert m.features == MODEL_FEATURES
    held = m.evaluation["held_out"]
    assert held["jobs"] > 100
    assert set(held) >= {"accuracy", "precision_training", "recall_training", "confusion_matrix"}
    assert m.training["real_classes"] == ["training", "inference"]
    assert "MIGProfiler" in m.training["data"][0]


def test_held_out_jobs_at_the_reported_rate() -> None:
    """The shipped forest, evaluated by our own code on the held-out jobs of the feature table,
    gives exactly the confusion matrix written in the model file."""
    m = load_model()
    rows = [r for r in _rows() if r["split"] == "test" and r["subsample_seconds"] == "1"]
    tp = fp = fn = tn = 0
    for r in rows:
        feats = {f: math.nan if r[f] == "" else float(r[f]) for f in MODEL_FEATURES}
        pred = m.p_training(feats) >= 0.5
        truth = r["label"] == "training"
        tp += pred and truth
        fp += pred and not truth
        fn += truth and not pred
        tn += not pred and not truth
    held = m.evaluation["held_out"]
    assert held["confusion_matrix"]["rows_true_cols_predicted"] == [[tp, fn], [fp, tn]]
    assert held["accuracy"] == pytest.approx((tp + tn) / len(rows), abs=1e-4)


def test_train_and_test_jobs_do_not_overlap() -> None:
    rows = _rows()
    train = {r["job_id"] for r in rows if r["split"] == "train"}
    test = {r["job_id"] for r in rows if r["split"] == "test"}
    assert train and test and not train & test


def test_real_held_out_series_classified() -> None:
    verdicts = classify_trace(read_trace(HELDOUT))
    assert len(verdicts) == 6
    for v in verdicts:
        truth = v.job.split("-")[0]
        assert v.label in (truth, "uncertain"), (v.job, v.p_training)  # never the other class
        assert v.evidence and len(v.evidence) <= 5
        for e in v.evidence:
            assert e.feature in MODEL_FEATURES and e.value is not None and e.contribution != 0
            assert e.training_median is not None and e.inference_median is not None
        assert v.gpu_count == 1 and v.duration_seconds > 100
        if v.label == "training":
            assert v.flops is not None and v.flops.flop is not None
            assert v.flops.low is not None and v.flops.high is not None
            assert v.flops.low < v.flops.flop < v.flops.high
            assert "peak" in v.flops.method and "A100" in " ".join(v.flops.assumptions)
        else:
            assert v.flops is None


def _series(util: list[float], mem: float | None = 1e9) -> GpuTelemetry:
    metrics: dict[str, list[float | None]] = {"gpu_utilization_ratio": list(util)}
    if mem is not None:
        metrics["gpu_memory_used_bytes"] = [mem] * len(util)
    return GpuTelemetry([float(i) for i in range(len(util))], metrics)


def test_idle_is_not_training() -> None:
    v = classify_series([_series([0.0] * 3600)], job="idle")
    assert v.label == "other"
    assert v.rule is not None and v.rule.startswith("idle")
    assert v.flops is None


def test_flop_estimate_method_and_range() -> None:
    """GPU-seconds × utilization × the catalog's dense peak × 30-40% of it."""
    e = estimate_flops(
        [("NVIDIA H100 80GB HBM3", 600.0, 0.5), ("NVIDIA H100 80GB HBM3", 600.0, None)]
    )
    peak = 989.4e12  # catalog: H100-SXM, bf16 dense
    active = 600 * 0.5 + 600 * 1.0  # a GPU without utilization is taken as busy, said so
    assert e.high == pytest.approx(active * peak * 0.40)
    assert e.low == pytest.approx(active * peak * 0.30)
    assert e.flop == pytest.approx(active * peak * 0.35)
    assert any("taken as 100%" in a for a in e.assumptions)
    unknown = estimate_flops([("Some GPU", 600.0, 1.0)])
    assert unknown.flop is None and "not in the catalog" in unknown.assumptions[0]
    fp32 = estimate_flops([("NVIDIA H100 80GB HBM3", 1.0, 1.0)], "fp32")
    assert fp32.high == pytest.approx(67e12 * 0.40)


def test_any_subset_missing_features_listed() -> None:
    only_mem = GpuTelemetry([float(i) for i in range(100)], {"gpu_memory_used_bytes": [1e9] * 100})
    v = classify_series([only_mem])
    assert v.missing == ["gpu_utilization_ratio"]
    assert 0.0 <= v.p_training <= 1.0
    only_power = GpuTelemetry([0.0, 1.0, 2.0], {"gpu_power_watts": [100.0, 100.0, 100.0]})
    with pytest.raises(DetectError, match="neither GPU utilization nor memory"):
        classify_series([only_power])


def test_short_or_coarse_series_have_no_periodicity() -> None:
    f = job_features([_series([0.5, 0.6, 0.7])])
    assert math.isnan(f["util_acf_peak"]) and not math.isnan(f["util_mean"])


def test_periodicity_found() -> None:
    wave = [1.0 if i % 10 < 7 else 0.1 for i in range(600)]
    f = job_features([_series(wave)])
    assert f["util_acf_peak_lag_seconds"] == 10.0 and f["util_acf_peak"] > 0.9


def test_multi_gpu_correlation() -> None:
    wave = [1.0 if i % 10 < 7 else 0.1 for i in range(100)]
    f = job_features([_series(wave), _series(wave)])
    assert f["gpu_count"] == 2.0 and f["gpu_util_correlation"] == pytest.approx(1.0)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "{}",
        '{"format": "x"}',
        '{"format": "computewatch-forest", "model_version": 1, '
        '"features": ["a"], "trees": [{"left": [1], "right": [0], "feature": [0], '
        '"threshold": [0], "missing_left": [true], "p_training": [0]}]}',
    ],
)
def test_bad_model_file(text: str) -> None:
    with pytest.raises(DetectError, match="not a usable detector model"):
        parse_model(text, "m.json")


def test_detect_cli_json_and_runs(cw: Any, tmp_path: Path) -> None:
    out = json.loads(cw.ok("detect", HELDOUT, "--json").stdout)
    assert out["model"]["version"] == "2.0.0"  # detect: the calibrated model
    jobs = out["jobs"]
    for j in jobs:
        assert j["label"] in (j["job"].split("-")[0], "uncertain")
        assert set(j) >= {"label", "p_training", "evidence", "flops", "missing_features"}
        assert set(j) >= {"flag", "ceiling", "p_forest", "samples"}
    # a stored run (here an imported one) by reference, with run: and with --run
    log = tmp_path / "idle.csv"
    lines = ["timestamp, index, name, utilization.gpu [%], memory.used [MiB]"]
    lines += [
        f"2024/01/31 12:{s // 60:02d}:{s % 60:02d}.000, 0, NVIDIA H100 80GB HBM3, 0 %, 3 MiB"
        for s in range(300)
    ]
    log.write_text("\n".join(lines) + "\n")
    cw.ok("import", log, "--name", "idle-job")
    by_prefix = json.loads(cw.ok("detect", "run:idle-job", "--json").stdout)["jobs"]
    by_flag = json.loads(cw.ok("detect", "--run", "idle-job", "--json").stdout)["jobs"]
    assert by_prefix[0]["label"] == by_flag[0]["label"] == "other"
    assert by_prefix[0]["source"].startswith("run:")
    text = cw.ok("detect", HELDOUT).stdout
    assert "inference (p_training" in text and "ceiling" in text


def test_detect_our_own_run(cw: Any) -> None:
    """A run our sampler recorded (fake GPUs, labelled simulated) is read from the store."""
    cw.ok(
        "run",
        "--quiet",
        "--gpu-backend",
        "fake:2xH100-SXM",
        "--interval",
        "0.2",
        "--",
        sys.executable,
        "-c",
        "import time; time.sleep(1.5)",
    )
    (job,) = json.loads(cw.ok("detect", "--run", "last", "--json").stdout)["jobs"]
    assert job["simulated"] is True and job["gpu_count"] == 2
    assert job["label"] == "uncertain"  # 1.5 s of telemetry: under the minimum
    assert "minimum" in job["rule"]
    assert job["features"]["util_mean"] is not None
    assert job["features"]["power_mean_watts"] is not None  # evidence from the power series
    assert "[simulated GPUs]" in cw.ok("detect", "--run", "last").stdout
