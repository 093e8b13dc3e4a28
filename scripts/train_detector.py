"""Train the training-run detector on the feature table, calibrate it, evaluate it across
setups and sources, and write the model the package ships (a JSON forest,
:mod:`computewatch.detect.model`).

    python scripts/train_detector.py            # needs the governance extra (scikit-learn)

Fixed seed. Training rows: every subsampling interval of the training jobs, plus copies with
the memory features removed and with the utilization features removed, so that the trees learn
where a missing signal goes. Calibration: isotonic regression of the label on out-of-fold
forest votes (5 folds grouped by job, on the training split only), so that no vote it is fitted
on came from a forest that saw the job. Verdicts are scored as ``classify_series`` gives them:
under the minimum of samples and duration, or between the bounds, or a constant load:
``uncertain``, which counts as not found for recall. Evaluations, written into the model file
and quoted by docs/detection.md: the seeded by-job held-out split (per interval, per missing
signal); leave-one-setup-out (each setup in turn is the test set, the model trained and
calibrated without it); leave-one-source-out (the same per source, when the table has more
than one); and the reliability curve of the held-out split.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from computewatch.detect.classify import constant_load
from computewatch.detect.features import (
    ACTIVE,
    CALIBRATED_FEATURES,
    MIN_DURATION_SECONDS,
    MIN_SAMPLES,
)
from computewatch.detect.model import FORMAT, Bounds, parse_model

ROOT = Path(__file__).resolve().parents[1]
TABLE = ROOT / "src/computewatch/detect/models/training_features.csv"
OUT = ROOT / "src/computewatch/detect/models/detector-calibrated.json"
FEATURES = CALIBRATED_FEATURES
SEED = 20261130
MODEL_VERSION = "2.0.0"
BOUNDS = Bounds(not_training=0.2, training=0.8)  # fixed before any evaluation, not tuned
UTIL = [f for f in FEATURES if f.startswith("util_")]
MEM = [f for f in FEATURES if f.startswith("mem_")]
PARAMS: dict[str, Any] = {
    "n_estimators": 60,
    "max_depth": 7,
    "min_samples_leaf": 3,
    "class_weight": "balanced",
    "random_state": SEED,
}
Row = dict[str, str]


def load(path: Path) -> tuple[list[str], list[Row]]:
    with path.open() as fh:
        header = [ln for ln in fh if ln.startswith("#")]
    with path.open() as fh:
        rows = list(csv.DictReader(ln for ln in fh if not ln.startswith("#")))
    return [h[1:].strip() for h in header], rows


def vec(r: Row, drop: Sequence[str] = ()) -> list[float]:
    return [math.nan if f in drop or r[f] == "" else float(r[f]) for f in FEATURES]


def feats(r: Row, drop: Sequence[str] = ()) -> dict[str, float]:
    return dict(zip(FEATURES, vec(r, drop), strict=True))


def truth(r: Row) -> int:
    return int(r["label"] == "training")


def fit(rows: list[Row]) -> Any:
    from sklearn.ensemble import RandomForestClassifier

    x = [vec(r) for r in rows] + [vec(r, MEM) for r in rows] + [vec(r, UTIL) for r in rows]
    y = [truth(r) for r in rows] * 3
    return RandomForestClassifier(**PARAMS).fit(x, y)


def votes(clf: Any, rows: list[Row], drop: Sequence[str] = ()) -> list[float]:
    if not rows:
        return []
    return [float(v) for v in clf.predict_proba([vec(r, drop) for r in rows])[:, 1]]


def calibrator(rows: list[Row]) -> tuple[list[float], list[float]]:
    """Isotonic map from out-of-fold votes (grouped by job) to the label: its points."""
    from sklearn.isotonic import IsotonicRegression
    from sklearn.model_selection import GroupKFold

    ys = [truth(r) for r in rows]
    oof = [0.0] * len(rows)
    groups = [r["job_id"] for r in rows]
    for tr, te in GroupKFold(n_splits=5).split(rows, ys, groups):
        clf = fit([rows[i] for i in tr])
        for i, v in zip(te, votes(clf, [rows[i] for i in te]), strict=True):
            oof[i] = v
    # equal class priors: the 1:4 training:inference ratio is the benchmark suite's, not a
    # fleet's; weighting each class to the same total makes p_training the probability under
    # even odds (the forest is trained class-balanced for the same reason)
    n_pos = sum(ys)
    w = [0.5 / n_pos if y else 0.5 / (len(ys) - n_pos) for y in ys]
    iso = IsotonicRegression(y_min=0.0, y_max=1.0, out_of_bounds="clip").fit(oof, ys, w)
    xs = [round(float(v), 6) for v in iso.X_thresholds_]
    cal = [round(float(v), 6) for v in iso.y_thresholds_]
    if xs[0] > 0.0:
        xs, cal = [0.0, *xs], [cal[0], *cal]
    if xs[-1] < 1.0:
        xs, cal = [*xs, 1.0], [*cal, cal[-1]]
    return xs, cal


def samples_of(r: Row) -> int:
    d, i = float(r["duration_seconds"]), float(r["interval_seconds"] or "nan")
    return round(d / i) + 1 if i > 0 else 1


def verdict(r: Row, p: float, drop: Sequence[str] = ()) -> str:
    """The label ``classify_series`` gives a job with these features and calibrated ``p``."""
    f = feats(r, drop)
    if samples_of(r) < MIN_SAMPLES or float(r["duration_seconds"]) < MIN_DURATION_SECONDS:
        return "uncertain"
    if not math.isnan(f["util_p90"]) and f["util_p90"] < ACTIVE:
        return "other"
    if constant_load(f) and p > BOUNDS.not_training:
        return "uncertain"
    if p >= BOUNDS.training:
        return "training"
    if p <= BOUNDS.not_training:
        return "inference"
    return "uncertain"


def scores(rows: list[Row], labels: list[str], raw: list[float]) -> dict[str, Any]:
    pos = [(r, lab) for r, lab in zip(rows, labels, strict=True) if truth(r)]
    neg = [(r, lab) for r, lab in zip(rows, labels, strict=True) if not truth(r)]
    found = sum(1 for _, lab in pos if lab == "training")
    false = sum(1 for _, lab in neg if lab == "training")
    raw_tp = sum(1 for r, v in zip(rows, raw, strict=True) if truth(r) and v >= 0.5)
    raw_fp = sum(1 for r, v in zip(rows, raw, strict=True) if not truth(r) and v >= 0.5)

    def frac(a: int, b: int) -> float | None:
        return round(a / b, 4) if b else None

    return {
        "jobs": len(rows),
        "training_jobs": len(pos),
        "other_jobs": len(neg),
        "recall_training": frac(found, len(pos)),
        "training_called_uncertain": sum(1 for _, lab in pos if lab == "uncertain"),
        "training_called_not_training": sum(1 for _, lab in pos if lab in ("inference", "other")),
        "false_training_rate": frac(false, len(neg)),
        "non_training_called_uncertain": sum(1 for _, lab in neg if lab == "uncertain"),
        "precision_training": frac(found, found + false),
        "forest_vote_at_0.5": {
            "recall_training": frac(raw_tp, len(pos)),
            "false_training_rate": frac(raw_fp, len(neg)),
        },
    }


def evaluate(
    clf: Any, cal: Callable[[float], float], rows: list[Row], drop: Sequence[str] = ()
) -> dict[str, Any] | None:
    if not rows:
        return None
    raw = votes(clf, rows, drop)
    labels = [verdict(r, cal(v), drop) for r, v in zip(rows, raw, strict=True)]
    return scores(rows, labels, raw)


def cal_fn(xs: list[float], ys: list[float]) -> Callable[[float], float]:
    doc = {
        "format": FORMAT,
        "model_version": "cal",
        "features": ["x"],
        "trees": [
            {
                "left": [-1],
                "right": [-1],
                "feature": [0],
                "threshold": [0.0],
                "missing_left": [True],
                "p_training": [0.0],
            }
        ],
        "calibration": {"method": "isotonic", "x": xs, "y": ys},
    }
    return parse_model(json.dumps(doc), "calibration").calibrate


def held_out_by(rows: list[Row], key: str) -> dict[str, Any]:
    """Each value of ``key`` (setup, source) in turn held out: trained and calibrated on the
    rest, scored on it (all intervals, and 1 s samples alone)."""
    out: dict[str, Any] = {}
    for value in sorted({r[key] for r in rows}):
        rest = [r for r in rows if r[key] != value]
        test = [r for r in rows if r[key] == value]
        if not rest or len({truth(r) for r in rest}) < 2:
            out[value] = {"not_evaluated": f"nothing left to train on without {key} {value}"}
            continue
        clf = fit(rest)
        cal = cal_fn(*calibrator(rest))
        out[value] = {
            "trained_on": sorted({r[key] for r in rest}),
            "all_intervals": evaluate(clf, cal, test),
            "at_1s": evaluate(clf, cal, [r for r in test if r["subsample_seconds"] == "1"]),
        }
    return out


def reliability(p: list[float], y: list[int], bins: int = 10) -> list[dict[str, Any]]:
    """Per bin of calibrated p: jobs, mean p, the fraction training, and that fraction under
    even odds (each class weighted to the same total, as the calibration is)."""
    n_pos = max(sum(y), 1)
    n_neg = max(len(y) - sum(y), 1)
    out = []
    for b in range(bins):
        lo, hi = b / bins, (b + 1) / bins
        idx = [i for i, v in enumerate(p) if lo <= v < hi or (b == bins - 1 and v == 1.0)]
        if not idx:
            continue
        out.append(
            {
                "bin": f"{lo:.1f}-{hi:.1f}",
                "jobs": len(idx),
                "mean_p_training": round(sum(p[i] for i in idx) / len(idx), 4),
                "fraction_training": round(sum(y[i] for i in idx) / len(idx), 4),
                "fraction_training_even_odds": round(
                    (sum(y[i] for i in idx) / n_pos)
                    / (sum(y[i] for i in idx) / n_pos + sum(1 - y[i] for i in idx) / n_neg),
                    4,
                ),
            }
        )
    return out


def export(clf: Any) -> list[dict[str, Any]]:
    trees = []
    train_col = list(clf.classes_).index(1)
    for est in clf.estimators_:
        t = est.tree_
        value = t.value[:, 0, :]
        sums = value.sum(axis=1)
        p = [float(v[train_col] / s) if s else 0.0 for v, s in zip(value, sums, strict=True)]
        trees.append(
            {
                "left": [int(v) for v in t.children_left],
                "right": [int(v) for v in t.children_right],
                "feature": [max(int(v), 0) for v in t.feature],
                "threshold": [float(v) for v in t.threshold],
                "missing_left": [bool(v) for v in t.missing_go_to_left],
                "p_training": [round(v, 6) for v in p],
            }
        )
    return trees


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="train the training-run detector")
    ap.add_argument("--table", type=Path, default=TABLE)
    ap.add_argument("--out", type=Path, default=OUT)
    a = ap.parse_args(argv)
    header, rows = load(a.table)
    train = [r for r in rows if r["split"] == "train"]
    test = [r for r in rows if r["split"] == "test"]
    clf = fit(train)
    xs, ys = calibrator(train)
    cal = cal_fn(xs, ys)
    at1 = [r for r in test if r["subsample_seconds"] == "1"]
    held_p = [cal(v) for v in votes(clf, test)]
    evaluation: dict[str, Any] = {
        "held_out": evaluate(clf, cal, at1),
        "held_out_by_interval": {
            f"{k} s": evaluate(clf, cal, [r for r in test if r["subsample_seconds"] == k])
            for k in sorted({r["subsample_seconds"] for r in test}, key=int)
        },
        "held_out_utilization_only": evaluate(clf, cal, at1, MEM),
        "held_out_memory_only": evaluate(clf, cal, at1, UTIL),
        "leave_one_setup_out": held_out_by(rows, "setup"),
        "leave_one_source_out": held_out_by(rows, "source")
        if len({r["source"] for r in rows}) > 1
        else {"not_evaluated": "the table holds one source"},
        "reliability_held_out": reliability(held_p, [truth(r) for r in test]),
    }
    medians: dict[str, dict[str, float]] = {}
    for label in ("training", "inference"):
        rs = [r for r in train if r["label"] == label and r["subsample_seconds"] == "1"]
        medians[label] = {
            f: round(statistics.median(float(r[f]) for r in rs if r[f] != ""), 4)
            for f in FEATURES
            if any(r[f] != "" for r in rs)
        }
    n_jobs = {
        s: {
            lab: len({r["job_id"] for r in rows if r["split"] == s and r["label"] == lab})
            for lab in sorted({r["label"] for r in rows})
        }
        for s in ("train", "test")
    }
    doc = {
        "format": FORMAT,
        "model_version": MODEL_VERSION,
        "features": list(FEATURES),
        "classes": ["not training", "training"],
        "importances": {
            f: round(float(v), 6) for f, v in zip(FEATURES, clf.feature_importances_, strict=True)
        },
        "calibration": {
            "method": "isotonic regression on out-of-fold forest votes (5 folds by job, "
            "training split), classes weighted to even odds",
            "x": xs,
            "y": ys,
        },
        "bounds": {"not_training": BOUNDS.not_training, "training": BOUNDS.training},
        "training": {
            "data": header,
            "sources": sorted({r["source"] for r in rows}),
            "setups": sorted({r["setup"] for r in rows}),
            "jobs": n_jobs,
            "rows": len(train) * 3,
            "estimator": "sklearn.ensemble.RandomForestClassifier",
            "params": PARAMS,
            "seed": SEED,
            "class_medians": medians,
            "real_classes": sorted({r["label"] for r in rows}),
            "not_learned": "other (idle) is a rule, not learned; a constant load is uncertain "
            "by rule: no labelled idle, rendering, HPC or mining telemetry was available",
        },
        "evaluation": evaluation,
        "trees": export(clf),
    }
    text = json.dumps(doc, separators=(",", ":"))
    forest = parse_model(text, str(a.out))
    # our evaluator must agree with scikit-learn's on the held-out rows
    xs_ = [vec(r) for r in test] + [vec(r, MEM) for r in test] + [vec(r, UTIL) for r in test]
    theirs = clf.predict_proba(xs_)[:, 1]
    ours = [forest.p_training(dict(zip(FEATURES, x, strict=True))) for x in xs_]
    worst = max(abs(float(t) - o) for t, o in zip(theirs, ours, strict=True))
    if worst > 1e-5:
        print(f"the exported forest disagrees with scikit-learn by {worst}", file=sys.stderr)
        return 1
    a.out.write_text(text + "\n")
    print(json.dumps({"jobs": n_jobs, "evaluation": evaluation}, indent=1))
    print(f"wrote {a.out} ({len(text)} bytes); exported forest matches scikit-learn to {worst:.1e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
