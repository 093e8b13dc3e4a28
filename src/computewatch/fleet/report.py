"""Fleet reports: GPU-hours, utilization, idle time, energy, cost and carbon per group.

The figures come from Prometheus (the agents' exported counters, docs/fleet.md), evaluated with
PromQL at the end of the window: ``increase(counter[window])`` per job and node, summed into
groups here. Grouping by GPU model joins each node to the models of the GPUs it reported.
Cost prices GPU-hours; carbon multiplies the jobs' energy by the PUE and the grid intensity of
the fleet's region; both say how they were obtained, as the run accounting does
(docs/methodology.md).
"""

from __future__ import annotations

import dataclasses
import math
import os
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from computewatch.accounting.engine import GRID_UNCERTAINTY, J_PER_KWH, resolve_pue
from computewatch.accounting.region import REGION_VARIABLE, Location, RegionError, resolve_location
from computewatch.analysis.summary import iso
from computewatch.catalog import Accelerator, find_by_nvml_name, load_accelerators, reference
from computewatch.config import Config
from computewatch.errors import ComputewatchError
from computewatch.fleet.promql import PrometheusClient, PromQLError, format_duration
from computewatch.metrics.model import GROUPINGS
from computewatch.records import MEASURED, MODELED, POLLED, figure

__all__ = [
    "GROUPINGS",
    "NO_TEAM",
    "FleetError",
    "FleetOptions",
    "GpuHourRate",
    "fleet_charts",
    "fleet_report",
    "gpu_hour_rate",
]

"""What ``--by`` accepts."""

NO_TEAM = "(no team)"
"""How a job whose ``team`` label is empty is shown."""

IDLE_BELOW = 0.05  # the agent counts held GPU time below this utilization as idle (contract)

# The contract's per-job counters (docs/fleet.md). Summed by these labels: ``exported_job``
# is where Prometheus puts the agent's ``job`` label when the scrape is not ``honor_labels``.
HELD = "computewatch_job_gpu_seconds_total"
BUSY = "computewatch_job_gpu_busy_seconds_total"
IDLE = "computewatch_job_gpu_idle_seconds_total"
ENERGY = "computewatch_job_energy_joules_total"
GPU_GAUGE = "computewatch_gpu_utilization_ratio"
_JOB_LABELS = "job, exported_job, user, team, node"
_SERIES_BY = {"job": "job, exported_job", "user": "user", "team": "team", "gpu-model": "node"}


class FleetError(ComputewatchError):
    """The report cannot be made (no data, a bad option); the message is for the user."""


@dataclasses.dataclass(frozen=True, slots=True)
class FleetOptions:
    """What the report covers and the context its cost and carbon need (flags win over the
    configuration)."""

    start: float  # Unix seconds
    end: float
    by: str = "team"
    gpu_hour_usd: float | None = None
    instance_type: str | None = None
    region: str | None = None
    pue: float | None = None
    config: Config = dataclasses.field(default_factory=Config)
    environ: Mapping[str, str] = dataclasses.field(default_factory=lambda: dict(os.environ))

    @property
    def seconds(self) -> float:
        return self.end - self.start


@dataclasses.dataclass(frozen=True, slots=True)
class GpuHourRate:
    """The price of one GPU-hour of a model, with its range and how it was found."""

    usd: float
    low: float
    high: float
    method: str
    source: str


@dataclasses.dataclass(slots=True)
class _Usage:
    """Sums over the jobs of one group (seconds and joules)."""

    held: float = 0.0
    busy: float = 0.0
    idle: float = 0.0
    energy: float = 0.0
    held_by_model: dict[str, float] = dataclasses.field(default_factory=dict)
    jobs: set[str] = dataclasses.field(default_factory=set)
    nodes: set[str] = dataclasses.field(default_factory=set)
    simulated: bool = False

    def add(self, other: _Usage, share: float = 1.0) -> None:
        self.held += other.held * share
        self.busy += other.busy * share
        self.idle += other.idle * share
        self.energy += other.energy * share
        for m, s in other.held_by_model.items():
            self.held_by_model[m] = self.held_by_model.get(m, 0.0) + s * share
        self.jobs |= other.jobs
        self.nodes |= other.nodes
        self.simulated = self.simulated or other.simulated


def job_name(labels: Mapping[str, str]) -> str:
    """The agent's job label, wherever the scrape left it."""
    return labels.get("exported_job") or labels.get("job") or ""


def _model_label(model: str, simulated: bool) -> str:
    return f"{model} (simulated)" if simulated else model


def _node_models(
    client: PrometheusClient, opts: FleetOptions, rng: str, queries: list[str]
) -> dict[str, dict[str, int]]:
    """node → {GPU model label → number of GPUs} as the node reported them in the window."""
    q = (
        "count by (node, gpu_model, simulated) (count by (gpu, node, gpu_model, simulated) "
        f"(last_over_time({GPU_GAUGE}[{rng}])))"
    )
    queries.append(q)
    out: dict[str, dict[str, int]] = {}
    for s in client.instant(q, opts.end):
        model = s.labels.get("gpu_model") or "unknown model"
        label = _model_label(model, s.labels.get("simulated") == "true")
        node = out.setdefault(s.labels.get("node", ""), {})
        node[label] = node.get(label, 0) + int(s.value)
    return out


def _job_rows(
    client: PrometheusClient, opts: FleetOptions, rng: str, queries: list[str]
) -> dict[tuple[str, str, str, str], _Usage]:
    """(job, user, team, node) → its usage in the window, from the four job counters."""
    rows: dict[tuple[str, str, str, str], _Usage] = {}
    for attr, metric in (("held", HELD), ("busy", BUSY), ("idle", IDLE), ("energy", ENERGY)):
        q = f"sum by ({_JOB_LABELS}) (increase({metric}[{rng}]))"
        queries.append(q)
        for s in client.instant(q, opts.end):
            if not math.isfinite(s.value):
                continue
            lb = s.labels
            key = (job_name(lb), lb.get("user", ""), lb.get("team", ""), lb.get("node", ""))
            row = rows.setdefault(key, _Usage())
            setattr(row, attr, getattr(row, attr) + max(s.value, 0.0))
    return rows


def _group_keys(by: str, job: str, user: str, team: str) -> str:
    return {"job": job, "user": user, "team": team}[by]


def _split_by_model(
    row: _Usage, node: str, models: Mapping[str, Mapping[str, int]], notes: set[str]
) -> list[tuple[str, float]]:
    """The row's (model, share) on its node: GPU-hours of a node with several models are
    split by the number of GPUs of each (the per-job counters carry no model)."""
    found = models.get(node)
    if not found:
        if row.held > 0:
            notes.add(
                f"node {node or '(no node label)'} reported no GPUs in the window: its jobs' "
                "GPU time is shown under 'unknown model' and has no catalog price"
            )
        return [("unknown model", 1.0)]
    total = sum(found.values())
    if len(found) > 1 and row.held > 0:
        notes.add(
            f"node {node} has GPUs of several models ({', '.join(sorted(found))}): its jobs' "
            "GPU time is split between them by GPU count"
        )
    return [(m, n / total) for m, n in sorted(found.items())]


def _collect(
    client: PrometheusClient, opts: FleetOptions
) -> tuple[dict[str, _Usage], dict[str, dict[str, int]], list[str], set[str]]:
    rng = format_duration(opts.seconds)
    queries: list[str] = []
    rows = _job_rows(client, opts, rng, queries)
    models = _node_models(client, opts, rng, queries)
    if not rows:
        gpus = sum(sum(m.values()) for m in models.values())
        seen = (
            f"; it has {gpus} GPU(s) reporting, but no job counters: is the agent attributing "
            "GPU use to jobs?"
            if gpus
            else ": is it scraping computewatch agents, and is the window right?"
        )
        raise FleetError(
            f"Prometheus at {client.url} has no computewatch job data ({HELD}) between "
            f"{iso(opts.start)} and {iso(opts.end)}{seen}"
        )
    notes: set[str] = set()
    groups: dict[str, _Usage] = {}
    for (job, user, team, node), row in rows.items():
        split = _split_by_model(row, node, models, notes)
        row.jobs.add(job)
        if node:
            row.nodes.add(node)
        row.simulated = any(m.endswith("(simulated)") for m, _ in split)
        for model, share in split:
            row.held_by_model[model] = row.held_by_model.get(model, 0.0) + row.held * share
        if opts.by == "gpu-model":
            for model, share in split:
                part = _Usage(
                    held=row.held * share,
                    busy=row.busy * share,
                    idle=row.idle * share,
                    energy=row.energy * share,
                    held_by_model={model: row.held * share},
                    jobs=set(row.jobs),
                    nodes=set(row.nodes),
                    simulated=model.endswith("(simulated)"),
                )
                groups.setdefault(model, _Usage()).add(part)
        else:
            groups.setdefault(_group_keys(opts.by, job, user, team), _Usage()).add(row)
    return groups, models, queries, notes


# -- prices -----------------------------------------------------------------------------------


def _accelerator(model: str) -> Accelerator | None:
    name = model.removesuffix(" (simulated)")
    found = find_by_nvml_name(name)
    if found is not None:
        return found
    catalog = load_accelerators()
    if name in catalog:
        return catalog[name]
    words = set(name.replace("-", " ").upper().split())
    hits = [a for key, a in catalog.items() if key.upper() in words]  # "AMD Instinct MI300X"
    if not hits:  # "Google TPU v5e": every part of the key "TPU-v5e" is a word of the name
        hits = [a for key, a in catalog.items() if set(key.upper().split("-")) <= words]
    return hits[0] if len(hits) == 1 else None


def gpu_hour_rate(model: str, opts: FleetOptions) -> GpuHourRate | None:
    """The price of a GPU-hour of ``model`` (the ``gpu_model`` label): ``--gpu-hour-usd``,
    else the configured ``usd_per_gpu_hour``, else an instance type's price per GPU, else the
    median catalog price of instances with that GPU. None when nothing prices it."""
    cfg = opts.config
    if opts.gpu_hour_usd is not None:
        v = opts.gpu_hour_usd
        return GpuHourRate(v, v, v, f"${v:g}/GPU-hour (--gpu-hour-usd)", "--gpu-hour-usd")
    if cfg.usd_per_gpu_hour is not None:
        v = cfg.usd_per_gpu_hour
        src = f"configuration {cfg.path}" if cfg.path else "configuration"
        return GpuHourRate(v, v, v, f"${v:g}/GPU-hour ({src})", src)
    off = 1.0 - cfg.discount
    discount = f", less a {cfg.discount:.0%} discount (configured)" if cfg.discount else ""
    key = opts.instance_type or cfg.instance_type
    if key:
        how = "--instance-type" if opts.instance_type else "configuration"
        provider, _, name = key.partition(":")
        inst = reference.find_instance(provider, name, cfg.extra_instances) if name else None
        if inst is None:
            raise FleetError(
                f"instance type {key!r} (from {how}) is not in the price catalog; use "
                "provider:instance as in data/cloud_instances.csv, or --gpu-hour-usd"
            )
        v = inst.usd_per_gpu_hour * off
        return GpuHourRate(
            v,
            v,
            v,
            f"{inst.key} on demand ${inst.usd_per_hour:g}/h / {inst.gpus} GPUs "
            f"({inst.price_region}, {inst.as_of}, from {how}){discount}",
            inst.source,
        )
    acc = _accelerator(model)
    if acc is None:
        return None
    table = dict(reference.instances())
    table.update(cfg.extra_instances)
    rows = sorted(
        (i for i in table.values() if i.gpu_model == acc.model), key=lambda i: i.usd_per_gpu_hour
    )
    if not rows:
        return None
    rates = [i.usd_per_gpu_hour for i in rows]
    listed = ", ".join(f"{i.key} ${i.usd_per_gpu_hour:.2f} ({i.as_of})" for i in rows)
    return GpuHourRate(
        statistics.median(rates) * off,
        rates[0] * off,
        rates[-1] * off,
        f"catalog: median on-demand price per GPU of the {len(rows)} instance type(s) with "
        f"{acc.model}, range from the cheapest to the dearest ({listed}){discount}",
        "; ".join(sorted({i.source for i in rows})),
    )


# -- carbon context ---------------------------------------------------------------------------


def _location(opts: FleetOptions) -> Location:
    """The fleet's region: ``--region``, the configuration, or ``COMPUTEWATCH_REGION``. The
    reporting machine's own cloud variables and DMI say nothing of the fleet, so are not read."""
    own = {k: v for k, v in opts.environ.items() if k == REGION_VARIABLE}
    try:
        return resolve_location(
            opts.region, config_region=opts.config.region, environ=own, dmi_root=os.devnull
        )
    except RegionError as e:
        raise FleetError(f"--region: {e}" if opts.region else str(e)) from None


# -- the report -------------------------------------------------------------------------------


def _label(by: str, key: str) -> str:
    if by == "team" and not key:
        return NO_TEAM
    return key or "(none)"


def _group_json(
    key: str,
    label: str,
    u: _Usage,
    rate_of: Callable[[str], GpuHourRate | None],
    pue: tuple[float, float, float, str],
    g_per_kwh: float,
    rel: float,
) -> dict[str, Any]:
    hours = u.held / 3600
    util = u.busy / u.held if u.held > 0 else None
    kwh = u.energy / J_PER_KWH
    usd = lo = hi = 0.0
    unpriced: list[str] = []
    for model, secs in sorted(u.held_by_model.items()):
        if secs <= 0:
            continue
        r = rate_of(model)
        if r is None:
            unpriced.append(f"{secs / 3600:.4g} GPU-hours on {model} (no price known)")
            continue
        h = secs / 3600
        usd, lo, hi = usd + h * r.usd, lo + h * r.low, hi + h * r.high
    cost_notes = [f"excludes {x}" for x in unpriced]
    priced = any(rate_of(m) is not None for m, s in u.held_by_model.items() if s > 0)
    pv, plo, phi, _ = pue
    return {
        "group": key,
        "label": label,
        "simulated": u.simulated,
        "jobs": len(u.jobs),
        "nodes": sorted(u.nodes),
        "gpu_hours": figure(hours, "GPU-hours", MEASURED),
        "gpu_hours_by_model": {m: round(s / 3600, 6) for m, s in sorted(u.held_by_model.items())},
        "idle_gpu_hours": figure(u.idle / 3600, "GPU-hours", POLLED),
        "idle_share": None if u.held <= 0 else round(u.idle / u.held, 6),
        "utilization_mean": figure(util, "ratio", POLLED),
        "energy_kwh": figure(kwh, "kWh", MODELED),
        "energy_facility_kwh": figure(kwh * pv, "kWh", MODELED, low=kwh * plo, high=kwh * phi),
        "cost_usd": figure(
            usd if priced or u.held <= 0 else None,
            "USD",
            MODELED,
            low=lo,
            high=hi,
            assumptions=cost_notes,
        ),
        "carbon_gco2e": figure(
            kwh * pv * g_per_kwh,
            "gCO2e",
            MODELED,
            low=kwh * plo * g_per_kwh * (1 - rel),
            high=kwh * phi * g_per_kwh * (1 + rel),
        ),
    }


def fleet_report(client: PrometheusClient, opts: FleetOptions) -> dict[str, Any]:
    """The whole report as a JSON-ready dict: one entry per group (largest GPU-hours first),
    the total, how each figure was obtained, the PromQL used, and notes."""
    if opts.by not in GROUPINGS:
        raise FleetError(f"--by must be one of {', '.join(GROUPINGS)}, not {opts.by!r}")
    if not opts.end > opts.start:
        raise FleetError(
            f"the window is empty: it starts at {iso(opts.start)} and ends at {iso(opts.end)}"
        )
    location = _location(opts)
    pue = resolve_pue(opts.pue, opts.config, location)
    try:
        groups, models, queries, notes = _collect(client, opts)
    except PromQLError as e:
        raise FleetError(str(e)) from None
    row = location.row
    rel = location.relative_uncertainty or GRID_UNCERTAINTY
    rates: dict[str, GpuHourRate | None] = {}

    def rate_of(model: str) -> GpuHourRate | None:
        if model not in rates:
            rates[model] = gpu_hour_rate(model, opts)
        return rates[model]

    total = _Usage()
    out_groups = []
    for key, u in sorted(groups.items(), key=lambda kv: (-kv[1].held, kv[0])):
        total.add(u)
        label = key if opts.by == "gpu-model" else _label(opts.by, key)
        out_groups.append(_group_json(key, label, u, rate_of, pue, row.g_per_kwh, rel))
    total_json = _group_json("", "total", total, rate_of, pue, row.g_per_kwh, rel)
    if any(r is None for m, r in rates.items() if total.held_by_model.get(m, 0) > 0):
        notes.add(
            "some GPU time has no price: set --gpu-hour-usd, [cost] usd_per_gpu_hour or "
            "instance_type in the configuration, or --instance-type"
        )
    if location.note:
        notes.add(location.note)
    if total.simulated:
        notes.add('some GPUs are simulated (label simulated="true"): their figures are not real')
    gpus = [
        {"node": node, "gpu_model": m, "count": n}
        for node, ms in sorted(models.items())
        for m, n in sorted(ms.items())
    ]
    rng = format_duration(opts.seconds)
    return {
        "prometheus": client.url,
        "by": opts.by,
        "window": {
            "start": iso(opts.start),
            "end": iso(opts.end),
            "start_unix": opts.start,
            "end_unix": opts.end,
            "seconds": opts.seconds,
        },
        "groups": out_groups,
        "total": total_json,
        "fleet": {"gpus": gpus, "gpu_count": sum(g["count"] for g in gpus)},
        "prices": {
            m: None if r is None else dataclasses.asdict(r) for m, r in sorted(rates.items())
        },
        "carbon": {
            "intensity": {
                "g_per_kwh": row.g_per_kwh,
                "region": location.code,
                "name": row.name,
                "how": location.how,
                "method": MODELED,
                "relative_uncertainty": rel,
                "source": f"{row.source} ({row.year})",
            },
            "pue": {"value": pue[0], "low": pue[1], "high": pue[2], "source": pue[3]},
        },
        "methods": {
            "gpu_hours": (
                f"measured: PromQL increase({HELD}[{rng}]) at the window's end, summed per "
                "group; the agent counts each GPU a job's processes hold as 1 GPU-second per "
                "second. increase() extrapolates to the window's edges (by at most half a "
                "scrape interval per series)"
            ),
            "utilization_mean": (
                f"polled: increase({BUSY}) / increase({HELD}): the mean utilization of the "
                "GPUs while held, weighted by held time"
            ),
            "idle_gpu_hours": (
                f"polled: increase({IDLE}[{rng}]): held GPU time at utilization below "
                f"{IDLE_BELOW:g}"
            ),
            "energy_kwh": (
                f"modeled: increase({ENERGY}[{rng}]): the agent attributes each GPU's energy "
                "to its jobs by their share of it and the node's CPU energy by CPU time "
                "(RAPL when readable, else the TDP model); IT energy, before PUE"
            ),
            "energy_facility_kwh": f"modeled: energy x PUE {pue[0]:g} ({pue[3]})",
            "cost_usd": (
                "modeled: GPU-hours x the price of a GPU-hour of each GPU model (see prices); "
                "GPU time only (no CPU-only jobs, storage, network or electricity)"
            ),
            "carbon_gco2e": (
                f"modeled: facility energy x {row.g_per_kwh:g} gCO2e/kWh ({row.name}, "
                f"{location.code}, found by {location.how}; annual average, +/-{rel:.0%})"
            ),
        },
        "queries": queries,
        "notes": sorted(notes),
    }


# -- over time, for the HTML report ------------------------------------------------------------


def chart_step(seconds: float, points: int = 240) -> tuple[float, float]:
    """(step, rate window) of the charts: about ``points`` points over the window, each a rate
    over at least two minutes (a rate needs two scrapes in its window)."""
    step = max(1.0, math.ceil(seconds / points))
    return step, max(2 * step, 120.0)


def _fold(
    series: Iterable[Any], by: str, models: Mapping[str, Mapping[str, int]], grid: Sequence[float]
) -> dict[str, list[float]]:
    """Range-query series summed into groups on the chart grid (missing points count 0)."""
    pos = {t: i for i, t in enumerate(grid)}
    out: dict[str, list[float]] = {}
    for s in series:
        lb = s.labels
        if by == "gpu-model":
            found = models.get(lb.get("node", ""), {})
            total = sum(found.values())
            split = [(m, n / total) for m, n in found.items()] or [("unknown model", 1.0)]
        else:
            key = job_name(lb) if by == "job" else lb.get(by, "")
            split = [(key, 1.0)]
        for key, share in split:
            acc = out.setdefault(key, [0.0] * len(grid))
            for t, v in s.points:
                i = pos.get(round(t, 3))
                if i is not None and math.isfinite(v):
                    acc[i] += v * share
    return out


def fleet_charts(
    client: PrometheusClient, opts: FleetOptions, report: Mapping[str, Any], *, top: int = 8
) -> dict[str, Any]:
    """The report's charts over time: GPUs held and their mean utilization per group (the
    ``top`` groups by GPU-hours; the rest as "other"), and the whole fleet's GPUs."""
    step, window = chart_step(opts.seconds)
    w = format_duration(window)
    start = opts.start + step
    n = int((opts.end - start) // step) + 1
    grid = [round(start + i * step, 3) for i in range(n)]
    by = opts.by
    models: dict[str, dict[str, int]] = {}
    for g in report["fleet"]["gpus"]:
        models.setdefault(g["node"], {})[g["gpu_model"]] = g["count"]
    try:
        held = _fold(
            client.range(f"sum by ({_SERIES_BY[by]}) (rate({HELD}[{w}]))", start, opts.end, step),
            by,
            models,
            grid,
        )
        busy = _fold(
            client.range(f"sum by ({_SERIES_BY[by]}) (rate({BUSY}[{w}]))", start, opts.end, step),
            by,
            models,
            grid,
        )
        gpus = client.range(f"count({GPU_GAUGE})", start, opts.end, step)
        allocated = client.range("sum(computewatch_gpu_allocated)", start, opts.end, step)
        fleet_util = client.range(f"avg({GPU_GAUGE})", start, opts.end, step)
    except PromQLError as e:
        raise FleetError(str(e)) from None
    order = [g["group"] for g in report["groups"]]
    keep = order[:top] if len(order) > top + 1 else order
    labels = {g["group"]: g["label"] for g in report["groups"]}

    def merged(src: dict[str, list[float]]) -> dict[str, list[float]]:
        out = {k: src.get(k, [0.0] * n) for k in keep}
        rest = [v for k, v in src.items() if k not in keep]
        if rest:
            out["other"] = [sum(col) for col in zip(*rest, strict=True)]
        return out

    h, b = merged(held), merged(busy)
    util_series = []
    held_series = []
    for key in h:
        label = "other" if key == "other" and key not in labels else labels.get(key, key)
        held_series.append({"label": label, "mean": [_r(v) for v in h[key]]})
        util_series.append(
            {
                "label": label,
                "mean": [
                    _r(bv / hv) if hv > 1e-9 else None
                    for bv, hv in zip(b[key], h[key], strict=True)
                ],
            }
        )

    def line(result: list[Any], label: str) -> dict[str, Any]:
        vals: list[float | None] = [None] * n
        pos = {t: i for i, t in enumerate(grid)}
        for s in result:
            for t, v in s.points:
                i = pos.get(round(t, 3))
                if i is not None and math.isfinite(v):
                    vals[i] = _r(v)
        return {"label": label, "mean": vals}

    what = {"job": "job", "user": "user", "team": "team", "gpu-model": "GPU model"}[by]
    sub = f"rate over {w}, every {step:g} s"
    charts: list[dict[str, Any]] = [
        {
            "id": "fleet_util",
            "title": f"GPU utilization by {what}",
            "subtitle": f"mean utilization of the GPUs each {what} held · {sub}",
            "unit": "ratio",
            "grid": "fleet",
            "per_bucket": 1,
            "series": util_series,
        },
        {
            "id": "fleet_held",
            "title": f"GPUs held by {what}",
            "subtitle": f"GPU-seconds held per second · {sub}",
            "unit": "gpus",
            "grid": "fleet",
            "per_bucket": 1,
            "series": held_series,
        },
        {
            "id": "fleet_gpus",
            "title": "The fleet's GPUs",
            "subtitle": f"GPUs reporting, and those a job holds · every {step:g} s",
            "unit": "gpus",
            "grid": "fleet",
            "per_bucket": 1,
            "series": [line(gpus, "reporting"), line(allocated, "allocated")],
        },
        {
            "id": "fleet_all_util",
            "title": "Utilization of every GPU",
            "subtitle": f"mean over all reporting GPUs, held or not · every {step:g} s",
            "unit": "ratio",
            "grid": "fleet",
            "per_bucket": 1,
            "series": [line(fleet_util, "all GPUs")],
        },
    ]
    for c in charts:
        c["series"] = [s for s in c["series"] if any(v is not None for v in s["mean"])]
    return {
        "grids": {"fleet": grid},
        "charts": [c for c in charts if c["series"]],
        "step_seconds": step,
        "rate_window_seconds": window,
    }


def _r(v: float) -> float | None:
    return float(f"{v:.4g}") if math.isfinite(v) else None
