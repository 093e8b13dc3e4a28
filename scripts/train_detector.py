"""Train the training-run detector on the feature table, evaluate it on the held-out jobs, and
write the model the package ships (a JSON forest, :mod:`computewatch.detect.model`).

    python scripts/train_detector.py            # needs the governance extra (scikit-learn)

Fixed seed; the split is by job (``split`` column of the table, made by
scripts/build_detection_dataset.py). Training rows: every subsampling interval of the training
jobs, plus copies with the memory features removed and with the utilization features removed,
so that the trees learn where a missing signal goes. The evaluation (precision, recall,
confusion matrix on held-out jobs; also per interval, per missing signal, and across setups:
trained on the A100 80 GB jobs only, tested on the A100 40 GB ones) is written into the model
file and printed; docs/detection.md quotes it.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any

from computewatch.detect.features import MODEL_FEATURES
from computewatch.detect.model import FORMAT, parse_model

ROOT = Path(__file__).resolve().parents[1]
TABLE = ROOT / "src/computewatch/detect/models/training_features.csv"
OUT = ROOT / "src/computewatch/detect/models/detector.json"
SEED = 20261130
MODEL_VERSION = "1.0.0"
UTIL = [f for f in MODEL_FEATURES if f.startswith("util_")]
MEM = [f for f in MODEL_FEATURES if f.startswith("mem_")]
PARAMS: dict[str, Any] = {
    "n_estimators": 60,
    "max_depth": 7,
    "min_samples_leaf": 3,
    "class_weight": "balanced",
    "random_state": SEED,
}


def load(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with path.open() as fh:
        header = [ln for ln in fh if ln.startswith("#")]
    with path.open() as fh:
        rows = list(csv.DictReader(ln for ln in fh if not ln.startswith("#")))
    return [h[1:].strip() for h in header], rows


def vec(r: dict[str, str], drop: list[str] | None = None) -> list[float]:
    drop = drop or []
    return [math.nan if f in drop or r[f] == "" else float(r[f]) for f in MODEL_FEATURES]


def scores(y: list[int], p: list[float]) -> dict[str, Any]:
    pred = [int(v >= 0.5) for v in p]
    tp = sum(1 for a, b in zip(y, pred, strict=True) if a == 1 and b == 1)
    fp = sum(1 for a, b in zip(y, pred, strict=True) if a == 0 and b == 1)
    fn = sum(1 for a, b in zip(y, pred, strict=True) if a == 1 and b == 0)
    tn = sum(1 for a, b in zip(y, pred, strict=True) if a == 0 and b == 0)
    prec = tp / (tp + fp) if tp + fp else None
    rec = tp / (tp + fn) if tp + fn else None
    return {
        "jobs": len(y),
        "accuracy": round((tp + tn) / len(y), 4) if y else None,
        "precision_training": None if prec is None else round(prec, 4),
        "recall_training": None if rec is None else round(rec, 4),
        "confusion_matrix": {
            "labels": ["training", "inference"],
            "rows_true_cols_predicted": [[tp, fn], [fp, tn]],
        },
    }


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
    from sklearn.ensemble import RandomForestClassifier  # governance extra: scripts only

    ap = argparse.ArgumentParser(description="train the training-run detector")
    ap.add_argument("--table", type=Path, default=TABLE)
    ap.add_argument("--out", type=Path, default=OUT)
    a = ap.parse_args(argv)
    header, rows = load(a.table)
    train = [r for r in rows if r["split"] == "train"]
    test = [r for r in rows if r["split"] == "test"]

    def fit(rs: list[dict[str, str]]) -> Any:
        x = [vec(r) for r in rs] + [vec(r, MEM) for r in rs] + [vec(r, UTIL) for r in rs]
        y = [int(r["label"] == "training") for r in rs] * 3
        return RandomForestClassifier(**PARAMS).fit(x, y)

    clf = fit(train)

    def evaluate(model: Any, rs: list[dict[str, str]], drop: list[str] | None = None) -> Any:
        if not rs:
            return None
        p = [float(v) for v in model.predict_proba([vec(r, drop) for r in rs])[:, 1]]
        return scores([int(r["label"] == "training") for r in rs], p)

    at1 = [r for r in test if r["subsample_seconds"] == "1"]
    evaluation: dict[str, Any] = {
        "held_out": evaluate(clf, at1),
        "held_out_by_interval": {
            f"{k} s": evaluate(clf, [r for r in test if r["subsample_seconds"] == k])
            for k in sorted({r["subsample_seconds"] for r in test}, key=int)
        },
        "held_out_utilization_only": evaluate(clf, at1, MEM),
        "held_out_memory_only": evaluate(clf, at1, UTIL),
    }
    cross = fit([r for r in rows if r["setup"] == "A100-80g"])
    evaluation["cross_setup_trained_80g_tested_40g"] = evaluate(
        cross, [r for r in rows if r["setup"] == "A100-40g" and r["subsample_seconds"] == "1"]
    )
    medians: dict[str, dict[str, float]] = {}
    for label in ("training", "inference"):
        rs = [r for r in train if r["label"] == label and r["subsample_seconds"] == "1"]
        medians[label] = {
            f: round(statistics.median(float(r[f]) for r in rs if r[f] != ""), 4)
            for f in MODEL_FEATURES
            if any(r[f] != "" for r in rs)
        }
    n_jobs = {
        s: {
            lab: len({r["job_id"] for r in rows if r["split"] == s and r["label"] == lab})
            for lab in ("training", "inference")
        }
        for s in ("train", "test")
    }
    doc = {
        "format": FORMAT,
        "model_version": MODEL_VERSION,
        "features": list(MODEL_FEATURES),
        "classes": ["inference", "training"],
        "importances": {
            f: round(float(v), 6)
            for f, v in zip(MODEL_FEATURES, clf.feature_importances_, strict=True)
        },
        "training": {
            "data": header,
            "jobs": n_jobs,
            "rows": len(train) * 3,
            "estimator": "sklearn.ensemble.RandomForestClassifier",
            "params": PARAMS,
            "seed": SEED,
            "class_medians": medians,
            "real_classes": ["training", "inference"],
            "not_learned": "other (idle) is a rule, not learned: no labelled idle, rendering, "
            "HPC or mining telemetry was available",
        },
        "evaluation": evaluation,
        "trees": export(clf),
    }
    text = json.dumps(doc, separators=(",", ":"))
    forest = parse_model(text, str(a.out))
    # our evaluator must agree with scikit-learn's on the held-out rows
    xs = [vec(r) for r in test] + [vec(r, MEM) for r in test] + [vec(r, UTIL) for r in test]
    theirs = clf.predict_proba(xs)[:, 1]
    ours = [forest.p_training(dict(zip(MODEL_FEATURES, x, strict=True))) for x in xs]
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
