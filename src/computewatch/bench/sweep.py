"""Scaling sweeps: a step function made by ``TARGET(**params)`` timed at each point of a grid
(``batch_size=1,2,4,...``, ``threads=...``), each point in its own process under an optional
address-space limit, so a point that runs out of memory or crashes is recorded and the sweep
goes on. The knee is where throughput stops growing along the first parameter."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from computewatch.bench.inference import DEFAULT_INTERVAL
from computewatch.bench.records import (
    BenchError,
    BenchUsageError,
    SweepPoint,
    SweepResult,
    as_dict,
)
from computewatch.bench.spawn import run_child
from computewatch.bench.targets import parse_target
from computewatch.paths import resolve_db_path
from computewatch.store import Store, StoreError

__all__ = ["KNEE_GAIN", "find_knee", "parse_param", "sweep"]

KNEE_GAIN = 0.10
"""A point is the knee when no later point of its line has 10% more throughput."""

ParamValue = int | float | str


def _value(text: str) -> ParamValue:
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    return text


def parse_param(text: str) -> tuple[str, list[ParamValue]]:
    """``batch_size=1,2,4`` → ``("batch_size", [1, 2, 4])``; numbers become int or float."""
    name, sep, values = text.partition("=")
    name = name.strip()
    items = [v.strip() for v in values.split(",")]
    if not sep or not name.isidentifier() or not values.strip() or any(not v for v in items):
        raise BenchUsageError(f"--param {text!r}: expected NAME=V1,V2,... such as batch_size=1,2,4")
    return name, [_value(v) for v in items]


def find_knee(throughputs: Sequence[float | None], gain: float = KNEE_GAIN) -> int | None:
    """The index of the first point after which no point gains more than ``gain`` over it;
    None when throughput still grows at the last point (no knee inside the sweep), or fewer
    than two points have a throughput."""
    known = [(i, t) for i, t in enumerate(throughputs) if t is not None]
    if len(known) < 2:  # one point says nothing of where throughput stops growing
        return None
    for j, (i, t) in enumerate(known):
        if all(u <= t * (1 + gain) for _, u in known[j + 1 :]):
            if j == len(known) - 1 and j > 0 and t > known[j - 1][1] * (1 + gain):
                return None
            return i
    return None


def sweep(
    target: str,
    params: Mapping[str, Sequence[ParamValue]],
    *,
    steps: int = 20,
    warmup: int = 2,
    memory_limit_bytes: int | None = None,
    db: str | None = None,
    gpu_backend: str = "auto",
    interval: float = DEFAULT_INTERVAL,
    timeout: float | None = None,
    progress: Callable[[str], None] | None = None,
) -> SweepResult:
    """Time ``steps`` calls of ``TARGET(**point)()`` at each point of the grid, each point a
    stored ``bench`` run in its own process (``threads`` also sets OMP/MKL/OpenBLAS threads)."""
    parse_target(target)
    if not params:
        raise BenchError("give at least one --param NAME=V1,V2,...")
    if steps < 1 or warmup < 0:
        raise BenchError("steps must be at least 1 and warm-up steps at least 0")
    names = list(params)
    first, rest = names[0], names[1:]
    points: list[SweepPoint] = []
    knees: list[dict[str, ParamValue]] = []
    ooms: list[dict[str, ParamValue]] = []
    for combo in itertools.product(*(params[n] for n in rest)):
        line: list[SweepPoint] = []
        for x in params[first]:
            point: dict[str, ParamValue] = {first: x, **dict(zip(rest, combo, strict=True))}
            if progress is not None:
                progress(", ".join(f"{k}={v}" for k, v in point.items()))
            spec: dict[str, Any] = {
                "kind": "sweep",
                "target": target,
                "params": point,
                "steps": steps,
                "warmup": warmup,
                "memory_limit_bytes": memory_limit_bytes,
                "threads": point.get("threads"),
                "db": db,
                "gpu_backend": gpu_backend,
                "interval": interval,
                "name": f"bench sweep {target} " + " ".join(f"{k}={v}" for k, v in point.items()),
            }
            out = run_child(spec, timeout=timeout)
            doc = out.doc or {}
            ok = out.status == "ok"
            line.append(
                SweepPoint(
                    params=point,
                    status=out.status,
                    error=None if ok else out.error,
                    steps=int(doc.get("steps", 0)) if ok else 0,
                    samples_per_second=doc.get("samples_per_second") if ok else None,
                    step_time_p50_seconds=doc.get("step_time_p50_seconds") if ok else None,
                    peak_rss_bytes=doc.get("peak_rss_bytes") if ok else None,
                    energy_per_sample_joules=doc.get("energy_per_sample_joules") if ok else None,
                    energy_method=doc.get("energy_method") if ok else None,
                    run_id=doc.get("run_id"),
                    exit_code=out.exit_code,
                )
            )
        knee = find_knee([p.samples_per_second for p in line])
        if knee is not None:
            knees.append(line[knee].params)
        oom = next((p for p in line if p.status == "oom"), None)
        if oom is not None:
            ooms.append(oom.params)
        points += line
    result = SweepResult(
        target=target,
        params={n: list(v) for n, v in params.items()},
        memory_limit_bytes=memory_limit_bytes,
        points=points,
        knee=knees,
        out_of_memory_at=ooms,
        knee_gain=KNEE_GAIN,
    )
    _attach(result, db)
    return result


def _attach(result: SweepResult, db: str | None) -> None:
    """Keep the whole sweep with each point's run (its ``bench`` document's ``sweep``), so the
    report of any point's run can draw the sweep."""
    ids = [p.run_id for p in result.points if p.run_id]
    if not ids:
        return
    path = resolve_db_path(db)
    try:
        with Store.open(path) as store:
            for run_id in ids:
                key = store.find_run(run_id).key
                doc = store.meta(key).get("bench")
                doc = dict(doc) if isinstance(doc, dict) else {"kind": "sweep-point"}
                doc["sweep"] = as_dict(result)
                store.set_meta(key, "bench", doc)
    except StoreError as e:
        raise BenchError(f"the sweep could not be stored with its runs: {e}") from None
