"""``computewatch bench``: inference scenarios on MLCommons LoadGen, model against model, and
scaling sweeps, each benchmark a stored run tagged ``bench`` (docs/bench.md).

The flags live here; the commands are :mod:`computewatch.cli.bench_run`, loaded only when they
run.
"""

from __future__ import annotations

import argparse
from typing import Any

from computewatch.cli import args as cli_args

__all__ = ["SCENARIOS", "add_bench_parser"]

SCENARIOS = ("single-stream", "multi-stream", "server", "offline")  # bench.records.SCENARIOS


def _positive(text: str) -> float:
    v = cli_args.number(text)
    if not v > 0:
        raise argparse.ArgumentTypeError(f"must be a positive number, not {text!r}")
    return v


def _size(text: str) -> int:
    units = {
        "": 1,
        "b": 1,
        "k": 1024,
        "kib": 1024,
        "m": 1024**2,
        "mib": 1024**2,
        "g": 1024**3,
        "gib": 1024**3,
        "t": 1024**4,
        "tib": 1024**4,
    }
    t = text.strip().lower()
    num = t.rstrip("abcdefghijklmnopqrstuvwxyz")
    unit = t[len(num) :].strip()
    try:
        v = float(num)
    except ValueError:
        v = -1.0
    if unit not in units or not v > 0 or v * units[unit] > 2**62:
        raise argparse.ArgumentTypeError(f"expected a size such as 512MiB or 4GiB, not {text!r}")
    return int(v * units[unit])


def _gpu_backend(text: str) -> str:
    return cli_args.gpu_backend(text, open_replay=True)


def _scenario_name(text: str) -> str:
    """A scenario as LoadGen spells it (``SingleStream``) or as we do (``single-stream``)."""
    key = text.strip().lower().replace("_", "-")
    return {"singlestream": "single-stream", "multistream": "multi-stream"}.get(key, key)


def _scenario_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--scenario",
        type=_scenario_name,
        choices=SCENARIOS,
        default="single-stream",
        help="default single-stream (LoadGen's spellings too: SingleStream, MultiStream, "
        "Server, Offline)",
    )
    p.add_argument(
        "--target-qps",
        type=_positive,
        metavar="Q",
        help="server: LoadGen's target QPS (without it, a search for the highest that "
        "meets --latency-bound-ms); offline: the expected QPS",
    )
    p.add_argument(
        "--latency-bound-ms",
        type=_positive,
        metavar="L",
        help="server: the latency bound at LoadGen's p99",
    )
    p.add_argument(
        "--duration",
        type=_positive,
        default=1.0,
        metavar="S",
        help="LoadGen's minimum duration, seconds (default 1)",
    )
    p.add_argument(
        "--min-queries",
        type=cli_args.whole,
        default=16,
        metavar="N",
        help="LoadGen's minimum query count (default 16)",
    )
    p.add_argument(
        "--samples-per-query",
        type=cli_args.whole,
        default=8,
        metavar="N",
        help="multi-stream: samples per query (default 8)",
    )
    p.add_argument(
        "--batch-size",
        type=cli_args.whole,
        default=32,
        metavar="N",
        help="offline: the largest batch handed to TARGET at once (default 32)",
    )
    p.add_argument(
        "--queries",
        metavar="MODULE:FUNCTION",
        help="makes the query samples (default: the integers 0-255)",
    )


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="JSON output")
    p.add_argument("--db", metavar="PATH", help="database file (default: as 'run')")
    p.add_argument(
        "--gpu-backend",
        type=_gpu_backend,
        default="auto",
        metavar="BACKEND",
        help=f"{cli_args.BACKEND_CHOICES} (default auto)",
    )
    p.add_argument(
        "--interval",
        type=_positive,
        default=0.2,
        metavar="SECONDS",
        help="sampling interval during the benchmark (default 0.2)",
    )


def add_bench_parser(sub: Any) -> None:
    """Add ``bench`` to the CLI's subcommands (``sub``: the ``add_subparsers`` object)."""
    b = sub.add_parser(
        "bench",
        help="benchmarks: LoadGen inference scenarios, model against model, scaling sweeps",
        description="MLPerf-style benchmarks on MLCommons LoadGen, each a stored run (tag "
        "bench=...) with its energy, cost and carbon per query.",
    )
    bs = b.add_subparsers(dest="bench_cmd", metavar="KIND", required=True)

    inf = bs.add_parser(
        "inference",
        help="one LoadGen scenario on TARGET",
        description="Run TARGET (MODULE:FUNCTION, called with a list of queries and answering "
        "each) under one LoadGen scenario: LoadGen's latency percentiles, QPS and validity, "
        "with our CPU/GPU utilization, memory, energy, cost and carbon per query.",
    )
    inf.add_argument("target", metavar="TARGET", help="MODULE:FUNCTION")
    _scenario_flags(inf)
    inf.add_argument("--name", help="the run's name")
    inf.add_argument("--log-dir", metavar="DIR", help="keep LoadGen's logs in DIR")
    _common(inf)

    cmp = bs.add_parser(
        "compare",
        help="the same scenario for several variants, interleaved",
        description="Run each --variant under the same scenario, in its own process, "
        "repetitions interleaved; a table, and with --html a page of charts and a Pareto chart.",
    )
    cmp.add_argument(
        "--variant",
        action="append",
        required=True,
        metavar="NAME=TARGET",
        help="repeatable: a name and its MODULE:FUNCTION",
    )
    cmp.add_argument(
        "--accuracy",
        metavar="MODULE:FUNCTION",
        help="evaluation: called with each variant's function, returns 0-1",
    )
    cmp.add_argument("--repetitions", type=cli_args.whole, default=3, metavar="N", help="default 3")
    cmp.add_argument("--html", metavar="FILE", help="also write the charts to FILE")
    cmp.add_argument(
        "--timeout",
        type=_positive,
        metavar="S",
        help="give up on one variant's run after S seconds",
    )
    _scenario_flags(cmp)
    _common(cmp)

    sw = bs.add_parser(
        "sweep",
        help="throughput, latency, memory and energy across batch sizes or threads",
        description="TARGET(**point) returns a step function (one training or inference step "
        "on a batch); each point runs in its own process, an out-of-memory point is recorded "
        "and the sweep goes on.",
    )
    sw.add_argument("target", metavar="TARGET", help="MODULE:FUNCTION, a step-function factory")
    sw.add_argument(
        "--param",
        action="append",
        required=True,
        metavar="NAME=V1,V2,...",
        help="repeatable: batch_size=1,2,4,8 threads=1,2 (the first is the x axis)",
    )
    sw.add_argument(
        "--steps", type=cli_args.whole, default=20, metavar="N", help="timed steps (20)"
    )
    sw.add_argument("--warmup", type=int, default=2, metavar="N", help="untimed steps (2)")
    sw.add_argument(
        "--memory-limit",
        type=_size,
        metavar="SIZE",
        help="address-space limit of each point's process (RLIMIT_AS), e.g. 4GiB",
    )
    sw.add_argument("--html", metavar="FILE", help="also write the charts to FILE")
    sw.add_argument("--timeout", type=_positive, metavar="S", help="per point")
    _common(sw)
