"""``computewatch bench inference|compare|sweep``: the commands (flags: cli/bench.py)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any, TextIO

from computewatch import jsonout
from computewatch.bench import compare as bench_compare
from computewatch.bench import inference as bench_inference
from computewatch.bench import sweep as bench_sweep
from computewatch.bench.records import BenchError, as_dict
from computewatch.bench.sweep import parse_param
from computewatch.bench.targets import load_target, parse_target
from computewatch.errors import PROG, ComputewatchError, UsageError
from computewatch.views.bench import print_compare, print_inference, print_sweep
from computewatch.views.html.bench import compare_page, sweep_page
from computewatch.views.html.page import write_page

__all__ = ["cmd_bench"]


def _progress(args: argparse.Namespace) -> object:
    if args.json:
        return None
    return lambda line: print(f"{PROG}: bench: {line}", file=sys.stderr, flush=True)


def _inference(args: argparse.Namespace) -> int:
    parse_target(args.target)
    fn = load_target(args.target)
    queries = load_target(args.queries) if args.queries else None
    result = bench_inference(
        fn,
        queries,
        scenario=args.scenario,
        target_qps=args.target_qps,
        latency_bound_ms=args.latency_bound_ms,
        duration=args.duration,
        min_query_count=args.min_queries,
        samples_per_query=args.samples_per_query,
        batch_size=args.batch_size,
        name=args.name,
        target=args.target,
        db=args.db,
        gpu_backend=args.gpu_backend,
        interval=args.interval,
        log_dir=args.log_dir,
    )
    if args.json:
        print(jsonout.dumps(as_dict(result), indent=2))
    else:
        print_inference(result, sys.stdout)
    return 0


def _variants(items: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        name, sep, target = item.partition("=")
        name = name.strip()
        if not sep or not name or not target.strip():
            raise UsageError(f"--variant {item!r}: expected NAME=MODULE:FUNCTION")
        if name in out:
            raise UsageError(f"--variant {name!r} given twice")
        out[name] = target.strip()
    return out


def _compare(args: argparse.Namespace) -> int:
    result = bench_compare(
        _variants(args.variant),
        scenario=args.scenario,
        repetitions=args.repetitions,
        accuracy=args.accuracy,
        queries=args.queries,
        target_qps=args.target_qps,
        latency_bound_ms=args.latency_bound_ms,
        duration=args.duration,
        min_query_count=args.min_queries,
        samples_per_query=args.samples_per_query,
        batch_size=args.batch_size,
        db=args.db,
        gpu_backend=args.gpu_backend,
        interval=args.interval,
        timeout=args.timeout,
        progress=_progress(args),  # type: ignore[arg-type]
    )
    _output(args, result, compare_page, print_compare)
    failed = [v.name for v in result.variants if v.status != "ok"]
    return 1 if len(failed) == len(result.variants) else 0


def _output(
    args: argparse.Namespace,
    result: Any,
    page: Callable[[Any], str],
    text: Callable[[Any, TextIO], None],
) -> None:
    """``--html`` page, then JSON with ``--json`` or the text table."""
    if args.html:
        write_page(page(result), args.html)
    if args.json:
        print(jsonout.dumps(as_dict(result), indent=2))
    else:
        text(result, sys.stdout)


def _sweep(args: argparse.Namespace) -> int:
    params: dict[str, list[int | float | str]] = {}
    for text in args.param:
        name, values = parse_param(text)
        if name in params:
            raise UsageError(f"--param {name!r} given twice")
        params[name] = values
    if args.warmup < 0:
        raise UsageError(f"--warmup must be at least 0, not {args.warmup}")
    result = bench_sweep(
        args.target,
        params,
        steps=args.steps,
        warmup=args.warmup,
        memory_limit_bytes=args.memory_limit,
        db=args.db,
        gpu_backend=args.gpu_backend,
        interval=args.interval,
        timeout=args.timeout,
        progress=_progress(args),  # type: ignore[arg-type]
    )
    _output(args, result, sweep_page, print_sweep)
    return 0 if any(p.status == "ok" for p in result.points) else 1


def cmd_bench(args: argparse.Namespace) -> int:
    """Run ``computewatch bench KIND``; returns the exit status."""
    kinds = {"inference": _inference, "compare": _compare, "sweep": _sweep}
    if args.bench_cmd not in kinds:  # pragma: no cover - argparse requires one
        raise BenchError(f"unknown bench command {args.bench_cmd!r}")
    try:
        return kinds[args.bench_cmd](args)
    except ComputewatchError as e:
        if getattr(args, "json", False):  # a script reading stdout gets the failure too
            print(jsonout.dumps({"error": str(e), "exit_code": e.exit_code}))
        raise
