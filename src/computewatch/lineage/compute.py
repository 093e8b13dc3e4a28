"""What a model's training used: each run's compute by method, summed per model across
restarts, resumptions and stages, with a fine-tune's base added for the rules that count it.

Three estimates are kept side by side, never mixed (docs/governance.md):

- ``counted``: the FLOPs the program reported per step (``flops.method == "counted"``);
- ``hardware``: GPU time × peak FLOP/s × utilization (Epoch AI's method, the accounting's
  ``flops`` estimate), with its low-high range;
- ``architecture``: 6 × parameters × training tokens (the declared parameter count and the
  tokens the run's steps reported), ±0 % by construction but only as good as the declaration.

A threshold is judged on the highest upper bound among the methods available (the cautious
reading); the status says which method that was.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from computewatch.catalog import PRECISIONS, find_by_nvml_name, load_accelerators
from computewatch.errors import ComputewatchError

STAGES: Final = (
    "pretrain", "finetune", "rl", "synthetic-data", "distillation", "eval", "inference",
)  # fmt: skip
TRAINING_STAGES: Final = frozenset({"pretrain", "finetune", "rl", "distillation"})
"""Stages whose compute counts as training compute (SB 53 counts fine-tuning and RL; synthetic
data generation, evaluation and inference are recorded but not counted)."""

METHODS: Final = ("counted", "hardware", "architecture")
SIMULATED: Final = " (simulated)"
"""The suffix of a simulated or replayed device kind in a run's hardware (``8x H100-SXM
(simulated)``): such runs are kept and flagged, and count only with ``[governance]
count_simulated = true``."""
ARCHITECTURE_FACTOR: Final = 6.0  # FLOP per parameter per training token (forward + backward)


class GovernanceError(ComputewatchError):
    """A governance declaration or request that cannot be honoured."""


class DeclarationRefused(GovernanceError):
    """A run's declaration the server refuses at ingest (nothing of the batch is stored):
    ``status`` is the HTTP answer (422: a lineage cycle or self-reference; 403: a model or
    base model the run's team may not name), ``code`` the API's error code."""

    def __init__(self, message: str, status: int = 422, code: str = "lineage") -> None:
        super().__init__(message)
        self.status = status
        self.code = code


MODEL_SEP: Final = "/"
"""A model's identity is ``team/name``: the team whose runs train it, and its name there."""


def qualify(team: str, name: str) -> str:
    """The model ``name`` means when a run of ``team`` names it: a bare ``name`` is
    ``team/name``; a name with a team (``other/name``) is that team's (the ingest refuses a
    run that names another team's model as its own)."""
    return name if MODEL_SEP in name else f"{team}{MODEL_SEP}{name}"


def team_of(model: str) -> str | None:
    """The team of a qualified model (``team/name``); None for a bare name (stored before
    models were qualified)."""
    team, sep, _ = model.partition(MODEL_SEP)
    return team if sep else None


def bare_name(model: str) -> str:
    """The name of a model within its team (``name`` of ``team/name``)."""
    team, sep, name = model.partition(MODEL_SEP)
    return name if sep else team


@dataclass(frozen=True, slots=True)
class Declaration:
    """What a run says it trains (``run --model/--base-model/--stage/--parameters``)."""

    model: str
    base_model: str | None = None
    stage: str = "pretrain"
    parameters: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "base_model": self.base_model,
            "stage": self.stage,
            "parameters": self.parameters,
        }


def declaration(
    model: str | None,
    base_model: str | None = None,
    stage: str | None = None,
    parameters: float | None = None,
) -> Declaration | None:
    """A checked declaration, or None when no model is named."""
    if model is None or not model.strip():
        if base_model or stage or parameters:
            raise GovernanceError("a base model, stage or parameter count needs a model (--model)")
        return None
    stage = stage or ("finetune" if base_model else "pretrain")
    if stage not in STAGES:
        raise GovernanceError(f"unknown stage {stage!r}; expected one of {', '.join(STAGES)}")
    if base_model is not None and base_model.strip() == model.strip():
        raise GovernanceError("a model cannot be its own base model")
    if parameters is not None and not (parameters > 0 and parameters < 1e16):
        raise GovernanceError(f"parameters must be a positive count, not {parameters!r}")
    return Declaration(model.strip(), (base_model or "").strip() or None, stage, parameters)


def declaration_from_json(doc: object) -> Declaration | None:
    if not isinstance(doc, Mapping) or not isinstance(doc.get("model"), str):
        return None
    params = doc.get("parameters")
    try:
        return declaration(
            doc["model"], doc.get("base_model"), doc.get("stage"),
            float(params) if isinstance(params, int | float) else None,
        )  # fmt: skip
    except GovernanceError:
        return None


@dataclass(frozen=True, slots=True)
class Estimate:
    """A FLOP figure with its range; ``low <= value <= high``."""

    value: float
    low: float
    high: float

    def __add__(self, other: Estimate) -> Estimate:
        return Estimate(self.value + other.value, self.low + other.low, self.high + other.high)


ZERO: Final = Estimate(0.0, 0.0, 0.0)


@dataclass(frozen=True, slots=True)
class RunCompute:
    """One run's part in a model's training."""

    run_id: str
    declaration: Declaration
    status: str
    started_at: float
    duration_seconds: float
    gpu_hours: float
    energy_kwh: float | None
    flops: Mapping[str, Estimate]
    """By method (``counted``, ``hardware``, ``architecture``): the ones that are known."""
    forecast_high: float | None = None
    """Upper bound of the run's FLOPs at completion, while it runs with a step target."""
    hardware: tuple[str, ...] = ()

    @property
    def simulated(self) -> bool:
        """Whether any of its devices was simulated or replayed."""
        return any(h.endswith(SIMULATED) for h in self.hardware)


@dataclass(frozen=True, slots=True)
class Implausible:
    """A counted figure above what the run's devices could do (devices × peak × duration):
    judged at the bound, both numbers kept."""

    run_id: str
    counted_flop: float
    hardware_bound_flop: float


def devices_json(hardware: Iterable[str]) -> list[dict[str, Any]]:
    """A run's hardware as figures list it (and its node signs it): ``{"model", "count"}`` per
    kind; whether the devices were simulated is the entry's ``simulated``, beside them."""
    out: list[dict[str, Any]] = []
    for text in hardware:  # "8x H100-SXM", "8x H100-SXM (simulated)"
        count, _, kind = text.partition("x ")
        out.append(
            {"model": kind.removesuffix(SIMULATED), "count": int(count) if count.isdigit() else 0}
        )
    return out


def hardware_bound(r: RunCompute) -> float | None:
    """The most FLOPs the run's devices could do: each device's highest dense peak (any
    precision, from the catalog) × the run's duration; None when a device is unknown."""
    catalog = load_accelerators()
    per_second = 0.0
    for text in r.hardware:
        count, _, kind = text.partition("x ")
        kind = kind.removesuffix(SIMULATED)
        a = catalog.get(kind) or find_by_nvml_name(kind)
        peaks = [] if a is None else [p for x in PRECISIONS if (p := a.peak_tflops(x))]
        if not count.isdigit() or not peaks:
            return None
        per_second += int(count) * max(peaks) * 1e12
    if per_second <= 0 or r.duration_seconds <= 0:
        return None
    return per_second * r.duration_seconds


def judged_flops(r: RunCompute) -> tuple[dict[str, Estimate], Implausible | None]:
    """The run's figures as the tiers judge them: a counted figure above the hardware bound
    (:func:`hardware_bound`) is implausible and judged at the bound."""
    counted = r.flops.get("counted")
    if counted is None:
        return dict(r.flops), None
    bound = hardware_bound(r)
    if bound is None or counted.high <= bound:
        return dict(r.flops), None
    out = dict(r.flops)
    out["counted"] = Estimate(min(counted.value, bound), min(counted.low, bound), bound)
    return out, Implausible(r.run_id, counted.high, bound)


def _estimate(fig: object) -> Estimate | None:
    if not isinstance(fig, Mapping):
        return None
    v, lo, hi = fig.get("value"), fig.get("low"), fig.get("high")
    if not isinstance(v, int | float):
        return None
    lo = lo if isinstance(lo, int | float) else v
    hi = hi if isinstance(hi, int | float) else v
    return Estimate(float(v), float(min(lo, v)), float(max(hi, v)))


def run_compute(
    run_id: str,
    summary: Mapping[str, Any],
    decl: Declaration,
    *,
    status: str,
    started_at: float,
) -> RunCompute:
    """A run's compute from its summary (what ``show --json`` prints) and its declaration."""
    flops: dict[str, Estimate] = {}
    section = summary.get("flops")
    if isinstance(section, Mapping):
        if section.get("method") == "counted":
            counted = _estimate(section)
            if counted is not None:
                flops["counted"] = counted
            hw = _estimate(section.get("hardware_estimate"))
        else:
            hw = _estimate(section)
        if hw is not None:
            flops["hardware"] = hw
    steps = summary.get("steps")
    tokens = steps.get("tokens_total") if isinstance(steps, Mapping) else None
    if decl.parameters is not None and isinstance(tokens, int | float) and tokens > 0:
        arch = ARCHITECTURE_FACTOR * decl.parameters * float(tokens)
        flops["architecture"] = Estimate(arch, arch, arch)
    duration = summary.get("duration_seconds")
    duration = float(duration) if isinstance(duration, int | float) else 0.0
    gpus = [g for g in summary.get("gpus") or [] if isinstance(g, Mapping)]
    energy = summary.get("energy")
    kwh = _estimate(energy.get("facility")) if isinstance(energy, Mapping) else None
    forecast = summary.get("forecast")
    fc = _estimate(forecast.get("flops")) if isinstance(forecast, Mapping) else None
    kinds = Counter(
        str(g.get("model") or g.get("name") or "unknown")
        + (SIMULATED if g.get("simulated") else "")
        for g in gpus
    )
    return RunCompute(
        run_id=run_id,
        declaration=decl,
        status=status,
        started_at=started_at,
        duration_seconds=duration,
        gpu_hours=len(gpus) * duration / 3600.0,
        energy_kwh=None if kwh is None else kwh.value,
        flops=flops,
        forecast_high=None if fc is None else fc.high,
        hardware=tuple(f"{n}x {m}" for m, n in sorted(kinds.items())),
    )


@dataclass(slots=True)
class ModelCompute:
    """A model's own training compute (its runs, all stages that count), and with its base."""

    model: str
    base_model: str | None
    runs: list[RunCompute] = field(default_factory=list)
    own: dict[str, Estimate] = field(default_factory=dict)
    """By method: the model's own training runs only (the EU modification rule's figure)."""
    cumulative: dict[str, Estimate] = field(default_factory=dict)
    """By method: own plus the base model's cumulative, recursively (SB 53's figure)."""
    base_known: bool = True
    """False when the base model has no runs here (its compute unknown)."""
    gpu_hours: float = 0.0
    energy_kwh: float = 0.0
    training_seconds: float = 0.0
    forecast_high: float | None = None
    """Upper bound of own compute at the completion of the running runs with a step target."""
    simulated_runs: int = 0
    """Runs on simulated devices (kept and listed; counted only with ``count_simulated``)."""
    simulated_counted: bool = False
    implausible: list[Implausible] = field(default_factory=list)

    def add(self, r: RunCompute, count_simulated: bool = False) -> bool:
        """Add a run's compute to the model's own (its training stages; a simulated run only
        with ``count_simulated``; a counted figure above the hardware bound at the bound).
        Whether it counted."""
        self.runs.append(r)
        if r.simulated:
            self.simulated_runs += 1
            self.simulated_counted = count_simulated
            if not count_simulated:
                return False
        if r.declaration.stage not in TRAINING_STAGES:
            return False
        flops, odd = judged_flops(r)
        if odd is not None:
            self.implausible.append(odd)
        for method, e in flops.items():
            self.own[method] = self.own.get(method, ZERO) + e
        self.gpu_hours += r.gpu_hours
        self.energy_kwh += r.energy_kwh or 0.0
        self.training_seconds += r.duration_seconds
        return True

    def judged(self, which: str = "cumulative") -> tuple[float, str] | None:
        """The highest upper bound among methods, and its method; None when nothing is known."""
        figures = self.cumulative if which == "cumulative" else self.own
        best = max(((e.high, m) for m, e in figures.items()), default=None)
        return best


def lineage_cycle(bases: Mapping[str, Iterable[str]], model: str, base: str) -> str | None:
    """The cycle that declaring ``base`` as ``model``'s base would close, given the bases
    already declared (model -> its bases), as ``a -> b -> a``; None when there is none."""
    if base == model:
        return f"{model} -> {model}"
    parent: dict[str, str] = {base: model}
    todo = [base]
    while todo:
        cur = todo.pop()
        for nxt in sorted(bases.get(cur, ())):
            if nxt == model:
                chain = [cur]
                while chain[-1] != model:
                    chain.append(parent[chain[-1]])
                return " -> ".join([model, *reversed(chain[:-1]), model])
            if nxt not in parent:
                parent[nxt] = cur
                todo.append(nxt)
    return None


def per_model(runs: Iterable[RunCompute], count_simulated: bool = False) -> dict[str, ModelCompute]:
    """Sum runs per model, then add each model's base (a chain of fine-tunes; a cycle, refused
    at ingest, adds no base's share where it closes: stored data never makes this fail)."""
    models: dict[str, ModelCompute] = {}
    for r in runs:
        d = r.declaration
        m = models.get(d.model)
        if m is None:
            m = models[d.model] = ModelCompute(d.model, d.base_model)
        elif m.base_model is None and d.base_model is not None:
            m.base_model = d.base_model
        if not m.add(r, count_simulated):
            continue
        if r.status == "running" and r.forecast_high is not None:
            done = max((e.high for e in r.flops.values()), default=0.0)
            m.forecast_high = (m.forecast_high or 0.0) + max(0.0, r.forecast_high - done)
    for name in models:
        _cumulate(name, models, ())
    return models


def _cumulate(
    name: str, models: dict[str, ModelCompute], path: Sequence[str]
) -> dict[str, Estimate]:
    m = models[name]
    if m.cumulative:
        return m.cumulative
    if name in path:  # refused at ingest; one stored before that counts no base's share
        models[path[-1]].base_known = False
        return {}
    total = dict(m.own)
    if m.base_model is not None:
        if m.base_model in models:
            for method, e in _cumulate(m.base_model, models, (*path, name)).items():
                total[method] = total.get(method, ZERO) + e
        else:
            m.base_known = False
    m.cumulative = total
    return total
