"""The shipped detector: a decision forest stored as JSON, evaluated by this module.

Why JSON and not a pickle (or skops): loading it runs no code from the file, needs neither
scikit-learn nor the version it was trained with, and the file can be read and diffed. The
forest is exported from scikit-learn's ``RandomForestClassifier`` by
``scripts/train_detector.py``: per tree, per node, the children, the feature and threshold
(``x <= threshold`` goes left), where a missing value goes (scikit-learn's
``missing_go_to_left``), and at each leaf the fraction of training samples labelled training.
The forest's vote is the mean over its trees, as scikit-learn's; the file's ``calibration``
(a monotone piecewise-linear map fitted on held-out votes: isotonic regression) turns the vote
into ``p_training``, and its ``bounds`` say where a calibrated probability is confident enough
for a label. A job's evidence is the forest's decision path: at each split the change in the
node's training fraction is credited to the split's feature (Saabas' tree-path
contributions), so the base rate plus the contributions is exactly the vote.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import json
import math
import struct
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from computewatch.detect.features import DetectError

__all__ = [
    "CALIBRATED_FILE",
    "FORMAT",
    "MODEL_FILE",
    "Bounds",
    "Calibration",
    "Forest",
    "load_model",
]

FORMAT = "computewatch-forest"
MODEL_FILE = "detector.json"
"""The library's default model (1.0.0): uncalibrated, no uncertain band (the agent's)."""
CALIBRATED_FILE = "detector-calibrated.json"
"""The calibrated model (2.0.0) with its bounds: ``computewatch detect``'s default."""


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

    def path(self, x: Sequence[float], out: list[float]) -> float:
        """Add each feature's change along ``x``'s path to ``out``; the root's fraction."""
        node = 0
        left, right, feature, p = self.left, self.right, self.feature, self.p_training
        while left[node] >= 0:
            v = x[feature[node]]
            if math.isnan(v):
                nxt = left[node] if self.missing_left[node] else right[node]
            elif v <= self.threshold[node]:
                nxt = left[node]
            else:
                nxt = right[node]
            out[feature[node]] += p[nxt] - p[node]
            node = nxt
        return p[0]


@dataclasses.dataclass(frozen=True, slots=True)
class Calibration:
    """A monotone map from the forest's vote to a probability: linear between the points
    ``(x[i], y[i])`` (``x`` increasing, ``y`` non-decreasing, both within 0-1), flat beyond."""

    method: str
    x: tuple[float, ...]
    y: tuple[float, ...]

    def __call__(self, p: float) -> float:
        x, y = self.x, self.y
        if p <= x[0]:
            return y[0]
        if p >= x[-1]:
            return y[-1]
        i = bisect.bisect_right(x, p) - 1
        if x[i + 1] == x[i]:
            return y[i + 1]
        return y[i] + (y[i + 1] - y[i]) * (p - x[i]) / (x[i + 1] - x[i])


IDENTITY = Calibration("identity (not calibrated)", (0.0, 1.0), (0.0, 1.0))


@dataclasses.dataclass(frozen=True, slots=True)
class Bounds:
    """Calibrated ``p_training`` at or above ``training``: training; at or below
    ``not_training``: inference; between: uncertain."""

    not_training: float = 0.2
    training: float = 0.8


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
    calibration: Calibration = IDENTITY
    bounds: Bounds | None = None  # None: an uncalibrated model, its vote at 0.5 decides

    def _x(self, features: Mapping[str, float]) -> list[float]:
        return [_f32(float(features.get(f, math.nan))) for f in self.features]

    def p_training(self, features: Mapping[str, float]) -> float:
        """The forest's vote for training (not calibrated), from the features (missing NaN)."""
        x = self._x(features)
        return sum(t.predict(x) for t in self.trees) / len(self.trees)

    def contributions(self, features: Mapping[str, float]) -> tuple[float, dict[str, float]]:
        """The base rate (mean root fraction) and, per feature, its tree-path contribution to
        this job's vote; base + sum of contributions == :meth:`p_training`."""
        x = self._x(features)
        acc = [0.0] * len(self.features)
        base = sum(t.path(x, acc) for t in self.trees) / len(self.trees)
        n = len(self.trees)
        return base, {f: acc[i] / n for i, f in enumerate(self.features)}

    def calibrate(self, vote: float) -> float:
        """The calibrated probability of training for a forest vote."""
        return self.calibration(vote)


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


def _calibration(doc: Any) -> Calibration:
    if doc is None:
        return IDENTITY
    x = tuple(float(v) for v in doc["x"])
    y = tuple(float(v) for v in doc["y"])
    if len(x) < 2 or len(x) != len(y):
        raise ValueError("calibration: x and y need the same length, at least 2")
    if any(not 0.0 <= v <= 1.0 for v in (*x, *y)):
        raise ValueError("calibration: points outside 0-1")
    if any(b < a for a, b in itertools.pairwise(x)) or any(b < a for a, b in itertools.pairwise(y)):
        raise ValueError("calibration: not monotone")
    return Calibration(str(doc.get("method", "isotonic")), x, y)


def _bounds(doc: Any) -> Bounds | None:
    if doc is None:
        return None
    b = Bounds(float(doc["not_training"]), float(doc["training"]))
    if not 0.0 <= b.not_training < b.training <= 1.0:
        raise ValueError("bounds: need 0 <= not_training < training <= 1")
    return b


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
            _calibration(doc.get("calibration")),
            _bounds(doc.get("bounds")),
        )
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise DetectError(f"{where}: not a usable detector model: {e}") from None
    except RecursionError:  # json's decoder recurses once per nested array or object
        raise DetectError(f"{where}: not a usable detector model: nests too deeply") from None


def load_model(path: str | Path | None = None, *, shipped: str = MODEL_FILE) -> Forest:
    """The model at ``path``, default the shipped one named ``shipped`` (:data:`MODEL_FILE`
    or :data:`CALIBRATED_FILE`)."""
    if path is None:
        ref = resources.files("computewatch.detect") / "models" / shipped
        try:
            text = ref.read_text(encoding="utf-8")
        except OSError:
            raise DetectError(
                f"the shipped detector model ({shipped}) is missing from the package"
            ) from None
        return parse_model(text, f"computewatch/detect/models/{shipped}")
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise DetectError(f"{p}: cannot read the model: {e}") from None
    return parse_model(text, str(p))
