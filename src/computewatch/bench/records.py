"""The benchmark's typed records: LoadGen's results, ours for the same window, a server-QPS
search, a variant comparison and a scaling sweep. ``as_dict`` gives the JSON documents that
``--json`` prints and ``Store.set_meta(run_key, "bench", ...)`` keeps (docs/bench.md)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from computewatch.errors import ComputewatchError, UsageError

__all__ = [
    "SCENARIOS",
    "BenchError",
    "BenchUsageError",
    "CompareResult",
    "InferenceResult",
    "LoadGenResult",
    "Resources",
    "SearchStep",
    "ServerSearch",
    "SweepPoint",
    "SweepResult",
    "TargetError",
    "VariantResult",
    "as_dict",
]

SCENARIOS = ("single-stream", "multi-stream", "server", "offline")
"""The scenarios, as the command line spells them (LoadGen's SingleStream, MultiStream, Server,
Offline)."""


class BenchError(ComputewatchError):
    """A benchmark that cannot run as asked (bad settings, LoadGen missing or failing)."""


class BenchUsageError(UsageError, BenchError):
    """A benchmark flag that cannot be read (a parameter list, a setting): exit status 2."""


class TargetError(BenchError):
    """A TARGET that cannot be imported, raises, or returns the wrong shape; names it."""


@dataclass(frozen=True)
class LoadGenResult:
    """What LoadGen itself reported (``mlperf_log_detail.txt``), latencies in seconds."""

    scenario: str
    validity: str  # "VALID" or "INVALID", LoadGen's result_validity
    valid: bool
    perf_constraints_met: bool | None  # server: the latency bound held (result_perf_...)
    min_duration_met: bool | None
    min_queries_met: bool | None
    early_stopping_met: bool | None
    invalid_reason: str | None
    query_count: int | None
    samples_per_query: int | None
    qps: float | None  # LoadGen's throughput figure for the scenario, samples per second
    qps_key: str | None  # which detail-log key ``qps`` came from
    scheduled_qps: float | None  # server: result_scheduled_samples_per_sec
    target_qps: float | None  # effective_target_qps
    target_latency_seconds: float | None  # effective_target_latency_ns (server), else None
    latency_seconds: dict[str, float]  # min, mean, p50, p90, p95, p97, p99, p99.9, max
    per_query_latency_seconds: dict[str, float]  # multi-stream: per query of N samples
    log_dir: str | None
    early_stopping_percentile: float | None = None
    """Single-stream: the percentile LoadGen's early stopping estimated (90.0, as MLPerf
    reports it), None when LoadGen gave none."""
    early_stopping_latency_seconds: float | None = None
    """That percentile's latency as early stopping estimates it (LoadGen's
    ``early_stopping_latency_ss``)."""


@dataclass(frozen=True)
class Resources:
    """Ours, for the same window: the benchmark's stored run and what it measured."""

    run_id: str | None
    duration_seconds: float | None
    queries: int  # samples answered (one inference each)
    samples_per_second: float | None  # ours: answered samples / window
    cpu_utilization_mean: float | None  # ratio of the allowed cores
    cpu_seconds: float | None
    gpu_utilization_mean: float | None
    peak_rss_bytes: int | None
    gpu_memory_peak_bytes: int | None
    energy_joules: float | None  # at the facility
    energy_per_query_joules: float | None
    energy_method: str | None
    cost_per_1m_queries_usd: float | None
    carbon_per_1k_queries_g: float | None
    step_time_p50_seconds: float | None
    assumptions: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class SearchStep:
    target_qps: float
    met: bool  # latency bound held, min duration and min queries met (docs/bench.md)
    validity: str
    p99_latency_seconds: float | None
    completed_qps: float | None


@dataclass(frozen=True)
class ServerSearch:
    """The highest target QPS whose run met the latency bound, by bisection."""

    latency_bound_seconds: float
    best_qps: float | None
    steps: list[SearchStep]


@dataclass(frozen=True)
class InferenceResult:
    name: str
    target: str
    scenario: str
    settings: dict[str, float | int | str | None]
    loadgen: LoadGenResult
    resources: Resources
    search: ServerSearch | None = None
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class VariantResult:
    """One variant of a comparison: each repetition's result and the medians over them."""

    name: str
    target: str
    status: str  # "ok" or "failed"
    error: str | None
    repetitions: list[InferenceResult]
    latency_p50_seconds: float | None
    latency_p90_seconds: float | None
    samples_per_second: float | None
    energy_per_query_joules: float | None
    energy_method: str | None
    peak_rss_bytes: int | None
    model_bytes: int | None
    accuracy: float | None
    pareto: bool  # on the accuracy/energy front (or the latency/energy one without accuracy)


@dataclass(frozen=True)
class CompareResult:
    scenario: str
    repetitions: int
    order: list[list[str]]  # the order the variants ran in, per repetition
    variants: list[VariantResult]
    pareto_axes: tuple[str, str]


@dataclass(frozen=True)
class SweepPoint:
    params: dict[str, int | float | str]
    status: str  # "ok", "oom" (out of memory), "crashed", "failed" (the target raised)
    error: str | None
    steps: int
    samples_per_second: float | None
    step_time_p50_seconds: float | None
    peak_rss_bytes: int | None
    energy_per_sample_joules: float | None
    energy_method: str | None
    run_id: str | None
    exit_code: int | None


@dataclass(frozen=True)
class SweepResult:
    target: str
    params: dict[str, list[int | float | str]]
    memory_limit_bytes: int | None
    points: list[SweepPoint]
    knee: list[dict[str, int | float | str]]  # per line of the first parameter: its knee
    out_of_memory_at: list[dict[str, int | float | str]]  # the first point that ran out
    knee_gain: float  # a point is past the knee when nothing after it gains this much


def as_dict(record: object) -> dict[str, Any]:
    """A record as its JSON document (plain dicts, lists and numbers)."""
    if not dataclasses.is_dataclass(record) or isinstance(record, type):
        raise TypeError(f"not a benchmark record: {type(record).__name__}")
    return dataclasses.asdict(record)
