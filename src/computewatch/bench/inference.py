"""One inference benchmark: a LoadGen scenario inside a tracked run (tag ``bench``), LoadGen's
results beside ours for the same window, stored with the run (``run_meta`` kind ``bench``).
For the server scenario without a target QPS, a bisection on the target QPS finds the highest
one whose run meets the latency bound."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import statistics
import time
import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from computewatch.analysis.summary_types import energy_components
from computewatch.bench.loadgen import (
    ROUND_TRIP_SECONDS,
    ScenarioSettings,
    calibrate,
    run_scenario,
    sustained_qps,
)
from computewatch.bench.records import (
    BenchError,
    InferenceResult,
    LoadGenResult,
    Resources,
    SearchStep,
    ServerSearch,
    TargetError,
    as_dict,
)
from computewatch.bench.targets import describe
from computewatch.store import Store, StoreError
from computewatch.tracking import Run, track

if TYPE_CHECKING:
    from computewatch.analysis.summary_types import RunSummary

__all__ = [
    "DEFAULT_INTERVAL",
    "SEARCH_PRECISION",
    "inference",
    "meets_bound",
    "resources_from_summary",
    "search_budget",
    "search_server_qps",
    "store_bench_meta",
    "wait_until_sampling",
]

DEFAULT_INTERVAL = 0.2
"""Seconds between the sampler's ticks during a benchmark (runs are short)."""
SEARCH_PRECISION = 0.05
"""The search stops when the bracket [met, not met] is narrower than this share of its top."""
_SEARCH_MAX_RUNS = 8
SEARCH_FLOOR = 10.0
"""With the stored run of ``duration`` D, the whole command ends within max(2 D, this)."""
_SEARCH_RESERVE = 4.0
"""Seconds of the bound kept for what is not the search nor the stored run: the command's
start, calibration, the sampler's start and the run's end (about 3 s on a loaded 2-core
machine)."""
_TRIAL_FLOOR = 0.25
"""The shortest search trial (LoadGen's min_duration), seconds."""
_PILOT_SECONDS = 0.1
"""The capacity pilot's back-to-back calls, seconds (one call at least)."""
_KWH_J = 3.6e6
_FIRST_TICK = "SELECT 1 FROM ticks JOIN runs ON ticks.run_key = runs.key WHERE runs.id=? LIMIT 1"


def meets_bound(r: LoadGenResult) -> bool:
    """A server run meets its latency bound when LoadGen says the performance constraint held
    (the bound at the target percentile) and both minimums (duration, queries) were met.
    LoadGen's early-stopping criterion is not required: it needs hundreds of queries more than
    a short search run issues (docs/bench.md); ``validity`` is reported as LoadGen gave it."""
    return bool(r.perf_constraints_met and r.min_duration_met and r.min_queries_met)


def search_budget(duration: float) -> float:
    """Seconds the server search may take before a stored run of ``duration`` seconds, so that
    the whole command ends within max(2 × duration, :data:`SEARCH_FLOOR`): what is left after
    the stored run and :data:`_SEARCH_RESERVE` (at least two of the shortest trials)."""
    return max(2 * _TRIAL_FLOOR, max(2 * duration, SEARCH_FLOOR) - duration - _SEARCH_RESERVE)


def search_server_qps(
    fn: Callable[[list[Any]], object],
    samples: Sequence[Any],
    settings: ScenarioSettings,
    *,
    target: str,
    per_call_seconds: float,
    budget_seconds: float | None = None,
) -> tuple[ServerSearch, LoadGenResult | None]:
    """Bisect the server's target QPS: each try is one short LoadGen server run; the highest
    that :func:`meets_bound` wins. Returns the search and the best run's result.

    The serial capacity c comes from a short pilot (back-to-back calls, :data:`_PILOT_SECONDS`;
    never above 1 / LoadGen's round trip), and the bracket is [0, c × (1 + bound / duration)]:
    above its top, a run of the stored duration queues more than the bound. The first try is
    c. The search takes about ``budget_seconds`` (default :func:`search_budget` of the
    duration): each trial lasts the budget's share of the most trials (a trial over capacity
    also drains its queue: up to twice its duration), no more than the duration and no less
    than :data:`_TRIAL_FLOOR`; a trial that could end past the budget does not start once one
    has run. Short trials see less of a queue than the stored run: the stored run says whether
    the best QPS held (a note when it did not)."""
    bound = settings.latency_bound_seconds
    if bound is None:
        raise BenchError("the server search needs a latency bound (--latency-bound-ms)")
    budget = search_budget(settings.duration_seconds) if budget_seconds is None else budget_seconds
    end_by = time.monotonic() + budget
    trial = min(settings.duration_seconds, max(_TRIAL_FLOOR, budget / (2 * _SEARCH_MAX_RUNS)))
    capacity = min(
        1.0 / max(per_call_seconds, ROUND_TRIP_SECONDS),
        sustained_qps(fn, target, samples, 1, _PILOT_SECONDS),
    )
    lo, hi = 0.0, capacity * (1.0 + bound / settings.duration_seconds)
    steps: list[SearchStep] = []
    best: LoadGenResult | None = None
    qps = capacity  # first try: the pilot's capacity itself
    for _ in range(_SEARCH_MAX_RUNS):
        if steps and time.monotonic() + 2 * trial > end_by:
            break
        result, _window, _n = run_scenario(
            fn,
            samples,
            replace(settings, target_qps=qps, duration_seconds=trial),
            target=target,
            per_call_seconds=per_call_seconds,
        )
        met = meets_bound(result)
        p99 = result.latency_seconds.get("p99")
        steps.append(SearchStep(qps, met, result.validity, p99, result.qps))
        if met:
            lo, best = qps, result
        else:
            hi = qps
        if hi - lo <= SEARCH_PRECISION * hi:
            break
        qps = (lo + hi) / 2.0
    return ServerSearch(bound, lo if best is not None else None, steps), best


def wait_until_sampling(run: Run, timeout: float = 10.0) -> None:
    """Wait until a standalone run's sampler is sampling (its first tick is stored, about a
    second), so that its start-up (imports, devices, the environment record) does not compete
    with the measured window. Returns at once for a run attached to ``computewatch run``;
    gives up quietly after ``timeout``."""
    proc = run._sampler  # the handle of the sampler track() started (same package)
    if proc is None or run.db_path is None:
        return
    uri = "file:" + urllib.parse.quote(str(run.db_path)) + "?mode=ro"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with contextlib.closing(sqlite3.connect(uri, uri=True, timeout=0.5)) as conn:
                if conn.execute(_FIRST_TICK, (run.id,)).fetchone():
                    return
        except sqlite3.Error:
            pass  # not created yet, or busy: ask again
        time.sleep(0.02)


def _mean(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.fmean(known) if known else None


def resources_from_summary(
    summary: RunSummary | None, run_id: str | None, queries: int, window: float | None
) -> Resources:
    """Our figures for the benchmark's window from its run's summary. Per-query figures are the
    run's energy (cost, carbon) times the window's share of the run's time, divided by the
    samples answered (one sample = one inference): the run also holds the sampler's start."""
    rate = queries / window if window else None
    if summary is None:
        return Resources(
            run_id, window, queries, rate, None, None, None, None, None, None, None, None,
            None, None, None,
            ["no summary: the run was attached to 'computewatch run', whose summary has it"],
        )  # fmt: skip
    notes: list[str] = []
    energy_j = per_query = method = None
    duration = summary.get("duration_seconds")
    share = 1.0
    if window and duration and window < duration:
        share = window / duration
        notes.append(
            f"per-query figures: the run's totals x the measured window's share of its time "
            f"({window:.3g} s of {duration:.3g} s = {share:.1%})"
        )
    energy = summary.get("energy")
    if energy is not None:
        facility = energy["facility"]
        if facility["value"] is not None:
            energy_j = facility["value"] * _KWH_J
            per_query = energy_j * share / queries if queries else None
        parts = ", ".join(f"{n} {f['method']}" for n, f in energy_components(energy))
        method = f"{facility['method']} ({parts}; at the facility, PUE {energy['pue']['value']:g})"
        notes += facility["assumptions"]
    cost_1m = carbon_1k = None
    cost = summary.get("cost")
    if cost is not None:
        usd = cost["total"]["value"]
        if usd is not None and queries:
            cost_1m = usd * share / queries * 1e6
        elif usd is None:
            notes += cost["total"]["assumptions"]
    carbon = summary.get("carbon")
    if carbon is not None and carbon["total"]["value"] is not None and queries:
        carbon_1k = carbon["total"]["value"] * share / queries * 1e3
    gpus = summary.get("gpus") or []
    simulated = sorted({g.get("model") or g.get("name") or "?" for g in gpus if g["simulated"]})
    if simulated:
        notes.append(
            f"GPU figures come from simulated devices ({', '.join(simulated)}), not hardware"
        )
        if method is not None:
            method += " [simulated GPU]"
    gpu_util = _mean([g.get("utilization_mean") for g in gpus])
    gpu_mem = [
        m
        for g in gpus
        if (m := g.get("process_memory_peak_bytes") or g.get("memory_peak_bytes")) is not None
    ]
    steps = summary["steps"]
    p50 = steps.get("step_time_seconds", {}).get("p50")
    return Resources(
        run_id=run_id,
        duration_seconds=summary.get("duration_seconds"),
        queries=queries,
        samples_per_second=rate,
        cpu_utilization_mean=summary["cpu"]["utilization_mean"],
        cpu_seconds=summary["cpu"]["seconds_total"],
        gpu_utilization_mean=gpu_util,
        peak_rss_bytes=summary["memory"]["peak_rss_bytes"],
        gpu_memory_peak_bytes=max(gpu_mem) if gpu_mem else None,
        energy_joules=energy_j,
        energy_per_query_joules=per_query,
        energy_method=method,
        cost_per_1m_queries_usd=cost_1m,
        carbon_per_1k_queries_g=carbon_1k,
        step_time_p50_seconds=p50,
        assumptions=notes,
    )


def store_bench_meta(db_path: Path | None, run_id: str, doc: object) -> None:
    """Keep a benchmark's document with its run (``run_meta`` kind ``bench``)."""
    if db_path is None:
        return
    try:
        with Store.open(db_path) as store:
            store.set_meta(store.find_run(run_id).key, "bench", doc)
    except StoreError as e:
        msg = f"the benchmark's results could not be stored with run {run_id}: {e}"
        raise BenchError(msg) from None


def _queries(make_queries: Callable[[], Sequence[Any]] | Sequence[Any] | None) -> list[Any]:
    if make_queries is None:
        return list(range(256))
    if callable(make_queries):
        try:
            made = make_queries()
        except Exception as e:
            raise TargetError(f"the query maker raised {describe(e)}") from None
    else:
        made = make_queries
    try:
        items = list(made)
    except TypeError:
        raise TargetError(
            f"the query maker returned {type(made).__name__}, not a sequence of queries"
        ) from None
    if not items:
        raise TargetError("the query maker returned no queries")
    return items


def inference(
    fn: Callable[[list[Any]], object],
    make_queries: Callable[[], Sequence[Any]] | Sequence[Any] | None = None,
    *,
    scenario: str = "single-stream",
    target_qps: float | None = None,
    latency_bound_ms: float | None = None,
    duration: float = 1.0,
    min_query_count: int = 16,
    samples_per_query: int = 8,
    batch_size: int = 32,
    name: str | None = None,
    target: str | None = None,
    tags: dict[str, str] | None = None,
    db: str | os.PathLike[str] | None = None,
    gpu_backend: str = "auto",
    interval: float = DEFAULT_INTERVAL,
    log_dir: str | os.PathLike[str] | None = None,
) -> InferenceResult:
    """Benchmark ``fn`` (called with a list of queries, answering each: a sequence of the same
    length) under one LoadGen scenario, as a stored run tagged ``bench``. ``make_queries``
    gives the query samples (default: the integers 0-255). The server scenario without
    ``target_qps`` searches the highest QPS that meets ``latency_bound_ms``."""
    label = target or getattr(fn, "__qualname__", None) or "function"
    bound = None if latency_bound_ms is None else latency_bound_ms / 1000.0
    if scenario == "server" and target_qps is None and bound is None:
        raise BenchError("server scenario: give --target-qps, --latency-bound-ms, or both")
    if not 0.05 <= interval <= 3600:
        raise BenchError(f"interval must be between 0.05 and 3600 seconds, not {interval}")
    settings = ScenarioSettings(
        scenario=scenario,
        duration_seconds=duration,
        min_query_count=min_query_count,
        target_qps=target_qps,
        latency_bound_seconds=bound,
        samples_per_query=samples_per_query,
        batch_size=batch_size,
    )
    samples = _queries(make_queries)
    per_call = calibrate(fn, label, samples, settings.calls_per_query)
    search: ServerSearch | None = None
    notes: list[str] = []
    if scenario == "server" and target_qps is None:
        search, _best = search_server_qps(
            fn, samples, settings, target=label, per_call_seconds=per_call
        )
        chosen = search.best_qps
        if chosen is None:
            chosen = min(s.target_qps for s in search.steps)
            notes.append(
                f"no target QPS tried met the {latency_bound_ms:g} ms bound; the stored run "
                f"is at the lowest tried, {chosen:.3g}"
            )
        settings = replace(settings, target_qps=chosen)
    run_tags = {"bench": "inference", "scenario": scenario, **(tags or {})}
    tracker = track(
        name=name or f"bench {label} {scenario}",
        tags=run_tags,
        interval=interval,
        db=db,
        gpu_backend=gpu_backend,
    )
    with tracker as run:
        wait_until_sampling(run)
        step = run.step
        lg_result, window, answered = run_scenario(
            fn,
            samples,
            settings,
            target=label,
            per_call_seconds=per_call,
            on_batch=lambda n: step(samples=n),
            log_dir=log_dir,
        )
    if search is not None and search.best_qps is not None and not meets_bound(lg_result):
        p99 = lg_result.latency_seconds.get("p99")
        notes.append(
            f"the stored run at the search's best QPS ({search.best_qps:.4g}) missed the bound "
            f"this time (p99 {p99 if p99 is None else round(p99 * 1000, 2)} ms): at the limit, "
            "runs vary; a longer --duration narrows it"
        )
    resources = resources_from_summary(run.summary, run.id, answered, window)
    result = InferenceResult(
        name=name or label,
        target=label,
        scenario=scenario,
        settings={
            "duration_seconds": duration,
            "min_query_count": min_query_count,
            "target_qps": settings.target_qps,
            "latency_bound_seconds": bound,
            "samples_per_query": samples_per_query if scenario == "multi-stream" else None,
            "batch_size": batch_size if scenario == "offline" else None,
            "calibrated_seconds_per_call": per_call,
            "queries_in_library": len(samples),
        },
        loadgen=lg_result,
        resources=resources,
        search=search,
        notes=notes,
    )
    store_bench_meta(run.db_path, run.id, {"kind": "inference", **as_dict(result)})
    return result
