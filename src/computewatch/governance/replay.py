"""Governance state as a replay of the ledger: every model's cumulative compute, its tiers, the
obligations opened and done and their deadlines, computed from the log's entries alone, in
order. ``governance status`` is this replay of the server's log; ``ledger replay FILE`` is the
same replay of an export, so an auditor recomputes the status without the server's tables.

Entries read (docs/governance.md, "The log's entries"):

- ``run``: a finished run's ``figures`` (model, base model, stage, FLOP by method, GPU-hours,
  energy, duration, devices); the newest entry of a run id wins;
- ``running``: the runs of one model still running, with their figures so far, and the model's
  forecast (``forecast_additional_flop_high``), as the server recorded them when they last
  changed a tier's state (or the set of running runs changed);
- ``governance-tiers``: the tiers in force from then on (the defaults before the first);
- ``tier``: a tier's state for a model became ``crossed`` or ``forecast``;
- ``obligation-opened``, ``obligation-done``, ``obligation-merged``: obligations;
- ``prune``: entries before it were deleted; its ``governance`` carries what they added up to;
- ``model-grant``, ``model-revoke``: a team's leave to fine-tune another team's model (recorded
  for the audit; the ingest enforces them, the sums do not depend on them).

A model is ``team/name``: a run entry's figures hold the name its run declared, qualified here
with the entry's team (a bare base model is the run's team's too). Entries written before models
were qualified name a model without its team (``tier``, ``obligation-opened``, ``running``): such
a name is the model of the team that first declared it in the log (:attr:`Replay.owners`), as
migration 0008 qualified the obligations table.

The replay checks what it can: a ``tier`` entry must say what the figures before it give, an
obligation must follow a recorded crossing of its tier with the tier's deadline, a done one must
have been open. What fails is a problem naming the entry (:attr:`Replay.problems`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Final

from computewatch.governance.status import ModelStatus, ObligationView
from computewatch.governance.tiers import DEFAULT_TIERS, Tier, TierStatus, model_status
from computewatch.ledger.log import LogEntry
from computewatch.lineage.compute import (
    MODEL_SEP,
    SIMULATED,
    TRAINING_STAGES,
    ZERO,
    Declaration,
    Estimate,
    GovernanceError,
    Implausible,
    ModelCompute,
    RunCompute,
    bare_name,
    devices_json,
    judged_flops,
    qualify,
)

__all__ = [
    "DONE",
    "GRANT",
    "MERGED",
    "OPENED",
    "REVOKE",
    "RUNNING",
    "TIER",
    "TIERS",
    "Replay",
    "rc_of_figures",
    "tier_json",
    "tiers_of_json",
]

OPENED: Final = "obligation-opened"
DONE: Final = "obligation-done"
MERGED: Final = "obligation-merged"
TIERS: Final = "governance-tiers"
TIER: Final = "tier"
RUNNING: Final = "running"
RUN: Final = "run"
PRUNE: Final = "prune"
GRANT: Final = "model-grant"
REVOKE: Final = "model-revoke"
JUDGED: Final = ("crossed", "forecast")
"""The tier states that are entries (and, with a deadline, open an obligation)."""


def tier_json(t: Tier) -> dict[str, Any]:
    return {
        "name": t.name,
        "kind": t.kind,
        "threshold": t.threshold,
        "rule": t.rule,
        "deadline_days": t.deadline_days,
        "original_threshold": t.original_threshold,
    }


def tiers_of_json(doc: object) -> tuple[Tier, ...]:
    if not isinstance(doc, list):
        raise GovernanceError("a governance-tiers entry lists tiers")
    out = []
    for t in doc:
        if not isinstance(t, Mapping):
            raise GovernanceError("a governance-tiers entry lists tiers")
        days, orig = t.get("deadline_days"), t.get("original_threshold")
        out.append(
            Tier(
                str(t["name"]),
                str(t["kind"]),
                float(t["threshold"]),
                str(t["rule"]),
                None if days is None else int(days),
                None if orig is None else float(orig),
            )
        )
    return tuple(out)


def _flop(x: object) -> float | None:
    """A FLOP figure: a number, or the decimal string of an exact count (``"N FLOP"``)."""
    if isinstance(x, int | float) and not isinstance(x, bool):
        return float(x)
    if isinstance(x, str) and x.endswith(" FLOP"):
        try:
            return float(int(x[:-5]))
        except ValueError:
            return None
    return None


def _est(doc: object) -> Estimate | None:
    if not isinstance(doc, Mapping):
        return None
    v, lo, hi = (_flop(doc.get(k)) for k in ("value", "low", "high"))
    if v is None or lo is None or hi is None:
        return None
    return Estimate(v, lo, hi)


def _num(v: object) -> float:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else 0.0


def rc_of_figures(
    run_id: str,
    status: str,
    started_at: object,
    figures: Mapping[str, Any],
    forecast_high: float | None = None,
    simulated: bool = False,
) -> RunCompute | None:
    """A run's compute from the figures its entry holds (None when they name no model)."""
    model = figures.get("model")
    if not isinstance(model, str) or not model:
        return None
    base = figures.get("base_model")
    flops_doc = figures.get("flops")
    flops = {}
    if isinstance(flops_doc, Mapping):
        for m, doc in flops_doc.items():
            e = _est(doc)
            if e is not None:
                flops[str(m)] = e
    devices = figures.get("devices") or []
    hardware: list[str] = []
    sim = SIMULATED if simulated else ""
    for d in devices if isinstance(devices, list) else []:
        if isinstance(d, Mapping):
            hardware.append(f"{d.get('count')}x {d.get('model')}{sim}")
        elif isinstance(d, str):  # the first format: "8x H100-SXM"
            hardware.append(d + sim)
    energy = figures.get("energy_kwh")
    return RunCompute(
        run_id=run_id,
        declaration=Declaration(
            model, base if isinstance(base, str) else None, str(figures.get("stage") or "pretrain")
        ),
        status=status,
        started_at=_num(started_at),
        duration_seconds=_num(figures.get("duration_seconds")),
        gpu_hours=_num(figures.get("gpu_hours")),
        energy_kwh=None if energy is None else _num(energy),
        flops=flops,
        forecast_high=forecast_high,
        hardware=tuple(hardware),
    )


def _figures(body: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """A run entry's figures: its ``figures`` (second format), or the first format's flat
    fields."""
    if "figures" in body:
        f = body["figures"]
        return f if isinstance(f, Mapping) else None
    return body if isinstance(body.get("model"), str) else None


def _time(text: object) -> float | None:
    if not isinstance(text, str):
        return None
    for fmt in ("%Y-%m-%dT%H:%M:%SZ", "%Y-%m-%dT%H:%M:%S.%fZ"):
        try:
            return dt.datetime.strptime(text, fmt).replace(tzinfo=dt.UTC).timestamp()
        except ValueError:
            continue
    return None


@dataclass(slots=True)
class Totals:
    """What some pruned training runs added up to: FLOP by method (as the tiers judge them, a
    counted figure above the hardware bound at the bound), GPU-hours, energy, seconds."""

    own: dict[str, Estimate] = field(default_factory=dict)
    gpu_hours: float = 0.0
    energy_kwh: float = 0.0
    training_seconds: float = 0.0
    implausible: tuple[Implausible, ...] = ()

    def plus(self, runs: Iterable[RunCompute]) -> Totals:
        """These totals with ``runs``' training compute added."""
        own = dict(self.own)
        implausible = list(self.implausible)
        gpu_hours, energy_kwh, seconds = self.gpu_hours, self.energy_kwh, self.training_seconds
        for r in runs:
            if not _trains(r):
                continue
            flops, odd = judged_flops(r)
            if odd is not None:
                implausible.append(odd)
            for k, e in flops.items():
                own[k] = own.get(k, ZERO) + e
            gpu_hours += r.gpu_hours
            energy_kwh += r.energy_kwh or 0.0
            seconds += r.duration_seconds
        return Totals(own, gpu_hours, energy_kwh, seconds, tuple(implausible))

    def to_json(self) -> dict[str, Any]:
        return {
            "own": {
                k: {"value": e.value, "low": e.low, "high": e.high}
                for k, e in sorted(self.own.items())
            },
            "gpu_hours": self.gpu_hours,
            "energy_kwh": self.energy_kwh,
            "training_seconds": self.training_seconds,
            "implausible": [
                [x.run_id, x.counted_flop, x.hardware_bound_flop] for x in self.implausible
            ],
        }

    @staticmethod
    def of_json(c: Mapping[str, Any]) -> Totals:
        own = {k: e for k, v in (c.get("own") or {}).items() if (e := _est(v)) is not None}
        odd = tuple(
            Implausible(str(x[0]), _num(x[1]), _num(x[2])) for x in c.get("implausible") or []
        )
        return Totals(
            own,
            _num(c.get("gpu_hours")),
            _num(c.get("energy_kwh")),
            _num(c.get("training_seconds")),
            odd,
        )


@dataclass(slots=True)
class Carried:
    """What pruned runs added up to, for one model (from a prune entry's ``governance``): the
    runs on real devices and, apart, those on simulated ones (counted only with
    ``count_simulated``, which may change after the prune). A snapshot written before the two
    were kept apart has everything in ``real``."""

    base_model: str | None
    runs: int
    real: Totals
    simulated_runs: int = 0
    simulated: Totals = field(default_factory=Totals)

    def to_json(self) -> dict[str, Any]:
        return {
            "simulated_runs": self.simulated_runs,
            "base_model": self.base_model,
            "runs": self.runs,
            **self.real.to_json(),
            "simulated": self.simulated.to_json(),
        }


@dataclass
class Replay:
    """The governance state after the entries fed so far (:meth:`feed`)."""

    runs: dict[str, tuple[str, RunCompute]] = field(default_factory=dict)
    """Finished runs: run id -> (team, compute)."""
    running: dict[str, dict[str, tuple[str, RunCompute]]] = field(default_factory=dict)
    """Model -> its running runs as last recorded."""
    forecasts: dict[str, float] = field(default_factory=dict)
    carried: dict[str, Carried] = field(default_factory=dict)
    tiers: tuple[Tier, ...] = DEFAULT_TIERS
    tiers_recorded: bool = False
    """Whether a ``governance-tiers`` entry was seen: from then on tier entries are required
    before obligations (logs written before tier entries existed are replayed leniently)."""
    states: dict[tuple[str, str], str] = field(default_factory=dict)
    """(model, tier) -> the state its last ``tier`` entry recorded."""
    obligations: dict[int, ObligationView] = field(default_factory=dict)
    problems: list[tuple[int, str]] = field(default_factory=list)
    size: int = 0
    """The seq of the last entry fed."""
    carried_loaded: bool = False
    first_seq: int = 1
    """Where the entries fed start (after a prune: its snapshot is loaded first)."""
    noticed: dict[tuple[str, str], float] = field(default_factory=dict)
    """(model, tier) -> when its last ``tier`` entry was written (its ``noticed_at``, else the
    entry's time)."""
    crossed: dict[tuple[str, str], float] = field(default_factory=dict)
    """(model, tier) -> when it was crossed, as a prune's snapshot carried it (the runs that
    tell are gone from the log), counting runs on real devices only."""
    crossed_with_simulated: dict[tuple[str, str], float] = field(default_factory=dict)
    """The same, counting runs on simulated devices too (with ``count_simulated``)."""
    count_simulated: bool = False
    """Whether runs on simulated devices count (the last ``governance-tiers`` entry's
    ``count_simulated``)."""
    owners: dict[str, str] = field(default_factory=dict)
    """A bare model name -> the team that first declared it in the log: what the name meant in
    entries written before models were ``team/name``."""

    def copy(self) -> Replay:
        """A copy to feed further without changing this one (its values are immutable)."""
        return Replay(
            dict(self.runs),
            {k: dict(v) for k, v in self.running.items()},
            dict(self.forecasts),
            dict(self.carried),
            self.tiers,
            self.tiers_recorded,
            dict(self.states),
            dict(self.obligations),
            list(self.problems),
            self.size,
            self.carried_loaded,
            self.first_seq,
            dict(self.noticed),
            dict(self.crossed),
            dict(self.crossed_with_simulated),
            self.count_simulated,
            dict(self.owners),
        )

    # -- feeding -------------------------------------------------------------------------------

    def feed_all(self, entries: Iterable[LogEntry]) -> Replay:
        for e in entries:
            self.feed(e)
        return self

    def feed(self, e: LogEntry) -> None:
        self.size = e.seq
        body, kind = e.body, e.kind
        try:
            if kind == RUN:
                self._run(body)
            elif kind == RUNNING:
                self._running(body)
            elif kind == TIERS:
                self.tiers = tiers_of_json(body.get("tiers"))
                self.tiers_recorded = True
                self.count_simulated = body.get("count_simulated") is True
            elif kind == TIER:
                self._tier(e.seq, body)
                when = _time(body.get("noticed_at")) or _time(e.time)
                if when is not None:
                    self.noticed[(self.name(str(body["model"])), str(body["tier"]))] = when
            elif kind == OPENED:
                self._opened(e.seq, body)
            elif kind == DONE:
                self._done(e.seq, body)
            elif kind == MERGED:
                o = self.obligations.get(_int(body.get("obligation")))
                if o is not None:
                    self.obligations[o.id] = replace(o, state="merged")
            elif kind == PRUNE and isinstance(body.get("governance"), Mapping):
                if not self.carried_loaded and body.get("first_seq") == self.first_seq > 1:
                    self.load_snapshot(body["governance"])
                self.carried_loaded = True
        except (GovernanceError, KeyError, TypeError, ValueError) as err:
            self.problems.append((e.seq, f"entry {e.seq} ({kind}) cannot be replayed: {err}"))

    def _run(self, body: Mapping[str, Any]) -> None:
        run_id = str(body.get("run_id"))
        figures = _figures(body)
        rc = (
            None
            if figures is None
            else rc_of_figures(
                run_id,
                str(body.get("status")),
                body.get("started_at"),
                figures,
                simulated=body.get("simulated") is True,
            )
        )
        for runs in self.running.values():
            runs.pop(run_id, None)
        if rc is None:
            self.runs.pop(run_id, None)
            return
        team = str(body.get("team"))
        self.runs[run_id] = (team, self._declared(team, rc))

    def name(self, model: str) -> str:
        """The model an entry's ``model`` names: ``team/name`` as written, or a bare name of an
        entry written before models were qualified (the team that first declared it)."""
        owner = None if MODEL_SEP in model else self.owners.get(model)
        return model if owner is None else f"{owner}{MODEL_SEP}{model}"

    def _declared(self, team: str, rc: RunCompute) -> RunCompute:
        """``rc`` with its model and base model qualified with its run's team."""
        d = rc.declaration
        if MODEL_SEP not in d.model:
            self.owners.setdefault(d.model, team)
        base = None if d.base_model is None else qualify(team, d.base_model)
        return replace(rc, declaration=replace(d, model=qualify(team, d.model), base_model=base))

    def _running(self, body: Mapping[str, Any]) -> None:
        said = str(body["model"])
        by_model: dict[str, dict[str, tuple[str, RunCompute]]] = {}
        for r in body.get("runs") or []:
            rc = rc_of_figures(
                str(r["run_id"]),
                "running",
                r.get("started_at"),
                r["figures"],
                _maybe(r.get("forecast_flop_high")),
                r.get("simulated") is True,
            )
            if rc is not None:
                team = str(r.get("team"))
                rc = self._declared(team, rc)
                by_model.setdefault(rc.declaration.model, {})[rc.run_id] = (team, rc)
        if MODEL_SEP in said:
            model = said
            self.running[model] = by_model.get(model, {})
        else:  # written before models were qualified: the runs of every team's model of the name
            model = self.name(said)
            for held in [m for m in self.running if bare_name(m) == said]:
                self.running[held] = {}
            self.running.update(by_model)
        forecast = body.get("forecast_additional_flop_high")
        if forecast is None:
            self.forecasts.pop(model, None)
        else:
            self.forecasts[model] = float(forecast)

    def _tier(self, seq: int, body: Mapping[str, Any]) -> None:
        model, tier, state = self.name(str(body["model"])), str(body["tier"]), str(body["state"])
        now = {s.tier.name: s for s in self.tier_states(model)}
        found = now.get(tier)
        if found is None or found.state != state:
            said = "no such tier" if found is None else f"{found.state}"
            self.problems.append(
                (
                    seq,
                    f"tier entry {seq} says {model} is {state} for {tier}, "
                    f"but the entries before it give {said}",
                )
            )
        self.states[(model, tier)] = state

    def _opened(self, seq: int, body: Mapping[str, Any]) -> None:
        oid = _int(body["obligation"])
        model, tier = self.name(str(body["model"])), str(body["tier"])
        opened, deadline = _time(body.get("opened_at")), _time(body.get("deadline"))
        crossed = _time(body.get("crossed_at"))
        if opened is None:
            if self.tiers_recorded:
                raise ValueError("no opened_at")
            opened = 0.0  # an entry of the first format without its time: kept, not dated
        if any(
            o.model == model and o.tier == tier and o.state == "open"
            for o in self.obligations.values()
        ):
            self.problems.append(
                (seq, f"obligation {oid} is a second open obligation for {model} and {tier}")
            )
        t = next((x for x in self.tiers if x.name == tier), None)
        if self.tiers_recorded:
            if self.states.get((model, tier)) not in JUDGED:
                self.problems.append(
                    (
                        seq,
                        f"obligation {oid} ({model}, {tier}) was opened "
                        "without a recorded crossing of its tier",
                    )
                )
            if t is None or t.deadline_days is None:
                self.problems.append((seq, f"obligation {oid}: tier {tier} opens none"))
            elif crossed is not None and crossed > opened:
                self.problems.append(
                    (seq, f"obligation {oid} says its tier was crossed after it was opened")
                )
            elif (
                deadline is None
                or abs(
                    deadline - ((opened if crossed is None else crossed) + t.deadline_days * 86_400)
                )
                > 1
            ):
                since = "it opened" if crossed is None else "the crossing"
                self.problems.append(
                    (
                        seq,
                        f"obligation {oid}'s deadline is not {t.deadline_days} "
                        f"days after {since}, as {tier} says",
                    )
                )
        self.obligations[oid] = ObligationView(
            oid,
            model,
            tier,
            str(body.get("trigger")),
            str(body.get("rule") or (t.rule if t else "")),
            _maybe(body.get("judged_flop")),
            _str(body.get("method")),
            _num(body.get("threshold")),
            opened,
            deadline,
            "open",
            None,
            None,
            crossed,
        )

    def _done(self, seq: int, body: Mapping[str, Any]) -> None:
        oid = _int(body["obligation"])
        o = self.obligations.get(oid)
        if o is None or o.state != "open":
            self.problems.append((seq, f"obligation {oid} was marked done but was not open"))
            if o is None:
                return
        done_at = _time(body.get("done_at")) or _time(body.get("opened_at"))
        self.obligations[oid] = replace(
            o, state="done", done_at=done_at, reference=_str(body.get("reference"))
        )

    def _carry(self, doc: Mapping[str, Any]) -> None:
        for model, c in (doc.get("models") or {}).items():
            sim = c.get("simulated")
            base = _str(c.get("base_model"))
            self.carried[self.name(str(model))] = Carried(
                None if base is None else self.name(base),
                int(c.get("runs") or 0),
                Totals.of_json(c),
                int(c.get("simulated_runs") or 0),
                Totals.of_json(sim) if isinstance(sim, Mapping) else Totals(),
            )

    # -- state -----------------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """The state after the entries fed so far, for a prune entry's ``governance``: finished
        runs summed per model, the running runs and forecasts, the tiers in force, the tier
        states and every obligation. A replay of the kept entries starts from it
        (:meth:`load_snapshot`)."""
        models = self.models()
        out: dict[str, Any] = {}
        for name, m in models.items():
            c = self.carried.get(name)
            finished = [r for r in m.runs if r.run_id in self.runs]
            real = [r for r in finished if not r.simulated]
            sim = [r for r in finished if r.simulated]
            out[name] = Carried(
                m.base_model,
                len(finished) + (c.runs if c else 0),
                (c.real if c else Totals()).plus(real),
                len(sim) + (c.simulated_runs if c else 0),
                (c.simulated if c else Totals()).plus(sim),
            ).to_json()
        return {
            "models": out,
            "running": {
                m: [running_json(t, rc) for t, rc in runs.values()]
                for m, runs in sorted(self.running.items())
            },
            "forecasts": dict(sorted(self.forecasts.items())),
            "tiers": [tier_json(t) for t in self.tiers] if self.tiers_recorded else None,
            "count_simulated": self.count_simulated,
            "states": [[m, t, st] for (m, t), st in sorted(self.states.items())],
            "noticed": [[m, t, when] for (m, t), when in sorted(self.noticed.items())],
            "crossed": self._crossings(count_simulated=False),
            "crossed_with_simulated": self._crossings(count_simulated=True),
            "obligations": [_obligation_json(o) for _, o in sorted(self.obligations.items())],
            "owners": dict(sorted(self.owners.items())),
        }

    def load_snapshot(self, doc: Mapping[str, Any]) -> None:
        """Start from a prune entry's ``governance`` (what the pruned entries added up to)."""
        for bare, team in (doc.get("owners") or {}).items():
            self.owners[str(bare)] = str(team)
        for model, runs in (doc.get("running") or {}).items():
            self._running({"model": model, "runs": runs, "forecast_additional_flop_high": None})
        self._carry(doc)
        for model, f in (doc.get("forecasts") or {}).items():
            self.forecasts[self.name(str(model))] = float(f)
        if doc.get("tiers") is not None:
            self.tiers, self.tiers_recorded = tiers_of_json(doc["tiers"]), True
        self.count_simulated = doc.get("count_simulated") is True
        for m, t, st in doc.get("states") or []:
            self.states[(self.name(str(m)), str(t))] = str(st)
        for o in doc.get("obligations") or []:
            view = ObligationView(
                int(o["id"]),
                self.name(str(o["model"])),
                str(o["tier"]),
                str(o["trigger"]),
                str(o.get("rule") or ""),
                _maybe(o.get("judged_flop")),
                _str(o.get("method")),
                _num(o.get("threshold")),
                _time(o.get("opened_at")) or 0.0,
                _time(o.get("deadline")),
                str(o["state"]),
                _time(o.get("done_at")),
                _str(o.get("reference")),
                _time(o.get("crossed_at")),
            )
            self.obligations[view.id] = view
        for m, t, when in doc.get("noticed") or []:
            self.noticed[(self.name(str(m)), str(t))] = float(when)
        for m, t, when in doc.get("crossed") or []:
            self.crossed[(self.name(str(m)), str(t))] = float(when)
        with_simulated = doc.get("crossed_with_simulated")
        for m, t, when in (doc.get("crossed") if with_simulated is None else with_simulated) or []:
            self.crossed_with_simulated[(self.name(str(m)), str(t))] = float(when)

    def models(self, teams: frozenset[str] | None = None) -> dict[str, ModelCompute]:
        """Every model's compute (a team sees its own runs only, without forecasts or pruned
        totals)."""
        runs = [rc for team, rc in self.runs.values() if teams is None or team in teams]
        for by_model in self.running.values():
            runs.extend(rc for team, rc in by_model.values() if teams is None or team in teams)
        return self._models(runs, teams, self.count_simulated)

    def _models(
        self, runs: list[RunCompute], teams: frozenset[str] | None, count_simulated: bool
    ) -> dict[str, ModelCompute]:
        carried = self.carried if teams is None else {}
        return _per_model(runs, carried, self.forecasts if teams is None else {}, count_simulated)

    def _crossings(self, *, count_simulated: bool) -> list[list[Any]]:
        """When each crossed tier was crossed, with runs on simulated devices counted or not
        (a prune's snapshot carries both: the setting may change after it)."""
        runs = [rc for _, rc in self.runs.values()]
        for by_model in self.running.values():
            runs.extend(rc for _, rc in by_model.values())
        models = self._models(runs, None, count_simulated)
        return [
            [name, s.tier.name, s.crossed_at]
            for name in sorted(models)
            for s in self._tier_states(name, models, count_simulated)
            if s.crossed_at is not None
        ]

    def tier_states(self, model: str) -> list[TierStatus]:
        return self._tier_states(model, self.models(), self.count_simulated)

    def _tier_states(
        self, model: str, models: Mapping[str, ModelCompute], count_simulated: bool
    ) -> list[TierStatus]:
        """Each tier's state; a crossing the runs no longer date (pruned) keeps the time a
        prune's snapshot carried."""
        m = models.get(model)
        if m is None:
            return []
        crossed = self.crossed_with_simulated if count_simulated else self.crossed
        return [
            replace(s, crossed_at=crossed.get((model, s.tier.name)))
            if s.state == "crossed" and s.crossed_at is None
            else s
            for s in model_status(m, models, self.tiers)
        ]

    def statuses(self, teams: frozenset[str] | None = None) -> list[ModelStatus]:
        """Every model's status; a team's view (``teams``) counts its runs only and says what
        it cannot see (:attr:`ModelStatus.hidden_runs`)."""
        models = self.models(teams)
        hidden = {} if teams is None else self._hidden(teams)
        out = []
        for name in sorted(models):
            m = models[name]
            obligations = sorted(
                (o for o in self.obligations.values() if o.model == name and o.state != "merged"),
                key=lambda o: (o.tier, o.id),
            )
            c = None if teams is not None else self.carried.get(name)
            noticed = {t: when for (mn, t), when in self.noticed.items() if mn == name}
            st = ModelStatus(
                m,
                self._tier_states(name, models, self.count_simulated)
                if teams is None
                else model_status(m, models, self.tiers),
                obligations,
                c.runs if c else 0,
                noticed,
            )
            if teams is not None:
                st.hidden_runs = hidden.get(name, 0)
                st.hidden_base = m.base_model is not None and m.base_model not in models
                st.hidden_base = st.hidden_base and m.base_model in hidden
            out.append(st)
        return out

    def _hidden(self, teams: frozenset[str]) -> dict[str, int]:
        """Per model, the runs ``teams`` cannot see: other teams' and pruned ones."""
        out: dict[str, int] = {name: c.runs for name, c in self.carried.items() if c.runs}
        every = list(self.runs.values())
        for by_model in self.running.values():
            every.extend(by_model.values())
        for team, rc in every:
            if team not in teams:
                out[rc.declaration.model] = out.get(rc.declaration.model, 0) + 1
        return out


def running_json(team: str, rc: RunCompute) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "run_id": rc.run_id,
        "team": team,
        "started_at": rc.started_at,
        "figures": figures_json(rc),
    }
    if rc.simulated:
        doc["simulated"] = True
    return doc


def figures_json(rc: RunCompute) -> dict[str, Any]:
    """A run's figures as entries hold them (as computewatch.upload.signing.figures_of)."""
    d = rc.declaration
    return {
        "model": d.model,
        "base_model": d.base_model,
        "stage": d.stage,
        "flops": {
            m: {"value": e.value, "low": e.low, "high": e.high} for m, e in sorted(rc.flops.items())
        },
        "gpu_hours": rc.gpu_hours,
        "energy_kwh": rc.energy_kwh,
        "duration_seconds": rc.duration_seconds,
        "devices": devices_json(rc.hardware),
    }


def _obligation_json(o: ObligationView) -> dict[str, Any]:
    return {
        "id": o.id,
        "model": o.model,
        "tier": o.tier,
        "trigger": o.trigger,
        "rule": o.rule,
        "judged_flop": o.judged_flop,
        "method": o.method,
        "threshold": o.threshold,
        "opened_at": iso(o.opened_at),
        "crossed_at": iso(o.crossed_at),
        "deadline": iso(o.deadline_at),
        "state": o.state,
        "done_at": iso(o.done_at),
        "reference": o.reference,
    }


def iso(t: float | None) -> str | None:
    return (
        None if t is None else dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    )


def _maybe(v: object) -> float | None:
    return None if v is None else _num(v)


def _str(v: object) -> str | None:
    return v if isinstance(v, str) else None


def _int(v: object) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError(f"not an obligation number: {v!r}")
    return v


def _trains(r: RunCompute) -> bool:
    return r.declaration.stage in TRAINING_STAGES


def _sum(a: Totals, b: Totals) -> Totals:
    own = dict(a.own)
    for k, e in b.own.items():
        own[k] = own.get(k, ZERO) + e
    return Totals(
        own,
        a.gpu_hours + b.gpu_hours,
        a.energy_kwh + b.energy_kwh,
        a.training_seconds + b.training_seconds,
        a.implausible + b.implausible,
    )


def _per_model(
    runs: Iterable[RunCompute],
    carried: Mapping[str, Carried],
    forecasts: Mapping[str, float],
    count_simulated: bool = False,
) -> dict[str, ModelCompute]:
    """As computewatch.lineage.compute.per_model, with the totals of pruned runs and the
    recorded forecasts."""
    models: dict[str, ModelCompute] = {}
    for name, c in carried.items():
        m = models[name] = ModelCompute(name, c.base_model)
        t = c.real.plus(()) if not count_simulated else _sum(c.real, c.simulated)
        m.own, m.implausible = t.own, list(t.implausible)
        m.gpu_hours, m.energy_kwh, m.training_seconds = (
            t.gpu_hours,
            t.energy_kwh,
            t.training_seconds,
        )
        m.simulated_runs = c.simulated_runs
        if c.simulated_runs:
            m.simulated_counted = count_simulated
    for r in runs:
        d = r.declaration
        held = models.get(d.model)
        if held is None:
            m = models[d.model] = ModelCompute(d.model, d.base_model)
        else:
            m = held
            if m.base_model is None and d.base_model is not None:
                m.base_model = d.base_model
        m.add(r, count_simulated)
    for name, f in forecasts.items():
        if name in models:
            models[name].forecast_high = f
    for name in models:
        _cumulate(name, models, ())
    return models


def _cumulate(
    name: str, models: dict[str, ModelCompute], path: tuple[str, ...]
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
