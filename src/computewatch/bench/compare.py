"""Model against model: the same scenario for each variant on the same machine, one process per
variant and repetition, in interleaved order (repetition r starts at variant r, so a drift of
the machine hits every variant alike); medians over the repetitions and a Pareto front."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from computewatch.bench.inference import DEFAULT_INTERVAL
from computewatch.bench.loadgen import ScenarioSettings
from computewatch.bench.records import (
    BenchError,
    CompareResult,
    InferenceResult,
    LoadGenResult,
    Resources,
    SearchStep,
    ServerSearch,
    VariantResult,
)
from computewatch.bench.spawn import run_child
from computewatch.bench.targets import parse_target

__all__ = ["compare", "inference_from_dict", "interleaved_order", "pareto_front"]


def interleaved_order(names: Sequence[str], repetitions: int) -> list[list[str]]:
    """Repetition r runs the variants rotated by r: each takes each place in turn."""
    n = len(names)
    return [[names[(r + i) % n] for i in range(n)] for r in range(repetitions)]


def pareto_front(
    points: Sequence[tuple[float | None, float | None]], maximize_y: bool
) -> list[bool]:
    """Which points no other point dominates: x (energy) lower is better; y (accuracy) higher
    when ``maximize_y``, else lower (latency). Points with an unknown value are off the front."""

    def better_eq(a: tuple[float, float], b: tuple[float, float]) -> bool:
        y_ok = a[1] >= b[1] if maximize_y else a[1] <= b[1]
        return a[0] <= b[0] and y_ok

    known = [(x, y) if x is not None and y is not None else None for x, y in points]
    out = []
    for p in known:
        if p is None:
            out.append(False)
            continue
        dominated = any(q is not None and q != p and better_eq(q, p) for q in known)
        out.append(not dominated)
    return out


def inference_from_dict(d: Mapping[str, Any]) -> InferenceResult:
    """An :class:`InferenceResult` back from its JSON document."""
    search = d.get("search")
    return InferenceResult(
        name=d["name"],
        target=d["target"],
        scenario=d["scenario"],
        settings=dict(d["settings"]),
        loadgen=LoadGenResult(**d["loadgen"]),
        resources=Resources(**d["resources"]),
        search=None
        if search is None
        else ServerSearch(
            search["latency_bound_seconds"],
            search["best_qps"],
            [SearchStep(**s) for s in search["steps"]],
        ),
        notes=list(d.get("notes") or []),
    )


def _median(values: Sequence[float | int | None]) -> float | None:
    known = [float(v) for v in values if v is not None]
    return statistics.median(known) if known else None


def compare(
    variants: Mapping[str, str],
    *,
    scenario: str = "single-stream",
    repetitions: int = 3,
    accuracy: str | None = None,
    queries: str | None = None,
    target_qps: float | None = None,
    latency_bound_ms: float | None = None,
    duration: float = 1.0,
    min_query_count: int = 16,
    samples_per_query: int = 8,
    batch_size: int = 32,
    db: str | None = None,
    gpu_backend: str = "auto",
    interval: float = DEFAULT_INTERVAL,
    timeout: float | None = None,
    progress: Callable[[str], None] | None = None,
) -> CompareResult:
    """Run each variant (``name → module:function``) under one scenario, ``repetitions``
    times interleaved, each run a stored ``bench`` run of its own process. A variant whose
    target fails is marked failed (with the error) and the others go on."""
    if len(variants) < 1:
        raise BenchError("give at least one --variant NAME=TARGET")
    if repetitions < 1:
        raise BenchError(f"repetitions must be at least 1, not {repetitions}")
    ScenarioSettings(scenario=scenario, duration_seconds=duration)  # checks the settings
    for t in (*variants.values(), *(x for x in (accuracy, queries) if x)):
        parse_target(t)
    names = list(variants)
    order = interleaved_order(names, repetitions)
    results: dict[str, list[InferenceResult]] = {n: [] for n in names}
    errors: dict[str, str] = {}
    sizes: dict[str, int | None] = {}
    accuracies: dict[str, float | None] = {}
    group = f"{scenario}:{'|'.join(names)}"
    for rep, row in enumerate(order):
        for name in row:
            if name in errors:
                continue
            if progress is not None:
                progress(f"repetition {rep + 1}/{repetitions}: {name}")
            spec: dict[str, Any] = {
                "kind": "inference",
                "target": variants[name],
                "queries": queries,
                "scenario": scenario,
                "target_qps": target_qps,
                "latency_bound_ms": latency_bound_ms,
                "duration": duration,
                "min_query_count": min_query_count,
                "samples_per_query": samples_per_query,
                "batch_size": batch_size,
                "name": f"bench compare {name} #{rep + 1}",
                "tags": {"bench": "compare", "variant": name, "group": group},
                "db": db,
                "gpu_backend": gpu_backend,
                "interval": interval,
                "accuracy": accuracy if rep == 0 else None,
            }
            outcome = run_child(spec, timeout=timeout)
            doc = outcome.doc
            if outcome.status != "ok" or doc is None:
                errors[name] = outcome.error or outcome.status
                continue
            results[name].append(inference_from_dict(doc["result"]))
            if rep == 0:
                sizes[name] = doc.get("model_bytes")
                accuracies[name] = doc.get("accuracy")
    rows = []
    for name in names:
        reps = results[name]
        qps = [r.loadgen.qps if r.loadgen.qps is not None else r.resources.samples_per_second
               for r in reps]  # fmt: skip
        energy_methods = [r.resources.energy_method for r in reps if r.resources.energy_method]
        rss = _median([r.resources.peak_rss_bytes for r in reps])
        rows.append(
            VariantResult(
                name=name,
                target=variants[name],
                status="failed" if name in errors else "ok",
                error=errors.get(name),
                repetitions=reps,
                latency_p50_seconds=_median([r.loadgen.latency_seconds.get("p50") for r in reps]),
                latency_p90_seconds=_median([r.loadgen.latency_seconds.get("p90") for r in reps]),
                samples_per_second=_median(qps),
                energy_per_query_joules=_median(
                    [r.resources.energy_per_query_joules for r in reps]
                ),
                energy_method=energy_methods[0] if energy_methods else None,
                peak_rss_bytes=None if rss is None else int(rss),
                model_bytes=sizes.get(name),
                accuracy=accuracies.get(name),
                pareto=False,
            )
        )
    has_accuracy = any(v.accuracy is not None for v in rows)
    front = pareto_front(
        [
            (v.energy_per_query_joules, v.accuracy if has_accuracy else v.latency_p50_seconds)
            if v.status == "ok"
            else (None, None)
            for v in rows
        ],
        maximize_y=has_accuracy,
    )
    rows = [
        VariantResult(**{**v.__dict__, "pareto": on}) for v, on in zip(rows, front, strict=True)
    ]
    axes = ("energy_per_query_joules", "accuracy" if has_accuracy else "latency_p50_seconds")
    return CompareResult(scenario, repetitions, order, rows, axes)
