"""Benchmarking: MLPerf-style inference scenarios on MLCommons LoadGen, model against model,
scaling sweeps and resource gates for CI, each benchmark a stored run.

``inference(fn, make_queries, scenario=...)`` runs one LoadGen scenario on a batch function;
``compare({name: "module:function"})`` runs variants against each other; ``sweep(target,
{"batch_size": [1, 2, 4]})`` scales one up. See docs/bench.md.
"""

from computewatch.bench.compare import compare
from computewatch.bench.inference import inference
from computewatch.bench.records import (
    SCENARIOS,
    BenchError,
    CompareResult,
    InferenceResult,
    LoadGenResult,
    Resources,
    SweepPoint,
    SweepResult,
    TargetError,
    VariantResult,
)
from computewatch.bench.sweep import sweep

__all__ = [
    "SCENARIOS",
    "BenchError",
    "CompareResult",
    "InferenceResult",
    "LoadGenResult",
    "Resources",
    "SweepPoint",
    "SweepResult",
    "TargetError",
    "VariantResult",
    "compare",
    "inference",
    "sweep",
]
