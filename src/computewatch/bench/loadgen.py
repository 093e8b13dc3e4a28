"""The MLCommons LoadGen driver: a batch function as LoadGen's system under test, one scenario
run in PerformanceOnly mode, and its results read back from LoadGen's own detail log.

LoadGen (``mlperf_loadgen``, the ``mlcommons-loadgen`` package) issues the queries and times
them; our system under test hands each issued batch to one worker thread, which calls the
function and completes the queries. The results are the ``result_*`` keys of the
``:::MLLOG`` JSON lines of ``mlperf_log_detail.txt`` (docs/bench.md lists the keys read).
"""

from __future__ import annotations

import json
import math
import os
import queue
import re
import shutil
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from computewatch.bench.records import SCENARIOS, BenchError, LoadGenResult, TargetError
from computewatch.bench.targets import check_batch_result, describe

__all__ = [
    "DETAIL_LOG",
    "LATENCY_KEYS",
    "ScenarioSettings",
    "calibrate",
    "parse_detail_log",
    "read_detail_log",
    "result_from_log",
    "run_scenario",
]

DETAIL_LOG = "mlperf_log_detail.txt"
_PREFIX = ":::MLLOG"
LATENCY_KEYS = {
    "min": "result_min_latency_ns",
    "mean": "result_mean_latency_ns",
    "p50": "result_50.00_percentile_latency_ns",
    "p90": "result_90.00_percentile_latency_ns",
    "p95": "result_95.00_percentile_latency_ns",
    "p97": "result_97.00_percentile_latency_ns",
    "p99": "result_99.00_percentile_latency_ns",
    "p99.9": "result_99.90_percentile_latency_ns",
    "max": "result_max_latency_ns",
}
"""Our latency names → LoadGen's detail-log keys (nanoseconds)."""
_PER_QUERY_KEYS = {
    "min": "result_min_query_latency_ns",
    "mean": "result_mean_query_latency_ns",
    "p50": "result_50.00_percentile_per_query_latency_ns",
    "p90": "result_90.00_percentile_per_query_latency_ns",
    "p99": "result_99.00_percentile_per_query_latency_ns",
    "max": "result_max_query_latency_ns",
}
_QPS_KEYS = {  # LoadGen's throughput figure for each scenario (samples per second)
    "single-stream": "result_qps_with_loadgen_overhead",
    "server": "result_completed_samples_per_sec",
    "offline": "result_samples_per_second",
}
_LG_NAMES = {
    "single-stream": "SingleStream",
    "multi-stream": "MultiStream",
    "server": "Server",
    "offline": "Offline",
}


@dataclass(frozen=True)
class ScenarioSettings:
    """One LoadGen run's settings. ``None`` figures are calibrated from a few timed calls."""

    scenario: str
    duration_seconds: float = 1.0  # LoadGen min_duration_ms
    min_query_count: int = 16  # LoadGen min_query_count
    target_qps: float | None = None  # server: server_target_qps; offline: offline_expected_qps
    latency_bound_seconds: float | None = None  # server: server_target_latency_ns
    samples_per_query: int = 8  # multi-stream: multi_stream_samples_per_query
    batch_size: int = 32  # offline: the largest batch handed to the function at once
    expected_latency_seconds: float | None = None  # single/multi-stream: expected latency

    def __post_init__(self) -> None:
        if self.scenario not in SCENARIOS:
            raise BenchError(
                f"unknown scenario {self.scenario!r}: choose one of {', '.join(SCENARIOS)}"
            )
        if not 0 < self.duration_seconds <= 86400:
            raise BenchError(f"duration must be > 0 seconds, not {self.duration_seconds}")
        for what, v in (
            ("min query count", self.min_query_count),
            ("samples per query", self.samples_per_query),
            ("batch size", self.batch_size),
        ):
            if v < 1:
                raise BenchError(f"{what} must be at least 1, not {v}")
        for what, f in (
            ("target QPS", self.target_qps),
            ("latency bound", self.latency_bound_seconds),
            ("expected latency", self.expected_latency_seconds),
        ):
            if f is not None and not (math.isfinite(f) and f > 0):
                raise BenchError(f"{what} must be a positive number, not {f}")

    @property
    def calls_per_query(self) -> int:
        """Samples handed to the function in one call, for calibration."""
        if self.scenario == "multi-stream":
            return self.samples_per_query
        if self.scenario == "offline":
            return self.batch_size
        return 1


def parse_detail_log(text: str) -> dict[str, Any]:
    """The ``key → value`` of every ``:::MLLOG {json}`` line (the last one wins); other lines
    and lines that are not JSON objects with a string ``key`` are skipped."""
    out: dict[str, Any] = {}
    for line in text.splitlines():
        at = line.find(_PREFIX)
        if at < 0:
            continue
        try:
            doc = json.loads(line[at + len(_PREFIX) :])
        except ValueError:
            continue
        if isinstance(doc, dict) and isinstance(doc.get("key"), str) and "value" in doc:
            out[doc["key"]] = doc["value"]
    return out


def read_detail_log(log_dir: Path) -> dict[str, Any]:
    path = log_dir / DETAIL_LOG
    try:
        text = path.read_text("utf-8", errors="replace")
    except OSError as e:
        raise BenchError(f"LoadGen wrote no detail log ({path}: {e.strerror or e})") from None
    return parse_detail_log(text)


def _num(v: object) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    try:
        f = float(v)
    except OverflowError:  # an integer beyond any float
        return None
    return f if math.isfinite(f) else None


def _flag(v: object) -> bool | None:
    return v if isinstance(v, bool) else None


_EARLY_PCT = re.compile(r"Early stopping (\d+(?:\.\d+)?)th percentile estimate")


def result_from_log(
    keys: dict[str, Any], scenario: str, log_dir: str | None = None
) -> LoadGenResult:
    """LoadGen's results for ``scenario`` from the detail log's keys."""
    validity = keys.get("result_validity")
    validity = validity if isinstance(validity, str) else "UNKNOWN"
    lat = {k: v / 1e9 for k, key in LATENCY_KEYS.items() if (v := _num(keys.get(key))) is not None}
    per_query = {
        k: v / 1e9 for k, key in _PER_QUERY_KEYS.items() if (v := _num(keys.get(key))) is not None
    }
    qps_key = _QPS_KEYS.get(scenario)
    qps = _num(keys.get(qps_key)) if qps_key else None
    target_latency = _num(keys.get("effective_target_latency_ns"))
    reason = keys.get("result_invalid_reason")
    count = _num(keys.get("result_query_count"))
    spq = _num(keys.get("effective_samples_per_query"))
    es_ns = _num(keys.get("early_stopping_latency_ss"))
    es_text = keys.get("early_stopping_result")
    es_pct = _EARLY_PCT.search(es_text) if isinstance(es_text, str) else None
    return LoadGenResult(
        scenario=scenario,
        validity=validity,
        valid=validity == "VALID",
        perf_constraints_met=_flag(keys.get("result_perf_constraints_met")),
        min_duration_met=_flag(keys.get("result_min_duration_met")),
        min_queries_met=_flag(keys.get("result_min_queries_met")),
        early_stopping_met=_flag(keys.get("early_stopping_met")),
        invalid_reason=reason.strip() or None if isinstance(reason, str) else None,
        query_count=None if count is None else int(count),
        samples_per_query=None if spq is None else int(spq),
        qps=qps,
        qps_key=qps_key if qps is not None else None,
        scheduled_qps=_num(keys.get("result_scheduled_samples_per_sec")),
        target_qps=_num(keys.get("effective_target_qps")),
        target_latency_seconds=target_latency / 1e9 if target_latency else None,
        latency_seconds=lat,
        per_query_latency_seconds=per_query,
        log_dir=log_dir,
        early_stopping_percentile=float(es_pct[1]) if es_pct and es_ns else None,
        early_stopping_latency_seconds=es_ns / 1e9 if es_pct and es_ns else None,
    )


def _call(fn: Callable[[list[Any]], object], target: str, batch: list[Any]) -> None:
    try:
        result = fn(batch)
    except Exception as e:
        raise TargetError(f"target {target!r} raised {describe(e)}") from None
    check_batch_result(target, batch, result)


def calibrate(
    fn: Callable[[list[Any]], object],
    target: str,
    samples: Sequence[Any],
    batch: int,
    calls: int = 5,
) -> float:
    """Median seconds of one call on ``batch`` samples, after warm-up calls on 2 and on
    ``batch`` samples (which also check the function answers each query of a batch)."""
    items = [samples[i % len(samples)] for i in range(batch)]
    _call(fn, target, [samples[i % len(samples)] for i in range(2)])
    _call(fn, target, items)
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        _call(fn, target, items)
        times.append(time.perf_counter() - t0)
    return max(statistics.median(times), 1e-6)


OFFLINE_PILOT_SECONDS = (0.2, 2.0)
"""The offline scenario's pilot lasts a quarter of the run's duration, within these bounds."""


def sustained_qps(
    fn: Callable[[list[Any]], object],
    target: str,
    samples: Sequence[Any],
    batch: int,
    seconds: float,
) -> float:
    """Samples per second over ``seconds`` of back-to-back batches, each answered as the run
    answers them (the batch built, the function called, a response made per sample): the
    offline scenario's expected QPS. A single warm call says far more than the
    sustained rate for a fast function (the answering around it dominates), and LoadGen issues
    the whole offline run as one query sized by that rate, which no deadline then stops."""
    answered = 0
    i = 0
    end = time.perf_counter() + seconds
    t0 = time.perf_counter()
    while True:
        items = [samples[(i + k) % len(samples)] for k in range(batch)]
        i += batch
        _call(fn, target, items)
        _ = [(k, 0, 0) for k in range(len(items))]  # as the responses LoadGen is given
        answered += len(items)
        if time.perf_counter() >= end:
            break
    return answered / max(time.perf_counter() - t0, 1e-9)


class _SUT:
    """LoadGen's system under test: issued queries go to one worker thread (a serial
    server), which calls the function on them and completes them."""

    def __init__(
        self,
        lg: Any,
        fn: Callable[[list[Any]], object],
        target: str,
        samples: Sequence[Any],
        batch_size: int,
        on_batch: Callable[[int], None] | None,
    ) -> None:
        self.lg = lg
        self.fn = fn
        self.target = target
        self.samples = samples
        self.batch_size = batch_size
        self.on_batch = on_batch
        self.error: BaseException | None = None
        self.answered = 0
        self.first: float | None = None
        self.last: float | None = None
        self.work: queue.SimpleQueue[list[Any] | None] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._worker, name="computewatch-sut", daemon=True)
        self.thread.start()

    def issue(self, query_samples: list[Any]) -> None:
        for i in range(0, len(query_samples), self.batch_size):
            self.work.put(query_samples[i : i + self.batch_size])

    def flush(self) -> None:
        return None

    def stop(self) -> None:
        self.work.put(None)
        self.thread.join()

    def _worker(self) -> None:
        lg = self.lg
        while (qs := self.work.get()) is not None:
            if self.first is None:
                self.first = time.perf_counter()
            if self.error is None:
                batch = [self.samples[q.index] for q in qs]
                try:
                    _call(self.fn, self.target, batch)
                except BaseException as e:  # kept, and raised once LoadGen has finished
                    self.error = e
            # every query is completed, even after an error, so that LoadGen ends its test
            lg.QuerySamplesComplete([lg.QuerySampleResponse(q.id, 0, 0) for q in qs])
            self.answered += len(qs)
            self.last = time.perf_counter()
            if self.on_batch is not None and self.error is None:
                self.on_batch(len(qs))


def _import_loadgen() -> Any:
    # an optional dependency (the 'bench' extra), loaded only when a benchmark runs
    try:
        import mlperf_loadgen  # type: ignore[import-not-found]  # no type hints shipped
    except ImportError as e:
        raise BenchError(
            f"MLCommons LoadGen is not installed ({e}): pip install 'computewatch[bench]'"
        ) from None
    return mlperf_loadgen


ROUND_TRIP_SECONDS = 2e-5
"""The least a query takes, whatever the function: LoadGen's issue and completion of one
sample through this Python SUT (p50 18 µs measured here for a function that does nothing).
A calibrated call below it would size LoadGen's query schedule for a rate never reached:
LoadGen then spends seconds making and discarding a million queries (single-stream at
--duration 1: 9.9 s instead of 0.7 s)."""


def _test_settings(lg: Any, s: ScenarioSettings, per_call: float) -> Any:
    per_call = max(per_call, ROUND_TRIP_SECONDS)
    ts = lg.TestSettings()
    ts.scenario = getattr(lg.TestScenario, _LG_NAMES[s.scenario])
    ts.mode = lg.TestMode.PerformanceOnly
    ts.min_duration_ms = max(1, round(s.duration_seconds * 1000))
    # LoadGen stops on its own once both minimums are met; the cap stops a SUT far slower
    # than calibrated from running for ever
    ts.max_duration_ms = max(10_000, round(s.duration_seconds * 1000) * 10)
    ts.min_query_count = s.min_query_count
    # an expected latency below the real one only makes LoadGen generate more queries than
    # it needs; one above makes it run out before the minimum duration (its own advice)
    expected = s.expected_latency_seconds or per_call * 0.5
    if s.scenario == "single-stream":
        ts.single_stream_expected_latency_ns = max(1000, round(expected * 1e9))
    elif s.scenario == "multi-stream":
        ts.multi_stream_samples_per_query = s.samples_per_query
        ts.multi_stream_expected_latency_ns = max(1000, round(expected * 1e9))
    elif s.scenario == "offline":
        # LoadGen issues expected QPS x min duration (x 1.1) samples as one query: the
        # sustained rate of a pilot (run_scenario) keeps the run near its duration
        ts.offline_expected_qps = s.target_qps or s.batch_size / per_call
    else:
        ts.server_target_qps = s.target_qps or 0.5 / per_call
        if s.latency_bound_seconds is not None:
            ts.server_target_latency_ns = max(1000, round(s.latency_bound_seconds * 1e9))
    return ts


def _offline_pilot(
    fn: Callable[[list[Any]], object],
    target: str,
    samples: Sequence[Any],
    settings: ScenarioSettings,
) -> float:
    """The offline run's expected QPS: the rate of a short offline LoadGen run of its own (the
    function's calls, LoadGen's issue and completion of every sample: what the real run pays),
    sized by :func:`sustained_qps` to last about a tenth of a second."""
    lo, _hi = OFFLINE_PILOT_SECONDS
    rate = sustained_qps(fn, target, samples, settings.batch_size, lo / 2)
    count = max(2 * settings.batch_size, min(_PILOT_MAX_SAMPLES, round(rate * 0.1)))
    pilot = replace(settings, duration_seconds=0.001, min_query_count=1, target_qps=count / 0.0011)
    _result, window, answered = run_scenario(
        fn, samples, pilot, target=target, per_call_seconds=1.0
    )
    if not window or answered <= 0:
        return rate
    return min(rate, answered / window)


_PILOT_MAX_SAMPLES = 50_000


def run_scenario(
    fn: Callable[[list[Any]], object],
    samples: Sequence[Any],
    settings: ScenarioSettings,
    *,
    target: str = "function",
    per_call_seconds: float | None = None,
    on_batch: Callable[[int], None] | None = None,
    log_dir: str | os.PathLike[str] | None = None,
) -> tuple[LoadGenResult, float | None, int]:
    """Run one LoadGen scenario on ``fn`` over ``samples``; returns LoadGen's result, our
    window (first issue to last completion, seconds) and the samples answered. A target that
    raises or answers wrongly is a TargetError (after LoadGen has finished its test)."""
    if not samples:
        raise BenchError("no queries to issue: the query maker returned an empty sequence")
    lg = _import_loadgen()
    per_call = per_call_seconds or calibrate(fn, target, samples, settings.calls_per_query)
    if settings.scenario == "offline" and settings.target_qps is None:
        settings = replace(settings, target_qps=_offline_pilot(fn, target, samples, settings))
    ts = _test_settings(lg, settings, per_call)
    keep = log_dir is not None
    out = (
        Path(log_dir)
        if log_dir is not None
        else Path(tempfile.mkdtemp(prefix="computewatch-loadgen-"))
    )
    out.mkdir(parents=True, exist_ok=True)
    sut = _SUT(lg, fn, target, samples, settings.batch_size, on_batch)
    count = len(samples)
    lg_sut = lg.ConstructSUT(sut.issue, sut.flush)
    qsl = lg.ConstructQSL(count, count, lambda _s: None, lambda _s: None)
    try:
        log_out = lg.LogOutputSettings()
        log_out.outdir = str(out)
        log_out.copy_summary_to_stdout = False
        log_settings = lg.LogSettings()
        log_settings.log_output = log_out
        log_settings.enable_trace = False
        lg.StartTestWithLogSettings(lg_sut, qsl, ts, log_settings)
    finally:
        sut.stop()
        lg.DestroyQSL(qsl)
        lg.DestroySUT(lg_sut)
    try:
        if sut.error is not None:
            if isinstance(sut.error, TargetError):
                raise sut.error
            raise TargetError(f"target {target!r} raised {describe(sut.error)}") from None
        kept = str(out) if keep else None
        result = result_from_log(read_detail_log(out), settings.scenario, kept)
    finally:
        if not keep:
            shutil.rmtree(out, ignore_errors=True)
    window = None
    if sut.first is not None and sut.last is not None and sut.last > sut.first:
        window = sut.last - sut.first
    return result, window, sut.answered
