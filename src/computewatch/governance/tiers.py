"""Compute thresholds ("tiers"), whether a model has crossed one or is forecast to, and the
obligation each crossing opens, with its deadline.

Default tiers (docs/governance.md gives the texts they come from):

========================  ==========  ===========================================  =========
tier                      threshold   rule                                         deadline
========================  ==========  ===========================================  =========
eu-gpai                   1e23 FLOP   EU Commission guidelines: indicative GPAI    none
eu-systemic-risk          1e25 FLOP   EU AI Act Art. 51(2), notify per Art. 52     14 days
us-frontier               1e26 FLOP   California SB 53 frontier model; BIS 2024    14 days
                                      proposal's reporting threshold
eu-modification           1/3 of the  EU guidelines: a modifier becomes provider   14 days
                          original    (1e23/3 when the original is unknown)
eu-modification-systemic  1/3 of the  as above, for a systemic-risk original       14 days
                          original    (1e25/3 when the original is unknown)
us-cluster                1e20 FLOP/s BIS 2024 proposal: cluster capacity           14 days
========================  ==========  ===========================================  =========

A threshold is judged on the upper end of the figure's range (the cautious reading), and on the
forecast at completion of the running runs: a forecast crossing opens the obligation before the
crossing itself (the EU's "or knowing it will be met").
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Final

from computewatch.catalog import load_accelerators
from computewatch.lineage.compute import (
    TRAINING_STAGES,
    Estimate,
    GovernanceError,
    ModelCompute,
    RunCompute,
)

CUMULATIVE: Final = "cumulative"  # the model's compute with its base's (SB 53, EU tiers)
MODIFICATION: Final = "modification"  # a fine-tune's own compute against its original's third
CLUSTER: Final = "cluster"  # a node set's peak FLOP/s


@dataclass(frozen=True, slots=True)
class Tier:
    name: str
    kind: str
    threshold: float
    """FLOP (cumulative), FLOP/s (cluster) or, for modification, the fallback when the
    original's compute is unknown."""
    rule: str
    deadline_days: int | None
    """Days to act from the crossing or the forecast; None: recorded, no obligation."""
    original_threshold: float | None = None
    """Modification tiers: the original must be above this for the tier to apply."""


DEFAULT_TIERS: Final = (
    Tier("eu-gpai", CUMULATIVE, 1e23,
         "EU Commission GPAI guidelines (2025): indicative criterion for a general-purpose "
         "model", None),
    Tier("eu-systemic-risk", CUMULATIVE, 1e25,
         "EU AI Act Art. 51(2): presumed systemic risk; Art. 52(1): notify the Commission "
         "within two weeks", 14),
    Tier("us-frontier", CUMULATIVE, 1e26,
         "California SB 53 (2025): frontier model, fine-tuning and RL included; BIS proposed "
         "rule (2024): quarterly reports above 1e26 operations", 14),
    Tier("eu-modification", MODIFICATION, 1e23 / 3,
         "EU Commission GPAI guidelines (2025): a modification using more than a third of the "
         "original's compute makes the modifier its provider", 14, 0.0),
    Tier("eu-modification-systemic", MODIFICATION, 1e25 / 3,
         "EU Commission GPAI guidelines (2025): as above, for an original with systemic risk",
         14, 1e25),
    Tier("us-cluster", CLUSTER, 1e20,
         "BIS proposed rule (2024): clusters above 1e20 operations per second", 14),
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class TierStatus:
    tier: Tier
    state: str
    """crossed, forecast, approaching (from 10 %), below or unknown."""
    judged_flop: float | None
    method: str | None
    threshold: float
    """The threshold that applied (a modification tier: a third of the original's figure)."""
    note: str = ""
    crossed_at: float | None = None
    """Crossed: when the compute crossed the threshold (Unix seconds), the end of the run whose
    figure took the sum over it (:func:`crossing_time`); None when that is not known here (the
    crossing is among pruned runs)."""


APPROACHING: Final = 0.10


def model_status(m: ModelCompute, models: Mapping[str, ModelCompute],
                 tiers: Sequence[Tier] = DEFAULT_TIERS) -> list[TierStatus]:  # fmt: skip
    """Each tier's state for one model."""
    out: list[TierStatus] = []
    for t in tiers:
        if t.kind == CUMULATIVE:
            judged = m.judged("cumulative")
            forecast = None if judged is None or m.forecast_high is None else (
                judged[0] + m.forecast_high
            )  # fmt: skip
            st = _state(t, judged, forecast, t.threshold)
            if st.state == "crossed":
                st = replace(st, crossed_at=crossing_time(_lineage(m, models), st.threshold,
                                                          m.cumulative))  # fmt: skip
            out.append(st)
        elif t.kind == MODIFICATION and m.base_model is not None:
            st = _modification(t, m, models)
            if st.state == "crossed":
                st = replace(st, crossed_at=crossing_time(_training(m.runs), st.threshold, m.own))
            out.append(st)
    return out


def _training(runs: Iterable[RunCompute]) -> list[RunCompute]:
    return [r for r in runs if r.declaration.stage in TRAINING_STAGES]


def _lineage(m: ModelCompute, models: Mapping[str, ModelCompute]) -> list[RunCompute]:
    """The training runs a model's cumulative compute sums: its own and its bases' (a cycle,
    refused at ingest, stops at the model seen twice)."""
    out: list[RunCompute] = []
    seen: set[str] = set()
    cur: ModelCompute | None = m
    while cur is not None and cur.model not in seen:
        seen.add(cur.model)
        out.extend(_training(cur.runs))
        cur = None if cur.base_model is None else models.get(cur.base_model)
    return out


def run_end(r: RunCompute) -> float:
    """When a run's compute is all spent: its end, or for a running run its latest figures."""
    return r.started_at + r.duration_seconds


def crossing_time(
    runs: Sequence[RunCompute], threshold: float, total: Mapping[str, Estimate]
) -> float | None:
    """When the sum of ``runs``' compute first went over ``threshold``, judged as the tiers
    judge (the highest upper bound among methods): each run's figure counts from its end
    (:func:`run_end`), in the order the runs ended. What ``total`` holds beyond the runs
    (pruned runs' totals, summed before the log's first entry) counts from the start; when
    that alone crosses, the time is not known here (None)."""
    before: dict[str, float] = {}
    for method, e in total.items():
        known = math.fsum(r.flops[method].high for r in runs if method in r.flops)
        before[method] = max(0.0, e.high - known)
    if max(before.values(), default=0.0) > threshold:
        return None
    sums = dict(before)
    for r in sorted(runs, key=lambda x: (run_end(x), x.run_id)):
        for method, e in r.flops.items():
            sums[method] = sums.get(method, 0.0) + e.high
        if max(sums.values(), default=0.0) > threshold:
            return run_end(r)
    return max((run_end(r) for r in runs), default=None)  # rounding: the last one took it


def _modification(t: Tier, m: ModelCompute, models: Mapping[str, ModelCompute]) -> TierStatus:
    own = m.judged("own")
    forecast = None if own is None or m.forecast_high is None else own[0] + m.forecast_high
    base = models.get(m.base_model or "")
    base_fig = None if base is None else base.judged("cumulative")
    if base_fig is None:  # the original's compute is unknown here: the guidelines' fallback
        return _state(t, own, forecast, t.threshold,
                      f"{m.base_model}'s compute is unknown: fallback threshold")  # fmt: skip
    original = base_fig[0]
    if original <= (t.original_threshold or 0.0):
        return TierStatus(t, "below", None if own is None else own[0],
                          None if own is None else own[1], original / 3,
                          f"{m.base_model} is below {t.original_threshold:.0e} FLOP: "
                          "tier does not apply")  # fmt: skip
    return _state(t, own, forecast, original / 3,
                  f"a third of {m.base_model}'s {original:.3g} FLOP (upper bound)")  # fmt: skip


def _state(t: Tier, judged: tuple[float, str] | None, forecast: float | None,
           threshold: float, note: str = "") -> TierStatus:  # fmt: skip
    if judged is None:
        return TierStatus(t, "unknown", None, None, threshold, note or "no FLOP figure")
    value, method = judged
    if value > threshold:
        state = "crossed"
    elif forecast is not None and forecast > threshold:
        state = "forecast"
    elif value >= APPROACHING * threshold:
        state = "approaching"
    else:
        state = "below"
    return TierStatus(t, state, value, method, threshold, note)


def cluster_capacity(
    nodes: Mapping[str, Iterable[str]], precision: str = "bf16"
) -> tuple[float, list[str]]:
    """Peak FLOP/s of a node set (each node's accelerators by catalog or NVML name, dense peak at
    ``precision``), and the accelerator names the catalog lacks (counted as 0)."""
    catalog = dict(load_accelerators())
    for a in list(catalog.values()):
        catalog.update((name, a) for name in a.nvml_names)  # NVML's names find it too
    total, unknown = 0.0, set()
    for models in nodes.values():
        for name in models:
            found = catalog.get(name)
            peak = None if found is None else found.peak_tflops(precision)
            if peak is None:
                unknown.add(name)
            total += (peak or 0.0) * 1e12
    return total, sorted(unknown)


def parse_tiers(doc: object, where: str) -> tuple[Tier, ...]:
    """``[governance] tiers``: a table of NAME = threshold (FLOP) overriding or adding
    cumulative tiers, or NAME = {threshold=..., deadline_days=...}."""
    if not isinstance(doc, Mapping):
        raise GovernanceError(f"{where}: governance.tiers must be a table")
    tiers = {t.name: t for t in DEFAULT_TIERS}
    for name, spec in doc.items():
        base = tiers.get(name, Tier(str(name), CUMULATIVE, 0.0, "configured", 14))
        if isinstance(spec, int | float) and not isinstance(spec, bool):
            tiers[name] = _replace(base, float(spec), base.deadline_days, where)
        elif isinstance(spec, Mapping):
            th = spec.get("threshold", base.threshold)
            days = spec.get("deadline_days", base.deadline_days)
            if not isinstance(th, int | float) or isinstance(th, bool):
                raise GovernanceError(f"{where}: governance.tiers.{name}.threshold: a number")
            if days is not None and (not isinstance(days, int) or isinstance(days, bool)
                                     or not 0 <= days <= 3650):  # fmt: skip
                raise GovernanceError(
                    f"{where}: governance.tiers.{name}.deadline_days: whole days, 0 to 3650"
                )
            tiers[name] = _replace(base, float(th), days, where)
        else:
            raise GovernanceError(f"{where}: governance.tiers.{name}: a number or a table")
    return tuple(tiers.values())


def _replace(t: Tier, threshold: float, days: int | None, where: str) -> Tier:
    if not (threshold > 0 and math.isfinite(threshold)):
        raise GovernanceError(f"{where}: governance.tiers.{t.name}: a positive finite threshold")
    return Tier(t.name, t.kind, threshold, t.rule, days, t.original_threshold)


def deadline(opened: dt.datetime, tier: Tier) -> dt.datetime | None:
    return None if tier.deadline_days is None else opened + dt.timedelta(days=tier.deadline_days)
