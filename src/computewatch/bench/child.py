"""One benchmark point in a process of its own: a variant's inference run (``bench compare``) or
a sweep point (``bench sweep``). ``python -m computewatch.bench.child SPEC OUT``: reads the JSON
spec, sets its address-space limit first (``RLIMIT_AS``), runs, and writes one JSON result to
OUT: ``status`` ok, failed, or oom (a MemoryError, or an allocator that says it is out of
memory). A crash (a signal) leaves no result; the parent records it as such."""

from __future__ import annotations

import io
import json
import os
import resource
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from computewatch import jsonout
from computewatch.bench.inference import (
    DEFAULT_INTERVAL,
    inference,
    resources_from_summary,
    store_bench_meta,
    wait_until_sampling,
)
from computewatch.bench.records import BenchError, TargetError, as_dict
from computewatch.bench.targets import describe, load_target
from computewatch.tracking import track

__all__ = ["is_out_of_memory", "main", "model_bytes", "run_inference_spec", "run_sweep_spec"]

_OOM_WORDS = ("out of memory", "can't allocate memory", "cannot allocate memory")


def is_out_of_memory(e: BaseException) -> bool:
    """A MemoryError, or an allocator's error that says it ran out (PyTorch's CPU allocator
    raises RuntimeError "DefaultCPUAllocator: can't allocate memory")."""
    if isinstance(e, MemoryError):
        return True
    text = str(e).lower()
    return isinstance(e, RuntimeError) and any(w in text for w in _OOM_WORDS)


def model_bytes(fn: object) -> int | None:
    """The model's size: ``fn.model_bytes`` when the target sets it, else the serialized
    ``state_dict`` of ``fn.model`` (a torch module), else None."""
    size = getattr(fn, "model_bytes", None)
    if isinstance(size, int) and not isinstance(size, bool):
        return size
    model = getattr(fn, "model", None)
    if model is None or not hasattr(model, "state_dict"):
        return None
    # torch is the model's own dependency, imported only for a target that carries a model
    import torch

    buf = io.BytesIO()
    torch.save(model.state_dict(), buf)
    return buf.tell()


def run_inference_spec(spec: dict[str, Any]) -> dict[str, Any]:
    target = str(spec["target"])
    fn = load_target(target)
    queries = load_target(spec["queries"]) if spec.get("queries") else None
    result = inference(
        fn,
        queries,
        scenario=spec["scenario"],
        target_qps=spec.get("target_qps"),
        latency_bound_ms=spec.get("latency_bound_ms"),
        duration=float(spec.get("duration", 1.0)),
        min_query_count=int(spec.get("min_query_count", 16)),
        samples_per_query=int(spec.get("samples_per_query", 8)),
        batch_size=int(spec.get("batch_size", 32)),
        name=spec.get("name"),
        target=target,
        tags=dict(spec.get("tags") or {}),
        db=spec.get("db"),
        gpu_backend=str(spec.get("gpu_backend", "auto")),
        interval=float(spec.get("interval", DEFAULT_INTERVAL)),
    )
    accuracy = None
    if spec.get("accuracy"):
        evaluate = load_target(spec["accuracy"])
        try:
            value = evaluate(fn)
        except Exception as e:
            raise TargetError(
                f"accuracy function {spec['accuracy']!r} raised {describe(e)}"
            ) from None
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise TargetError(
                f"accuracy function {spec['accuracy']!r} returned {type(value).__name__}, "
                "not a number"
            )
        accuracy = float(value)
    return {
        "status": "ok",
        "result": as_dict(result),
        "model_bytes": model_bytes(fn),
        "accuracy": accuracy,
    }


def run_sweep_spec(spec: dict[str, Any]) -> dict[str, Any]:
    target = str(spec["target"])
    params: dict[str, Any] = dict(spec["params"])
    factory = load_target(target)
    steps, warmup = int(spec.get("steps", 20)), int(spec.get("warmup", 2))
    samples = float(params.get("batch_size", 1))
    run_tags = {"bench": "sweep", **{k: str(v) for k, v in params.items()}}
    times: list[float] = []
    with track(
        name=spec.get("name") or f"bench sweep {target}",
        tags=run_tags,
        interval=float(spec.get("interval", DEFAULT_INTERVAL)),
        db=spec.get("db"),
        gpu_backend=str(spec.get("gpu_backend", "auto")),
    ) as run:
        wait_until_sampling(run)
        try:
            step = factory(**params)
        except Exception as e:
            raise _PointError(e, f"target {target!r} raised {describe(e)}") from None
        if not callable(step):
            raise TargetError(
                f"target {target!r} returned {type(step).__name__}, not a step function"
            )
        step_fn: Callable[[], object] = step
        try:
            for _ in range(warmup):
                step_fn()
            for _ in range(steps):
                t0 = time.perf_counter()
                step_fn()
                times.append(time.perf_counter() - t0)
                run.step(samples=samples)
        except Exception as e:
            raise _PointError(e, f"target {target!r} step raised {describe(e)}") from None
    res = resources_from_summary(run.summary, run.id, int(samples * steps), sum(times))
    doc = {
        "status": "ok",
        "run_id": run.id,
        "steps": steps,
        "samples_per_second": samples * steps / sum(times) if sum(times) > 0 else None,
        "step_time_p50_seconds": statistics.median(times),
        "peak_rss_bytes": res.peak_rss_bytes,
        "energy_per_sample_joules": res.energy_per_query_joules,
        "energy_method": res.energy_method,
    }
    store_bench_meta(run.db_path, run.id, {"kind": "sweep-point", "params": params, **doc})
    return doc


class _PointError(BenchError):
    """The target failed at a sweep point: its message, and whether it was out of memory."""

    def __init__(self, cause: BaseException, message: str) -> None:
        super().__init__(message)
        self.oom = is_out_of_memory(cause)


def _limit_memory(limit: object) -> None:
    if isinstance(limit, int) and limit > 0:
        _soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        if hard != resource.RLIM_INFINITY:
            limit = min(limit, hard)
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m computewatch.bench.child SPEC.json OUT.json", file=sys.stderr)
        return 2
    with open(args[0], encoding="utf-8") as f:
        spec = json.load(f)
    _limit_memory(spec.get("memory_limit_bytes"))
    if spec.get("threads"):
        n = str(spec["threads"])
        for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
            os.environ[var] = n
    try:
        run_spec = run_sweep_spec if spec.get("kind") == "sweep" else run_inference_spec
        doc = run_spec(spec)
    except _PointError as e:
        doc = {"status": "oom" if e.oom else "failed", "error": str(e)}
    except (BenchError, TargetError) as e:
        doc = {"status": "failed", "error": str(e)}
    except MemoryError:
        doc = {"status": "oom", "error": "MemoryError (out of memory)"}
    except Exception as e:
        doc = {
            "status": "oom" if is_out_of_memory(e) else "failed",
            "error": f"{describe(e)}",
        }
    with open(args[1], "w", encoding="utf-8") as f:
        f.write(jsonout.dumps(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
