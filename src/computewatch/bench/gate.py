"""Resource gates for CI: a run's figures (step time, peak memory, energy per step, cost per
1M tokens, ...) against a baseline run or a committed baseline file, within limits such as
``step_time_p50=+10%``. Each figure is compared with its own uncertainty: step times by their
samples (a one-sided Mann-Whitney U test, when both sides have enough), a figure with a range
(energy and cost: the accounting's low and high ends) by its range, so that a regression is a
move past the limit that the figures' own uncertainty cannot explain."""

from __future__ import annotations

import itertools
import json
import math
import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from computewatch import jsonout
from computewatch.errors import UsageError

if TYPE_CHECKING:
    from computewatch.analysis.summary_types import RunSummary
    from computewatch.store.db import StepRow

__all__ = [
    "BASELINE_VERSION",
    "DEFAULT_LIMITS",
    "MAX_STEP_TIMES",
    "METRICS",
    "BaselineError",
    "CheckResult",
    "CheckRow",
    "Limit",
    "Measurements",
    "baseline_document",
    "check",
    "mann_whitney_greater",
    "measurements_from_summary",
    "parse_baseline",
    "parse_limit",
    "step_times",
]

BASELINE_VERSION = 1
MAX_STEP_TIMES = 5000
"""A baseline keeps at most this many step times (evenly spaced through the run)."""
DEFAULT_ALPHA = 0.01


@dataclass(frozen=True)
class Metric:
    name: str
    unit: str  # seconds, bytes, joules, usd, per_second, cpu_seconds
    higher_is_better: bool
    help: str


METRICS: dict[str, Metric] = {
    m.name: m
    for m in (
        Metric("step_time_p50", "seconds", False, "median step time"),
        Metric("step_time_p90", "seconds", False, "90th percentile step time"),
        Metric("step_time_mean", "seconds", False, "mean step time"),
        Metric("peak_memory", "bytes", False, "peak resident memory of the process tree"),
        Metric("gpu_memory", "bytes", False, "peak GPU memory (largest device)"),
        Metric("energy_per_step", "joules", False, "energy at the facility per step"),
        Metric("energy_per_sample", "joules", False, "energy at the facility per sample"),
        Metric("energy", "joules", False, "the run's energy at the facility"),
        Metric("cost_per_1m_tokens", "usd", False, "cost per million tokens"),
        Metric("cost_per_step", "usd", False, "cost per step"),
        Metric("cpu_seconds", "cpu_seconds", False, "CPU time of the process tree"),
        Metric("duration", "seconds", False, "the run's wall time"),
        Metric("throughput", "per_second", True, "samples per second"),
        Metric("steps_per_second", "per_second", True, "steps per second"),
        Metric("latency_p50", "seconds", False, "LoadGen's median latency (bench runs)"),
        Metric("latency_p99", "seconds", False, "LoadGen's 99th percentile latency"),
        Metric("qps", "per_second", True, "LoadGen's samples per second (bench runs)"),
        Metric("energy_per_query", "joules", False, "energy per query (bench runs)"),
    )
}
"""The metrics a gate knows, by the name ``--max``/``--min`` take (docs/bench.md)."""

MIN_MODELED_CPU_SECONDS = 1.0
"""A modeled energy from less CPU time than this is not compared: the kernel counts CPU time in
clock ticks of 10 ms (USER_HZ 100), so one tick more or less moves the run's share of the
machine, and its modeled energy, by far more than the figure's own ±60% (measured: 0.0 s
against 0.01 s of CPU time in two identical 0.76 s runs, share 0% against 50%, energy x12)."""
_UNRESOLVED = "unresolved:"

_STEP_METRICS = frozenset({"step_time_p50", "step_time_p90", "step_time_mean"})


class BaselineError(UsageError):
    """A baseline file or limit that cannot be read."""


@dataclass(frozen=True)
class Limit:
    """``--max step_time_p50=+10%``: the metric may grow by at most 10% (``--min`` for
    higher-is-better metrics: may fall by at most that much)."""

    metric: str
    fraction: float  # +0.10 for +10%
    bound: str  # "max" or "min"

    @property
    def text(self) -> str:
        return f"{self.bound} {self.fraction * 100:+g}%"


_LIMIT = re.compile(r"^\s*([a-z0-9_]+)\s*=\s*([+-]?\d+(?:\.\d+)?)\s*%\s*$")


def parse_limit(text: str, bound: str = "max") -> Limit:
    """``METRIC=+10%`` (or ``-5%`` with ``bound="min"``) as a :class:`Limit`."""
    m = _LIMIT.match(text)
    if m is None:
        raise BaselineError(f"--{bound} {text!r}: expected METRIC=+N%, such as step_time_p50=+10%")
    name, pct = m.group(1), float(m.group(2))
    if name not in METRICS:
        raise BaselineError(
            f"--{bound} {text!r}: unknown metric {name!r}; known: {', '.join(METRICS)}"
        )
    if not math.isfinite(pct) or abs(pct) > 1e6:
        raise BaselineError(f"--{bound} {text!r}: not a usable percentage")
    return Limit(name, pct / 100.0, bound)


DEFAULT_LIMITS = (
    Limit("step_time_p50", 0.10, "max"),
    Limit("peak_memory", 0.10, "max"),
    Limit("energy_per_step", 0.10, "max"),
)
"""What ``check`` gates when no ``--max``/``--min`` is given."""


@dataclass(frozen=True)
class Measurements:
    """One side of a check: the figures by metric name, the step times (seconds), and the
    range (low, high) of the figures that have one (energy, cost: how they were obtained)."""

    metrics: dict[str, float | None]
    step_times_seconds: list[float] = field(default_factory=list)
    source: str = ""
    ranges: dict[str, tuple[float, float]] = field(default_factory=dict)
    methods: dict[str, str] = field(default_factory=dict)
    """How a figure was obtained, where two runs can differ (energy: measured or modeled,
    the run's share of the machine or the whole machine): figures obtained differently are
    not compared."""


def step_times(steps: Sequence[StepRow]) -> list[float]:
    """Each step's time: the gap to the same process's previous step (the first step of each
    process has none)."""
    by_pid: dict[int, list[float]] = {}
    for s in steps:
        by_pid.setdefault(s.pid, []).append(s.mono)
    out: list[float] = []
    for monos in by_pid.values():
        monos.sort()
        out += [b - a for a, b in itertools.pairwise(monos) if b >= a]
    return out


def _thin(values: Sequence[float], at_most: int = MAX_STEP_TIMES) -> list[float]:
    if len(values) <= at_most:
        return list(values)
    stride = len(values) / at_most
    return [values[int(i * stride)] for i in range(at_most)]


def measurements_from_summary(
    summary: RunSummary,
    steps: Sequence[float] = (),
    bench: Mapping[str, Any] | None = None,
    source: str = "",
) -> Measurements:
    """The gate's figures from a run's summary (and its ``bench`` document, if any)."""
    m: dict[str, float | None] = dict.fromkeys(METRICS)
    st = summary["steps"]
    times = st.get("step_time_seconds")
    if times is not None:
        m["step_time_p50"] = times.get("p50")
        m["step_time_p90"] = times.get("p90")
        m["step_time_mean"] = times.get("mean")
    m["peak_memory"] = _f(summary["memory"]["peak_rss_bytes"])
    gpu = [
        g.get("process_memory_peak_bytes") or g.get("memory_peak_bytes") for g in summary["gpus"]
    ]
    known = [float(g) for g in gpu if g is not None]
    m["gpu_memory"] = max(known) if known else None
    m["cpu_seconds"] = summary["cpu"]["seconds_total"]
    m["duration"] = summary["duration_seconds"]
    m["throughput"] = st.get("samples_per_second")
    m["steps_per_second"] = st.get("steps_per_second")
    energy = summary.get("energy")
    joules = None
    if energy is not None and energy["facility"]["value"] is not None:
        joules = energy["facility"]["value"] * 3.6e6
    m["energy"] = joules
    if joules is not None and st["count"]:
        m["energy_per_step"] = joules / st["count"]
    samples = st.get("samples_total")
    if joules is not None and samples:
        m["energy_per_sample"] = joules / samples
    cost = summary.get("cost")
    if cost is not None:
        per_unit = cost["per_unit"]
        m["cost_per_1m_tokens"] = per_unit.get("usd_per_1m_tokens")
        m["cost_per_step"] = per_unit.get("usd_per_step")
    ranges: dict[str, tuple[float, float]] = {}
    methods: dict[str, str] = {}
    if energy is not None:
        whole = any("whole machine" in str(a) for a in energy.get("attribution") or [])
        method = energy["facility"].get("method")
        how = f"{method}, {'whole machine' if whole else 'run share'}"
        cpu_s = summary["cpu"]["seconds_total"]
        if method == "modeled" and (cpu_s is None or cpu_s < MIN_MODELED_CPU_SECONDS):
            how = f"{_UNRESOLVED} modeled from {cpu_s or 0:g} s of CPU time"
        for name in ("energy", "energy_per_step", "energy_per_sample"):
            if m.get(name) is not None:
                methods[name] = how
        _scaled_range(ranges, m, energy["facility"], ("energy", "energy_per_step",
                                                      "energy_per_sample"))  # fmt: skip
    if cost is not None:
        _scaled_range(ranges, m, cost.get("total"), ("cost_per_1m_tokens", "cost_per_step"))
    if bench is not None:
        lg = bench.get("loadgen") or {}
        lat = lg.get("latency_seconds") or {}
        m["latency_p50"] = _f(lat.get("p50"))
        m["latency_p99"] = _f(lat.get("p99"))
        m["qps"] = _f(lg.get("qps"))
        m["energy_per_query"] = _f((bench.get("resources") or {}).get("energy_per_query_joules"))
    return Measurements(m, _thin(list(steps)), source, ranges, methods)


def _scaled_range(
    ranges: dict[str, tuple[float, float]],
    m: Mapping[str, float | None],
    figure: object,
    names: Sequence[str],
) -> None:
    """The figure's low and high ends, as fractions of its value, applied to each of ``names``
    (a per-step or per-sample figure is the total divided by a count: the same fractions)."""
    if not isinstance(figure, Mapping):
        return
    value, low, high = _f(figure.get("value")), _f(figure.get("low")), _f(figure.get("high"))
    if not value or low is None or high is None or not low <= value <= high:
        return
    for name in names:
        v = m.get(name)
        if v is not None:
            ranges[name] = (v * low / value, v * high / value)


def _f(v: object) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    try:
        f = float(v)
    except OverflowError:  # an integer beyond any float
        return None
    return f if math.isfinite(f) else None


# -- the baseline file ------------------------------------------------------------------------


def baseline_document(
    current: Measurements | None = None, tests: Mapping[str, Measurements] | None = None
) -> dict[str, Any]:
    """The JSON document of a baseline file: one run's figures, or one per test (the pytest
    plugin's), keyed by test id."""

    def one(x: Measurements) -> dict[str, Any]:
        metrics = {k: v for k, v in x.metrics.items() if v is not None}
        out: dict[str, Any] = {
            "metrics": metrics,
            "step_times_seconds": _thin(x.step_times_seconds),
        }
        if x.ranges:
            out["ranges"] = {k: [lo, hi] for k, (lo, hi) in sorted(x.ranges.items())}
        if x.methods:
            out["methods"] = dict(sorted(x.methods.items()))
        return out

    doc: dict[str, Any] = {"computewatch_baseline": BASELINE_VERSION}
    if current is not None:
        doc.update(one(current))
        doc["source"] = current.source
    if tests is not None:
        doc["tests"] = {k: one(v) for k, v in sorted(tests.items())}
    return doc


def _measurements(raw: object, where: str) -> Measurements:
    if not isinstance(raw, dict):
        raise BaselineError(f"{where}: expected an object")
    metrics_raw = raw.get("metrics", {})
    if not isinstance(metrics_raw, dict):
        raise BaselineError(f"{where}: 'metrics' must be an object")
    metrics: dict[str, float | None] = {}
    for k, v in metrics_raw.items():
        if k not in METRICS:
            continue  # a metric of a newer version: not gated here
        if v is not None and _f(v) is None:
            raise BaselineError(f"{where}: metric {k!r} is not a finite number")
        metrics[k] = _f(v)
    times = raw.get("step_times_seconds", [])
    if not isinstance(times, list) or any(_f(t) is None or float(t) < 0 for t in times):
        raise BaselineError(f"{where}: 'step_times_seconds' must be a list of numbers >= 0")
    ranges_raw = raw.get("ranges", {})
    if not isinstance(ranges_raw, dict):
        raise BaselineError(f"{where}: 'ranges' must be an object")
    ranges: dict[str, tuple[float, float]] = {}
    for k, v in ranges_raw.items():
        if k not in METRICS:
            continue
        lo, hi = (_f(v[0]), _f(v[1])) if isinstance(v, list) and len(v) == 2 else (None, None)
        if lo is None or hi is None or lo > hi:
            raise BaselineError(f"{where}: range of {k!r} must be [low, high]")
        ranges[k] = (lo, hi)
    methods_raw = raw.get("methods", {})
    if not isinstance(methods_raw, dict):
        raise BaselineError(f"{where}: 'methods' must be an object")
    methods = {str(k): str(v) for k, v in methods_raw.items() if k in METRICS}
    return Measurements(metrics, [float(t) for t in times], where, ranges, methods)


def parse_baseline(
    text: str, where: str = "baseline"
) -> tuple[Measurements | None, dict[str, Measurements]]:
    """A baseline file's run figures (None when it holds only tests) and its tests' figures."""
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise BaselineError(f"{where}: not JSON ({e})") from None
    if not isinstance(doc, dict) or doc.get("computewatch_baseline") != BASELINE_VERSION:
        raise BaselineError(
            f"{where}: not a computewatch baseline file (expected "
            f'"computewatch_baseline": {BASELINE_VERSION})'
        )
    run = _measurements(doc, where) if "metrics" in doc else None
    tests_raw = doc.get("tests", {})
    if not isinstance(tests_raw, dict):
        raise BaselineError(f"{where}: 'tests' must be an object")
    tests = {str(k): _measurements(v, f"{where}: test {k!r}") for k, v in tests_raw.items()}
    return run, tests


def dumps_baseline(doc: Mapping[str, Any]) -> str:
    return jsonout.dumps(doc, indent=1, sort_keys=True) + "\n"


# -- the check --------------------------------------------------------------------------------


@dataclass(frozen=True)
class CheckRow:
    metric: str
    baseline: float | None
    current: float | None
    change: float | None  # (current - baseline) / baseline; medians in the noise-aware mode
    limit: str
    status: str  # "ok", "regression", "missing", "incomparable" (obtained differently)
    test: str  # "value", "distribution" (step times) or "range" (the figures' low-high)
    p_value: float | None = None


@dataclass(frozen=True)
class CheckResult:
    rows: list[CheckRow]
    regressed: bool
    missing: bool
    baseline: str
    current: str
    noise_aware: bool
    alpha: float


def _norm_sf(z: float) -> float:
    return 0.5 * math.erfc(z / math.sqrt(2.0))


def mann_whitney_greater(current: Sequence[float], baseline: Sequence[float]) -> float:
    """One-sided p-value that ``current`` tends to be larger than ``baseline`` (Mann-Whitney
    U, normal approximation with tie and continuity corrections; Mann and Whitney 1947)."""
    n1, n2 = len(current), len(baseline)
    if n1 == 0 or n2 == 0:
        return 1.0
    pooled = sorted([(v, 0) for v in current] + [(v, 1) for v in baseline])
    ranks = [0.0] * len(pooled)
    ties = 0.0
    i = 0
    while i < len(pooled):
        j = i
        while j + 1 < len(pooled) and pooled[j + 1][0] == pooled[i][0]:
            j += 1
        rank = (i + j) / 2.0 + 1.0
        for k in range(i, j + 1):
            ranks[k] = rank
        t = j - i + 1
        ties += t**3 - t
        i = j + 1
    r1 = sum(r for r, (_, side) in zip(ranks, pooled, strict=True) if side == 0)
    u1 = r1 - n1 * (n1 + 1) / 2.0
    n = n1 + n2
    var = n1 * n2 / 12.0 * ((n + 1) - ties / (n * (n - 1))) if n > 1 else 0.0
    if var <= 0:
        return 1.0
    z = (u1 - n1 * n2 / 2.0 - 0.5) / math.sqrt(var)
    return _norm_sf(z)


def _regressed(limit: Limit, base: float, cur: float) -> bool:
    if limit.bound == "max":
        return cur > base * (1 + limit.fraction) + 1e-15 * abs(base)
    return cur < base * (1 + limit.fraction) - 1e-15 * abs(base)


def check(
    current: Measurements,
    baseline: Measurements,
    limits: Sequence[Limit] = DEFAULT_LIMITS,
    *,
    noise_aware: bool = True,
    alpha: float = DEFAULT_ALPHA,
    min_samples: int = 5,
) -> CheckResult:
    """Each limit against the baseline, each figure with its own uncertainty. A step-time limit
    (both sides with ``min_samples`` step times; ``noise_aware=False`` compares the two numbers
    only) regresses when the current step times are significantly larger (one-sided
    Mann-Whitney U at ``alpha``) AND their median moved past the limit. A figure with a range on
    both sides (energy, cost) regresses only when the ranges are apart by more than the limit
    (current low above the baseline's high moved by the limit, for ``--max``). Other figures
    compare values."""
    rows: list[CheckRow] = []
    for lim in limits:
        base = baseline.metrics.get(lim.metric)
        cur = current.metrics.get(lim.metric)
        use_dist = (
            noise_aware
            and lim.metric in _STEP_METRICS
            and len(current.step_times_seconds) >= min_samples
            and len(baseline.step_times_seconds) >= min_samples
        )
        p = None
        if use_dist:
            base = statistics.median(baseline.step_times_seconds)
            cur = statistics.median(current.step_times_seconds)
        if base is None or cur is None:
            rows.append(CheckRow(lim.metric, base, cur, None, lim.text, "missing", "value"))
            continue
        change = (cur - base) / base if base else None
        how_b, how_c = baseline.methods.get(lim.metric), current.methods.get(lim.metric)
        if (how_b is not None and how_c is not None and how_b != how_c) or any(
            h is not None and h.startswith(_UNRESOLVED) for h in (how_b, how_c)
        ):
            rows.append(
                CheckRow(lim.metric, base, cur, change, lim.text, "incomparable",
                         f"obtained differently: {how_b} / {how_c}")
            )  # fmt: skip
            continue
        bad = _regressed(lim, base, cur)
        test = "distribution" if use_dist else "value"
        if use_dist and bad:
            a, b = current.step_times_seconds, baseline.step_times_seconds
            p = mann_whitney_greater(a, b) if lim.bound == "max" else mann_whitney_greater(b, a)
            bad = p < alpha
        elif lim.metric in current.ranges and lim.metric in baseline.ranges:
            test = "range"
            (c_lo, c_hi), (b_lo, b_hi) = current.ranges[lim.metric], baseline.ranges[lim.metric]
            bad = _regressed(lim, b_hi, c_lo) if lim.bound == "max" else _regressed(lim, b_lo, c_hi)
        status = "regression" if bad else "ok"
        rows.append(CheckRow(lim.metric, base, cur, change, lim.text, status, test, p))
    return CheckResult(
        rows,
        regressed=any(r.status == "regression" for r in rows),
        missing=any(r.status == "missing" for r in rows),
        baseline=baseline.source,
        current=current.source,
        noise_aware=noise_aware,
        alpha=alpha,
    )
