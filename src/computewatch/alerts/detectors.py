"""Built-in detectors: conditions a threshold on one metric cannot say.

- ``step_time_regression``: a job's mean step time over the last ``window`` is more than
  ``threshold`` above its own baseline, the mean step time over ``baseline`` after ``warmup``
  (from ``computewatch_job_step_time_seconds_total`` / ``computewatch_job_steps_total``).
- ``energy_budget``: a job's energy (``computewatch_job_energy_joules_total``) reached ``kwh``.
- ``cost_budget``: a job's cost so far (see :mod:`computewatch.alerts.budget`) reached ``usd``.

Each detector gives, per job, a value for ``{value}`` and a sentence for ``{detail}``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from computewatch.alerts.budget import J_PER_KWH, Pricing
from computewatch.alerts.expr import InstantSamples, format_duration, parse_duration
from computewatch.readings import Labels

__all__ = [
    "DETECTORS",
    "JOB_LABELS",
    "Detector",
    "Param",
    "check_params",
    "make_detector",
]

JOB_LABELS = ("job", "user", "team", "node")
"""The labels that name a job; a detector's alerts carry these (other labels are summed)."""

FORGET_AFTER_S = 600.0  # a job unseen this long is forgotten (its baseline with it)


@dataclass(frozen=True, slots=True)
class Param:
    kind: str  # "duration", "ratio" (> 0), "positive", "count"
    default: float | None = None  # None: required
    help: str = ""


DETECTORS: dict[str, dict[str, Param]] = {
    "step_time_regression": {
        "threshold": Param("ratio", 0.2, "regression that fires: 0.2 = 20% slower"),
        "window": Param("duration", 300.0, "recent window the mean step time is taken over"),
        "warmup": Param("duration", 120.0, "start of the job left out of the baseline"),
        "baseline": Param("duration", 600.0, "how long after the warm-up the baseline lasts"),
        "min_steps": Param("count", 20.0, "fewest steps in a window for a mean"),
    },
    "energy_budget": {"kwh": Param("positive", None, "energy budget per job, kWh")},
    "cost_budget": {"usd": Param("positive", None, "cost budget per job, US dollars")},
}


def check_params(detector: str, raw: Mapping[str, object]) -> dict[str, float]:
    """The detector's parameters with defaults filled; ValueError ``"NAME: reason"`` if bad."""
    spec = DETECTORS[detector]
    out: dict[str, float] = {}
    for key, value in raw.items():
        p = spec.get(key)
        if p is None:
            raise ValueError(f"{key}: unknown parameter of {detector}; known: {', '.join(spec)}")
        out[key] = _param(key, p, value)
    for key, p in spec.items():
        if key not in out:
            if p.default is None:
                raise ValueError(f"{key}: {detector} needs {key} ({p.help})")
            out[key] = p.default
    return out


def _param(key: str, p: Param, value: object) -> float:
    if p.kind == "duration":
        if not isinstance(value, str):
            raise ValueError(f"{key}: {value!r} is not a duration (examples: 30s, 5m, 1h)")
        try:
            return parse_duration(value)
        except ValueError as e:
            raise ValueError(f"{key}: {e}") from None
    if isinstance(value, bool):
        raise ValueError(f"{key}: expected a number, not {value!r}")
    try:
        v = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError(f"{key}: expected a number, not {value!r}") from None
    if not v > 0 or v == float("inf"):
        raise ValueError(f"{key}: must be a positive number, not {value!r}")
    if p.kind == "count" and v != int(v):
        raise ValueError(f"{key}: must be a whole number, not {value!r}")
    return v


class Detector(Protocol):
    def evaluate(self, tick: InstantSamples) -> dict[Labels, tuple[float, str]]:
        """Jobs for which the detector fires now: labels -> (value, detail)."""


def _job_sums(tick: InstantSamples, name: str) -> dict[Labels, float]:
    """A per-job metric summed over its other labels (``method`` and the like)."""
    out: dict[Labels, float] = {}
    for labels, value in tick.by_name.get(name, ()):
        d = dict(labels)
        key = tuple((k, d.get(k, "")) for k in JOB_LABELS)
        out[key] = out.get(key, 0.0) + value
    return out


@dataclass
class _Steps:
    first: float
    last_seen: float
    points: deque[tuple[float, float, float]] = field(default_factory=deque)
    anchor: tuple[float, float, float] | None = None
    baseline: float | None = None  # seconds per step
    baseline_steps: tuple[float, float] = (0.0, 0.0)


class StepTimeRegression:
    """A job's recent mean step time against its own baseline (see the module docstring)."""

    def __init__(self, params: Mapping[str, float]) -> None:
        self.threshold = params["threshold"]
        self.window = params["window"]
        self.warmup = params["warmup"]
        self.baseline_s = params["baseline"]
        self.min_steps = params["min_steps"]
        self.jobs: dict[Labels, _Steps] = {}

    def evaluate(self, tick: InstantSamples) -> dict[Labels, tuple[float, str]]:
        now = tick.now
        steps = _job_sums(tick, "computewatch_job_steps_total")
        times = _job_sums(tick, "computewatch_job_step_time_seconds_total")
        out: dict[Labels, tuple[float, str]] = {}
        for key, n in steps.items():
            t = times.get(key)
            if t is None:
                continue
            st = self.jobs.get(key)
            if st is None or (st.points and n < st.points[-1][1]):  # new job, or restarted
                st = self.jobs[key] = _Steps(first=now, last_seen=now)
            st.last_seen = now
            st.points.append((now, n, t))
            while len(st.points) > 1 and st.points[1][0] <= now - self.window:
                st.points.popleft()
            hit = self._check(st, now, n, t)
            if hit is not None:
                out[key] = hit
        for key in [k for k, s in self.jobs.items() if now - s.last_seen > FORGET_AFTER_S]:
            del self.jobs[key]
        return out

    def _check(self, st: _Steps, now: float, n: float, t: float) -> tuple[float, str] | None:
        if st.baseline is None:
            if st.anchor is None:
                # The warm-up ends after the first steps: a first step that carried the job's
                # start-up (imports, data loading) stays out of the baseline.
                if now - st.first >= self.warmup and n > 0:
                    st.anchor = (now, n, t)
                return None
            a_t, a_n, a_time = st.anchor
            if now - a_t < self.baseline_s or n - a_n < self.min_steps or t <= a_time:
                return None
            st.baseline = (t - a_time) / (n - a_n)
            st.baseline_steps = (a_n, n)
            return None
        old_t, old_n, old_time = st.points[0]
        if now - old_t < self.window * 0.9 or n - old_n < self.min_steps:
            return None  # not a full window yet, or too few steps in it for a mean
        mean = (t - old_time) / (n - old_n)
        regression = mean / st.baseline - 1
        if regression <= self.threshold:
            return None
        lo, hi = st.baseline_steps
        detail = (
            f"mean step {mean:.3g} s over the last {format_duration(self.window)} "
            f"({n - old_n:.0f} steps) vs {st.baseline:.3g} s baseline (steps {lo:.0f}-{hi:.0f})"
        )
        return regression, detail


class EnergyBudget:
    """A job's energy so far against a budget in kWh."""

    def __init__(self, params: Mapping[str, float]) -> None:
        self.kwh = params["kwh"]

    def evaluate(self, tick: InstantSamples) -> dict[Labels, tuple[float, str]]:
        out: dict[Labels, tuple[float, str]] = {}
        for key, joules in _job_sums(tick, "computewatch_job_energy_joules_total").items():
            kwh = joules / J_PER_KWH
            if kwh >= self.kwh:
                out[key] = (
                    kwh,
                    f"{kwh:.4g} kWh of device energy (GPU share + CPU share, "
                    f"computewatch_job_energy_joules_total) >= budget {self.kwh:g} kWh",
                )
        return out


class CostBudget:
    """A job's cost so far (energy, GPU time, age) against a budget in US dollars."""

    def __init__(self, params: Mapping[str, float], pricing: Pricing) -> None:
        self.usd = params["usd"]
        self.pricing = pricing
        self.first_seen: dict[Labels, float] = {}

    def evaluate(self, tick: InstantSamples) -> dict[Labels, tuple[float, str]]:
        now = tick.now
        energy = _job_sums(tick, "computewatch_job_energy_joules_total")
        gpu_s = _job_sums(tick, "computewatch_job_gpu_seconds_total")
        info = _job_sums(tick, "computewatch_job_info")
        out: dict[Labels, tuple[float, str]] = {}
        present = set(energy) | set(gpu_s) | set(info)
        for key in present:
            first = self.first_seen.setdefault(key, now)
            usd, how = self.pricing.cost(
                energy.get(key, 0.0) / J_PER_KWH, gpu_s.get(key, 0.0), now - first
            )
            if usd >= self.usd:
                out[key] = (usd, f"${usd:.2f} = {how} >= budget ${self.usd:g}")
        for key in [k for k in self.first_seen if k not in present]:
            del self.first_seen[key]
        return out


def make_detector(name: str, params: Mapping[str, float], pricing: Pricing | None) -> Detector:
    """A fresh detector; ``pricing`` is needed by ``cost_budget`` only (ValueError without)."""
    if name == "step_time_regression":
        return StepTimeRegression(params)
    if name == "energy_budget":
        return EnergyBudget(params)
    if name == "cost_budget":
        if pricing is None:
            raise ValueError("a cost budget needs prices")
        return CostBudget(params, pricing)
    raise ValueError(f"unknown detector {name!r}")
