"""The shipped detector: a decision forest stored as JSON, evaluated by this module.

Why JSON and not a pickle (or skops): loading it runs no code from the file, needs neither
scikit-learn nor the version it was trained with, and the file can be read and diffed. The
forest is exported from scikit-learn's ``RandomForestClassifier`` by
``scripts/train_detector.py``: per tree, per node, the children, the feature and threshold
(``x <= threshold`` goes left), where a missing value goes (scikit-learn's
``missing_go_to_left``), and at each leaf the fraction of training samples labelled training.
The forest's probability is the mean over its trees, as scikit-learn's.
"""

from __future__ import annotations

import dataclasses
import json
import math
import struct
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from computewatch.detect.features import DetectError

__all__ = ["FORMAT", "MODEL_FILE", "Forest", "load_model"]

FORMAT = "computewatch-forest"
MODEL_FILE = "detector.json"


def _f32(v: float) -> float:
    """``v`` rounded to single precision, as scikit-learn's trees compare their input (its
    thresholds can equal a float32 training value exactly)."""
    if math.isnan(v):
        return v
    try:
        out: float = struct.unpack("f", struct.pack("f", v))[0]
    except OverflowError:
        return math.copysign(math.inf, v)
    return out


@dataclasses.dataclass(frozen=True, slots=True)
class _Tree:
    left: tuple[int, ...]
    right: tuple[int, ...]
    feature: tuple[int, ...]
    threshold: tuple[float, ...]
    missing_left: tuple[bool, ...]
    p_training: tuple[float, ...]

    def predict(self, x: Sequence[float]) -> float:
        node = 0
        left, right, feature = self.left, self.right, self.feature
        while left[node] >= 0:
            v = x[feature[node]]
            if math.isnan(v):
                node = left[node] if self.missing_left[node] else right[node]
            elif v <= self.threshold[node]:
                node = left[node]
            else:
                node = right[node]
        return self.p_training[node]


@dataclasses.dataclass(frozen=True, slots=True)
class Forest:
    """The loaded model: its version, feature order, trees, and the documents that came with it
    (how it was trained, its held-out evaluation)."""

    version: str
    features: tuple[str, ...]
    trees: tuple[_Tree, ...]
    importances: dict[str, float]
    training: dict[str, Any]
    evaluation: dict[str, Any]

    def p_training(self, features: Mapping[str, float]) -> float:
        """Probability that the job is training, from its features (missing ones NaN)."""
        x = [_f32(float(features.get(f, math.nan))) for f in self.features]
        return sum(t.predict(x) for t in self.trees) / len(self.trees)


def _tree(doc: Mapping[str, Any], n_features: int) -> _Tree:
    t = _Tree(
        tuple(int(v) for v in doc["left"]),
        tuple(int(v) for v in doc["right"]),
        tuple(int(v) for v in doc["feature"]),
        tuple(float(v) for v in doc["threshold"]),
        tuple(bool(v) for v in doc["missing_left"]),
        tuple(float(v) for v in doc["p_training"]),
    )
    n = len(t.left)
    if not n or any(len(a) != n for a in (t.right, t.feature, t.threshold, t.missing_left)):
        raise ValueError("tree arrays of different lengths")
    if len(t.p_training) != n:
        raise ValueError("p_training has the wrong length")
    for i in range(n):
        if t.left[i] >= 0:
            if not (i < t.left[i] < n and i < t.right[i] < n):
                raise ValueError(f"node {i}: children out of order")
            if not 0 <= t.feature[i] < n_features:
                raise ValueError(f"node {i}: feature out of range")
    return t


def parse_model(text: str, where: str) -> Forest:
    """A forest from its JSON text; a malformed file is a :class:`DetectError`."""
    try:
        doc = json.loads(text)
        if doc.get("format") != FORMAT:
            raise ValueError(f"not a {FORMAT} file")
        features = tuple(str(f) for f in doc["features"])
        trees = tuple(_tree(t, len(features)) for t in doc["trees"])
        if not trees:
            raise ValueError("no trees")
        return Forest(
            str(doc["model_version"]),
            features,
            trees,
            {str(k): float(v) for k, v in dict(doc.get("importances") or {}).items()},
            dict(doc.get("training") or {}),
            dict(doc.get("evaluation") or {}),
        )
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise DetectError(f"{where}: not a usable detector model: {e}") from None
    except RecursionError:  # json's decoder recurses once per nested array or object
        raise DetectError(f"{where}: not a usable detector model: nests too deeply") from None


def load_model(path: str | Path | None = None) -> Forest:
    """The model at ``path``, default the one shipped in the package."""
    if path is None:
        ref = resources.files("computewatch.detect") / "models" / MODEL_FILE
        try:
            text = ref.read_text(encoding="utf-8")
        except OSError:
            raise DetectError(
                f"the shipped detector model ({MODEL_FILE}) is missing from the package"
            ) from None
        return parse_model(text, f"computewatch/detect/models/{MODEL_FILE}")
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise DetectError(f"{p}: cannot read the model: {e}") from None
    return parse_model(text, str(p))
