"""Energy, carbon, cost, FLOPs and the forecast of a run, from its stored readings and summary.

Every figure says how it was obtained (``measured``, ``polled``, ``modeled``, ``estimated``),
what it assumed and its low-high range; the formulas and sources are in docs/methodology.md.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, cast

import msgspec

from computewatch.accounting.cpu_power import CPU_IDLE_FRACTION, CpuPowerModel
from computewatch.accounting.flops import run_flops
from computewatch.accounting.region import CloudHost, Location, detect_cloud, resolve_location
from computewatch.accounting.tally import StepTally
from computewatch.accounting.timed import hourly_carbon, run_sci
from computewatch.analysis.steps import request_accounting
from computewatch.analysis.summary_types import (
    Accounting,
    AccountingFailure,
    CarbonSection,
    CostPerUnit,
    CostSection,
    CpuEnergyFigure,
    EnergyComponents,
    EnergySection,
    GpuStats,
    HourlyCarbon,
    LiveAccounting,
    RunSummary,
)
from computewatch.catalog import reference
from computewatch.catalog.tpu import accelerator_kind, devices_word, tpu_rows
from computewatch.config import Config
from computewatch.errors import ComputewatchError
from computewatch.records import (
    MEASURED,
    MODELED,
    POLLED,
    Figure,
    figure,
    relative_range,
)
from computewatch.store import RunRow, StepRow, Store

J_PER_KWH = 3.6e6
GPU_COUNTER_UNCERTAINTY = 0.05  # NVML: power readings within +/-5% of the draw (nvml.h docs)
GPU_POLLED_UNCERTAINTY = 0.10  # the counter's +/-5% plus what sampling misses between polls
RAPL_UNCERTAINTY = 0.10  # RAPL tracks wall-plug CPU power closely (Khan et al. 2018, TOMPECS)
GRID_UNCERTAINTY = 0.15  # an annual average applied to particular hours
SERVER_LIFETIME_YEARS = 6.0  # embodied carbon amortised over 6 years (Luccioni et al. 2022)
SERVER_LIFETIME_SOURCE = "Luccioni, Viguier and Ligozat (2022): 6-year replacement rate"
_BUSY_MODES = frozenset({"user", "nice", "system", "irq", "softirq", "steal"})

SeriesKey = tuple[str, tuple[tuple[str, str], ...]]  # (metric name, sorted labels)


class AccountingOptions(msgspec.Struct, frozen=True):
    """What the user said about the run's context (flags win over the configuration)."""

    config: Config = msgspec.field(default_factory=Config)
    region: str | None = None
    pue: float | None = None
    precision: str | None = None
    whole_machine: bool = False
    total_steps: int | None = None
    instance_type: str | None = None
    environ: Mapping[str, str] = msgspec.field(default_factory=lambda: dict(os.environ))
    dmi_root: str = "/sys/class/dmi/id"
    live_client: Callable[[str, str | None], Any] | None = None  # (token, url) -> client
    sci_unit: str | None = None  # --sci-unit; else [carbon] sci_unit
    carbon_provider: Callable[[str, Any], Any] | None = None  # (name, settings) -> provider


def account(
    store: Store,
    run: RunRow,
    summary: RunSummary,
    opts: AccountingOptions,
    steps: Sequence[StepRow] | None = None,
) -> Accounting:
    """The ``energy``, ``carbon``, ``cost``, ``flops`` (and with a step target ``forecast``)
    sections of a run's summary. ``steps``: the run's, when already read (the end of a run
    reads them once for the accounting and the diagnosis)."""
    cfg = opts.config
    location = resolve_location(
        opts.region, config_region=cfg.region, environ=opts.environ, dmi_root=opts.dmi_root
    )
    host_cloud = detect_cloud(opts.dmi_root)
    duration = float(summary.get("duration_seconds") or 0.0)
    energy = _energy(store, run, summary, opts, location, duration)
    carbon = _carbon(energy, summary, opts, location, duration, store, run)
    cost = _cost(energy, summary, opts, host_cloud, duration)
    flops = run_flops(store, run, summary, opts.precision or cfg.precision, steps)
    out: Accounting = {"energy": energy, "carbon": carbon, "cost": cost, "flops": flops}
    if requests := summary.get("requests"):  # energy and cost per request and per 1M tokens
        out["requests"] = request_accounting(requests, energy, cost)
    total = opts.total_steps or _declared_total_steps(store, run)
    if total:
        from computewatch.accounting.forecast import forecast  # with a step target only

        out["forecast"] = forecast(store, run, summary, total, flops=flops, energy=energy,
                                   carbon=carbon, cost=cost, steps=steps)  # fmt: skip
    return out


def live_accounting(
    store: Store,
    run: RunRow,
    summary: RunSummary,
    *,
    precision: str | None = None,
    total_steps: int | None = None,
    tally: StepTally | None = None,
) -> LiveAccounting:
    """What a live upload of a running run adds to its summary: the ``flops`` section (the
    counted FLOPs so far with the FLOP rate, else the hardware-time estimate) and, with a step
    target (``total_steps``, else the one ``track(total_steps=)`` declared), the ``forecast``
    of the FLOPs at completion with its range. The run's steps are read once for both; energy,
    carbon and cost wait for the run's end (they read every sample, and a carbon provider may
    be a network call). ``tally``: the run's steps as the live uploader keeps them, instead
    of reading them all again."""
    steps = store.steps(run.key) if tally is None or not tally.ordered else tally
    flops = run_flops(store, run, summary, precision, steps)
    out: LiveAccounting = {"flops": flops}
    total = total_steps or _declared_total_steps(store, run)
    if total:
        from computewatch.accounting.forecast import forecast  # with a step target only

        out["forecast"] = forecast(store, run, summary, total, flops=flops, steps=steps)
    return out


def accounted(
    store: Store,
    run: RunRow,
    summary: RunSummary,
    opts: AccountingOptions,
    steps: Sequence[StepRow] | None = None,
) -> Accounting | AccountingFailure:
    """:func:`account`, never raising: a failure becomes a note in the summary (the run and
    its measurements are stored whatever happens to the accounting)."""
    try:
        return account(store, run, summary, opts, steps)
    except Exception as e:
        return {"notes": [*summary.get("notes", []), f"accounting failed: {type(e).__name__}: {e}"]}


def with_accounting(summary: RunSummary, sections: Accounting | AccountingFailure) -> RunSummary:
    """``summary`` with :func:`accounted`'s sections added (when the accounting failed, its
    notes, which say why)."""
    out = summary.copy()
    if "energy" not in sections:
        out["notes"] = sections["notes"]
        return out
    out["energy"], out["carbon"] = sections["energy"], sections["carbon"]
    out["cost"], out["flops"] = sections["cost"], sections["flops"]
    if "requests" in sections:
        out["requests"] = sections["requests"]
    if "forecast" in sections:
        out["forecast"] = sections["forecast"]
    return out


# -- energy ---------------------------------------------------------------------------------


def _energy(
    store: Store,
    run: RunRow,
    summary: RunSummary,
    opts: AccountingOptions,
    location: Location,
    duration: float,
) -> EnergySection:
    cfg = opts.config
    rules: list[str] = []
    gpus = summary.get("gpus") or []
    gpu: Figure | None = None
    if gpus:
        gpu = _gpu_energy(gpus, opts.whole_machine)
        for g in gpus:
            rule = "charged whole (--whole-machine)" if opts.whole_machine else g.get("share_rule")
            kind = accelerator_kind(g.get("model"), g.get("uuid"))
            rules.append(f"{kind} {g.get('index')}: {rule or 'charged whole'}")
    series = _deltas(store, run)
    cpu_share, share_rule = _cpu_share(summary, series, opts.whole_machine)
    rules.append(share_rule)
    rapl = {k: v for k, v in series.items() if k[0] == "cpu_energy_joules_total"}
    package = sum(v for k, v in rapl.items() if dict(k[1]).get("domain") == "package")
    dram = sum(v for k, v in rapl.items() if dict(k[1]).get("domain") == "dram")
    cpu: CpuEnergyFigure
    if package > 0:  # a Figure is a CpuEnergyFigure without the model's inputs
        cpu = cast(CpuEnergyFigure, _rapl_figure(package, cpu_share, "package"))
    else:
        busy = host_busy_seconds(series) if opts.whole_machine else None
        cpu = _cpu_model_energy(summary, cfg, duration, cpu_share, busy)
    if dram > 0:
        memory = _rapl_figure(dram, cpu_share, "DRAM")
    else:
        memory = _memory_model_energy(summary, cfg, duration, opts.whole_machine)
    # in this order: the views list the components as they come
    components: EnergyComponents = (
        {"gpu": gpu, "cpu": cpu, "memory": memory}
        if gpu is not None
        else {"cpu": cpu, "memory": memory}
    )
    if cfg.server_watts > 0:
        kwh = cfg.server_watts * duration * cpu_share / J_PER_KWH
        components["server"] = figure(
            kwh,
            "kWh",
            MODELED,
            assumptions=[f"rest of the server {cfg.server_watts:g} W (configured) x CPU share"],
            source=str(cfg.path) if cfg.path else "configuration",
        )
    parts = [gpu, cpu, memory, components.get("server")]
    it = _sum(parts)
    pue_value, pue_low, pue_high, pue_src = resolve_pue(opts.pue, opts.config, location)
    facility = figure(
        _num(it["value"]) * pue_value,
        "kWh",
        _weakest(parts),
        low=_num(it["low"]) * pue_low,
        high=_num(it["high"]) * pue_high,
        assumptions=[f"PUE {pue_value:g} ({pue_src})"],
        source=pue_src,
    )
    out: EnergySection = {
        "components": components,
        "device": it,
        "facility": facility,
        "pue": {"value": pue_value, "low": pue_low, "high": pue_high, "source": pue_src},
        "attribution": rules,
    }
    if gpus:  # GPU-hours and TPU-hours: each device's share of the run's hours
        hours = {"gpu": 0.0, "tpu": 0.0}
        for g in gpus:
            kind = "tpu" if (g.get("model") or "").startswith("TPU-") else "gpu"
            share = 1.0 if opts.whole_machine else float(g.get("share", 1.0))
            hours[kind] += share * duration / 3600
        out["device_hours"] = {"gpu_hours": hours["gpu"], "tpu_hours": hours["tpu"]}
    return out


def _rapl_figure(joules: float, share: float, domain: str) -> Figure:
    """A RAPL counter's delta over the run, times the run's CPU share (``measured``)."""
    lo, hi = relative_range(joules * share, RAPL_UNCERTAINTY)
    return figure(
        joules * share / J_PER_KWH,
        "kWh",
        MEASURED,
        low=lo / J_PER_KWH,
        high=hi / J_PER_KWH,
        assumptions=[f"RAPL {domain} counters x {share:.3f} (the run's CPU share)"],
        source="RAPL powercap energy_uj",
    )


def _gpu_energy(gpus: list[GpuStats], whole: bool = False) -> Figure:
    total = low = high = 0.0
    methods = set()
    notes = []
    for g in gpus:
        kind = accelerator_kind(g.get("model"), g.get("uuid"))
        j = g.get("energy_joules")
        if j is None:
            notes.append(f"{kind} {g.get('index')}: no energy reading")
            continue
        method = g.get("energy_method") or "counter"
        methods.add(method)
        rel = GPU_COUNTER_UNCERTAINTY if method == "counter" else GPU_POLLED_UNCERTAINTY
        if method == "modeled":  # a TPU: power modelled from duty cycle (data/tpu.csv)
            row = tpu_rows().get(g.get("model") or "")
            rel = row.power_relative_uncertainty if row else 0.5
            notes.append(
                f"{kind} {g.get('index')} ({g.get('model')}): no power counter; "
                + (
                    f"{row.idle_watts:g} W idle to {row.busy_watts:g} W busy by TensorCore duty "
                    f"cycle, +/-{rel:.0%} ({row.source}, {row.year})"
                    if row
                    else "power model unknown, +/-50%"
                )
            )
        share = 1.0 if whole else float(g.get("share", 1.0))
        j = float(j) * share
        lo, hi = relative_range(j, rel)
        total, low, high = total + j, low + lo, high + hi
        sim = " (simulated device)" if g.get("simulated") else ""
        notes.append(f"{kind} {g.get('index')}: {method}{sim}, share {share:.1%}")
    method = MEASURED if methods <= {"counter"} else POLLED
    if "modeled" in methods:
        method = MODELED
    return figure(
        total / J_PER_KWH,
        "kWh",
        method,
        low=low / J_PER_KWH,
        high=high / J_PER_KWH,
        assumptions=notes,
        source="NVML/amdsmi energy counter, or polled power integrated"
        + ("; TPU power modelled from data/tpu.csv" if "modeled" in methods else ""),
    )


def _deltas(store: Store, run: RunRow) -> dict[SeriesKey, float]:
    """Last minus first of the counters accounting needs (RAPL and host CPU time)."""
    wanted = [
        s
        for s in store.series(run.key)
        if s.name in ("cpu_energy_joules_total", "host_cpu_seconds_total")
    ]
    out = {}
    for s in wanted:
        p = store.first_last(run.key, s.idx)  # two seeks, not a pass over a long run
        if len(p) >= 2:
            out[(s.name, tuple(sorted(s.labels.items())))] = p[-1][1] - p[0][1]
    return out


def host_busy_seconds(series: Mapping[SeriesKey, float]) -> float:
    """CPU seconds the whole host spent busy over the run (all cores, busy modes)."""
    return sum(
        v
        for k, v in series.items()
        if k[0] == "host_cpu_seconds_total" and dict(k[1]).get("mode") in _BUSY_MODES
    )


def _cpu_share(
    summary: RunSummary, series: Mapping[SeriesKey, float], whole: bool
) -> tuple[float, str]:
    if whole:
        return 1.0, "CPU and memory: the whole machine is charged (--whole-machine)"
    busy = host_busy_seconds(series)
    mine = (summary.get("cpu") or {}).get("seconds_total") or 0.0
    if busy <= 0:
        return 1.0, "CPU and memory: the whole machine (host CPU time not available)"
    share = min(mine / busy, 1.0)
    return share, (
        f"CPU: the run's share of the host's busy CPU time ({mine:.1f} s of {busy:.1f} s = "
        f"{share:.1%}); use --whole-machine to charge everything"
    )


def _cpu_model_energy(
    summary: RunSummary,
    cfg: Config,
    duration: float,
    share: float,
    whole_busy_seconds: float | None = None,
) -> CpuEnergyFigure:
    host = summary.get("host") or {}
    logical = float(host.get("logical_cpus") or 1)
    model = str(host.get("cpu_model") or "unknown")
    cpu = CpuPowerModel.for_cpu(
        model, logical, cfg.cpu_tdp_watts, str(cfg.path) if cfg.path else "configuration"
    )
    watts, rel, how, src = cpu.tdp_watts, cpu.relative_uncertainty, cpu.how, cpu.source
    # Linear model of the visible CPUs' power: P = TDP x (idle + (1 - idle) x u_host). The run
    # is charged its share of the idle part and the busy part of the CPU seconds it used itself:
    #   E = TDP x (idle x duration x share + (1 - idle) x cpu_seconds / logical CPUs),
    # which equals P x duration x share with share = its CPU seconds / the host's busy seconds.
    cpu_seconds = float((summary.get("cpu") or {}).get("seconds_total") or 0.0)
    if whole_busy_seconds:  # --whole-machine: every busy CPU second of the host
        cpu_seconds = max(cpu_seconds, whole_busy_seconds)
    idle_j = watts * CPU_IDLE_FRACTION * duration * share
    busy_j = watts * (1 - CPU_IDLE_FRACTION) * cpu_seconds / logical
    joules = idle_j + busy_j
    power = joules / duration if duration > 0 else 0.0
    lo, hi = relative_range(joules, rel)
    out = cast(  # a Figure is a CpuEnergyFigure without the model's inputs
        CpuEnergyFigure,
        figure(
            joules / J_PER_KWH,
            "kWh",
            MODELED,
            low=lo / J_PER_KWH,
            high=hi / J_PER_KWH,
            assumptions=[
                "no RAPL counters readable here",
                how,
                f"energy = TDP x ({CPU_IDLE_FRACTION:g} x duration x CPU share {share:.3f} + "
                f"{1 - CPU_IDLE_FRACTION:g} x {cpu_seconds:.2f} CPU-s / {logical:g} CPUs) "
                f"= {power:.2f} W on average",
                f"uncertainty +/-{rel:.0%}",
            ],
            source=src,
        ),
    )
    out["inputs"] = {  # the model's numbers, for anyone checking or comparing the figure
        "tdp_watts": round(watts, 4),
        "idle_fraction": CPU_IDLE_FRACTION,
        "duration_seconds": round(duration, 4),
        "share": round(share, 6),
        "cpu_seconds": round(cpu_seconds, 4),
        "logical_cpus": logical,
        "mean_watts": round(power, 4),
    }
    return out


def _memory_model_energy(summary: RunSummary, cfg: Config, duration: float, whole: bool) -> Figure:
    d = reference.defaults()
    per_gib = cfg.memory_watts_per_gib
    src = str(cfg.path) if per_gib is not None and cfg.path else d["memory_watts_per_gib"].source
    if per_gib is None:
        per_gib = d["memory_watts_per_gib"].value
    mem = summary.get("memory") or {}
    total = float(mem.get("host_total_bytes") or 0.0)
    gib = total / 2**30
    share = 1.0
    rule = "the whole host's memory (--whole-machine)"
    if not whole:
        peak_rss = float(mem.get("peak_rss_bytes") or 0.0)
        used = float(mem.get("peak_host_used_bytes") or 0.0)
        share = min(peak_rss / used, 1.0) if used > 0 else 1.0
        rule = f"the run's share of memory in use (peak RSS / host peak used = {share:.1%})"
    joules = per_gib * gib * duration * share
    lo, hi = relative_range(joules, d["memory_relative_uncertainty"].value)
    return figure(
        joules / J_PER_KWH,
        "kWh",
        MODELED,
        low=lo / J_PER_KWH,
        high=hi / J_PER_KWH,
        assumptions=[
            "no RAPL DRAM counter readable here",
            f"{per_gib:g} W per GiB x {gib:.1f} GiB installed x {rule}",
        ],
        source=src,
    )


def resolve_pue(
    pue: float | None, config: Config, location: Location
) -> tuple[float, float, float, str]:
    """The facility's PUE (value, low, high, where it comes from): ``--pue``, else the
    configuration's, else the cloud provider's published one, else the default with its
    uncertainty."""
    if pue is not None:
        return pue, pue, pue, "--pue"
    if config.pue is not None:
        src = f"configuration {config.path}" if config.path else "configuration"
        return config.pue, config.pue, config.pue, src
    provider = location.provider
    row = reference.pue_rows().get(provider) if provider else None
    if row is not None:
        return row.pue, row.pue, row.pue, f"{provider} published PUE: {row.source} ({row.year})"
    d = reference.default_pue()
    rel = reference.defaults()["pue_default_relative_uncertainty"].value
    return (
        d.pue,
        max(1.0, d.pue * (1 - rel)),
        d.pue * (1 + rel),
        f"default PUE, facility unknown: {d.source} ({d.year})",
    )


# -- carbon ---------------------------------------------------------------------------------


def _carbon(
    energy: EnergySection,
    summary: RunSummary,
    opts: AccountingOptions,
    location: Location,
    duration: float,
    store: Store,
    run: RunRow,
) -> CarbonSection:
    cfg = opts.config
    row = location.row
    g_per_kwh = row.g_per_kwh
    src = f"{row.source} ({row.year})"
    method = MODELED
    notes: list[str] = [n for n in [location.note] if n]
    rel = location.relative_uncertainty or GRID_UNCERTAINTY
    if cfg.electricitymaps_token and row.zone:
        # only with a token: the client loads http.client and ssl (start-up of every run)
        from computewatch.accounting.live_intensity import LiveIntensityClient, LiveIntensityError

        make = opts.live_client or (
            lambda tok, url: LiveIntensityClient(tok, url) if url else LiveIntensityClient(tok)
        )
        try:
            live = make(cfg.electricitymaps_token, cfg.electricitymaps_url).latest(row.zone)
            g_per_kwh, src = (
                live.g_per_kwh,
                f"{live.source}, zone {live.zone}, {live.datetime:%Y-%m-%d %H:00} UTC",
            )
            rel = 0.10
            method = MEASURED
        except LiveIntensityError as e:
            notes.append(f"live intensity unavailable ({e}); annual average used")
    facility = energy["facility"]
    kwh, kwh_lo, kwh_hi = _num(facility["value"]), _num(facility["low"]), _num(facility["high"])
    op = figure(
        kwh * g_per_kwh,
        "gCO2e",
        MODELED,
        low=kwh_lo * g_per_kwh * (1 - rel),
        high=kwh_hi * g_per_kwh * (1 + rel),
        assumptions=[
            f"{kwh:.3g} kWh at the facility x {g_per_kwh:g} gCO2e/kWh ({row.name}, "
            f"{location.code}, found by {location.how})",
            f"intensity uncertainty +/-{rel:.0%}",
            *notes,
        ],
        source=src,
    )
    hourly = None
    intensity_method = f"{'live' if method == MEASURED else 'yearly average'}: {src}"
    if cfg.carbon_provider:
        hourly, op, g_per_kwh, src, intensity_method = _hourly(
            store, run, opts, location, energy, g_per_kwh, op, notes
        )
        if hourly is not None:  # a grid operator's or Electricity Maps' history is measured;
            # WattTime's marginal rate is a model's, a user's file of unknown provenance
            measured = hourly["provider"] in ("electricitymaps", "uk-carbon-intensity")
            method = MEASURED if measured and hourly["kind"] == "history" else MODELED
    out: CarbonSection = {
        "operational": op,
        "intensity": {
            "g_per_kwh": g_per_kwh,
            "region": location.code,
            "name": row.name,
            "how": location.how,
            "method": method,
            "source": src,
            "year": row.year,
        },
        "total": op,
    }
    # The SCI's M is the embodied share always (the specification requires it); the carbon
    # total adds it only with [carbon] embodied = true (an order-of-magnitude estimate).
    emb = _embodied(summary, duration)
    if cfg.embodied:
        out["embodied"] = emb
        out["total"] = _sum([op, emb], unit="gCO2e")
    if hourly is not None:
        out["hourly"] = hourly
    unit = opts.sci_unit or cfg.sci_unit or "run"
    out["sci"] = run_sci(summary, unit, facility, op, emb, intensity_method)
    return out


def _hourly(
    store: Store,
    run: RunRow,
    opts: AccountingOptions,
    location: Location,
    energy: EnergySection,
    yearly: float,
    op: Figure,
    notes: list[str],
) -> tuple[HourlyCarbon | None, Figure, float, str, str]:
    """The operational carbon summed over the run's hours, or (None, the yearly figure...)
    with a note saying why when the provider cannot give it (it never fails the run)."""
    cfg = opts.config
    facility = energy["facility"]
    kwh = _num(facility["value"])
    gpu = energy["components"].get("gpu")
    pue = _num(energy["pue"]["value"]) or 1.0
    accel = _num(gpu["value"]) * pue if gpu is not None else 0.0
    src = op["source"] or ""
    try:
        res = hourly_carbon(
            store,
            run,
            cfg,
            location.code,
            kwh,
            accel,
            yearly,
            environ=opts.environ,
            factory=opts.carbon_provider,
        )
    except ComputewatchError as e:  # a provider down, rate-limiting, a bad file: yearly
        note = f"hourly intensity unavailable ({e}); the yearly figure is used"
        op = {**op, "assumptions": [*op["assumptions"], note]}
        return None, op, yearly, src, f"yearly average: {src} ({note})"
    tc = res.carbon
    rel = GRID_UNCERTAINTY if tc.provider.startswith("file:") else 0.10
    lo_ratio = _num(facility["low"]) / kwh if kwh > 0 else 1.0
    hi_ratio = _num(facility["high"]) / kwh if kwh > 0 else 1.0
    eff = tc.effective_g_per_kwh
    hsec = res.section
    what = (
        f"{hsec['provider']} {hsec['kind']}, {hsec['region']}, every "
        f"{hsec['resolution_seconds'] or 0:g} s"
    )
    figure_ = figure(
        tc.grams,
        "gCO2e",
        MODELED,
        low=tc.grams * lo_ratio * (1 - rel),
        high=tc.grams * hi_ratio * (1 + rel),
        assumptions=[
            f"summed over the run's hours: energy in each interval x that interval's intensity "
            f"({what}); {len(hsec['hours'])} hour(s), mean {eff:.1f} gCO2e/kWh",
            f"energy spread: {hsec['profile']}",
            f"intensity uncertainty +/-{rel:.0%}",
            *res.notes,
            *notes,
        ],
        source=what,
    )
    return hsec, figure_, eff, what, f"hourly: {what}"


def _embodied(summary: RunSummary, duration: float) -> Figure:
    d = reference.defaults()
    devices = summary.get("gpus") or []
    gpus = len(devices)
    tpus = sum(1 for g in devices if str(g.get("model") or "").startswith("TPU-"))
    hours = duration / 3600
    life = SERVER_LIFETIME_YEARS * 8760
    per_gpu = d["embodied_kgco2e_per_gpu"]
    server = d["embodied_kgco2e_per_server"]
    share = _core_share(summary)
    g = (gpus * per_gpu.value + server.value * share) * 1000 * hours / life
    return figure(
        g,
        "gCO2e",
        MODELED,
        low=g * 0.5,
        high=g * 2.0,
        assumptions=[
            (
                f"{gpus} TPU chip(s) x {per_gpu.value:g} kgCO2e, the estimate for one GPU "
                f"(no TPU figure in the reference data; {per_gpu.source})"
                if tpus == gpus and gpus
                else f"{gpus} GPU(s) x {per_gpu.value:g} kgCO2e ({per_gpu.source})"
            ),
            f"server {server.value:g} kgCO2e x {share:.2f} (the run's cores) ({server.source})",
            f"amortised over {SERVER_LIFETIME_YEARS:g} years ({SERVER_LIFETIME_SOURCE})",
            "order of magnitude only: range x0.5 to x2",
        ],
        source=per_gpu.source,
    )


# -- cost -----------------------------------------------------------------------------------


def _cost(
    energy: EnergySection,
    summary: RunSummary,
    opts: AccountingOptions,
    host_cloud: CloudHost,
    duration: float,
) -> CostSection:
    cfg = opts.config
    hours = duration / 3600
    gpus = summary.get("gpus") or []
    ngpu = len(gpus)
    parts: list[Figure] = []
    notes: list[str] = []
    instance_key = opts.instance_type or cfg.instance_type
    how = "--instance-type" if opts.instance_type else "configuration"
    if not instance_key and host_cloud.provider and host_cloud.instance_type:
        instance_key = f"{host_cloud.provider}:{host_cloud.instance_type}"
        how = f"DMI ({host_cloud.evidence})"
    compute: Figure | None = None
    if cfg.usd_per_gpu_hour is not None and ngpu:
        usd = cfg.usd_per_gpu_hour * ngpu * hours
        word = devices_word([g.get("model") for g in gpus])
        compute = figure(
            usd,
            "USD",
            MODELED,
            assumptions=[
                f"{ngpu} {word}(s) x {hours:.4f} h x ${cfg.usd_per_gpu_hour:g}/{word}-hour "
                + ("(configured)" if word == "GPU" else "(usd_per_gpu_hour, configured)")
            ],
            source="configuration",
        )
    elif cfg.usd_per_hour is not None:
        usd = cfg.usd_per_hour * hours
        compute = figure(
            usd,
            "USD",
            MODELED,
            assumptions=[f"{hours:.4f} h x ${cfg.usd_per_hour:g}/hour (configured)"],
            source="configuration",
        )
    elif instance_key:
        provider, _, name = instance_key.partition(":")
        inst = reference.find_instance(provider, name, cfg.extra_instances) if name else None
        if inst is None:
            notes.append(f"instance type {instance_key!r} (from {how}) is not in the price catalog")
        else:
            if ngpu and inst.gpus:
                share = min(ngpu / inst.gpus, 1.0)
                rule = f"{ngpu} of its {inst.gpus} GPUs"
            else:
                share = _core_share(summary)
                rule = f"its cores' share of the instance ({share:.0%})"
            rate = inst.usd_per_hour * (1 - cfg.discount)
            usd = rate * share * hours
            assumptions = [
                f"{inst.provider}:{inst.instance} on demand ${inst.usd_per_hour:g}/h "
                f"(${inst.usd_per_gpu_hour:.2f}/GPU-hour; {inst.price_region}, {inst.as_of})",
                f"the run's share: {rule}, for {hours:.4f} h",
            ]
            if cfg.discount:
                assumptions.append(f"discount {cfg.discount:.0%} (configured: spot/reserved)")
            compute = figure(usd, "USD", MODELED, assumptions=assumptions, source=inst.source)
    if compute is not None:
        parts.append(compute)
    electricity = None
    if cfg.usd_per_kwh is not None:
        fac = energy["facility"]
        kwh = _num(fac["value"])
        electricity = figure(
            kwh * cfg.usd_per_kwh,
            "USD",
            MODELED,
            low=_num(fac["low"]) * cfg.usd_per_kwh,
            high=_num(fac["high"]) * cfg.usd_per_kwh,
            assumptions=[f"{kwh:.6f} kWh x ${cfg.usd_per_kwh:g}/kWh (configured)"],
            source="configuration",
        )
        parts.append(electricity)
    if not parts:
        notes.append(
            "no price known: set [cost] instance_type, usd_per_gpu_hour or usd_per_hour in the "
            "configuration, or --instance-type"
        )
        total = figure(None, "USD", MODELED, assumptions=notes)
    else:
        total = _sum(parts, unit="USD")
        total["assumptions"] = [a for p in parts for a in p["assumptions"]] + notes
    return {
        "compute": compute,
        "electricity": electricity,
        "total": total,
        "per_unit": _unit_costs(total, summary),
    }


def _unit_costs(total: Figure, summary: RunSummary) -> CostPerUnit:
    steps = summary.get("steps")
    usd = total["value"]
    count = steps.get("count") if steps else None
    if usd is None or not steps or not count:
        return {}
    out: CostPerUnit = {"usd_per_step": round(usd / count, 8)}
    if samples := steps.get("samples_total"):
        out["usd_per_1k_samples"] = round(usd / samples * 1e3, 8)
    if tokens := steps.get("tokens_total"):
        out["usd_per_1m_tokens"] = round(usd / tokens * 1e6, 8)
    return out


def _core_share(summary: RunSummary) -> float:
    """The run's share of the machine's cores: the cores it may use over the logical CPUs."""
    host = summary.get("host") or {}
    return min(float(host.get("allowed_cores") or 1) / float(host.get("logical_cpus") or 1), 1.0)


# -- helpers --------------------------------------------------------------------------------


def _num(v: float | None) -> float:
    """A figure's number where it is known to be set (a sum's, a product's); else 0."""
    return 0.0 if v is None else v


def _sum(figs: Iterable[Figure | None], unit: str = "kWh") -> Figure:
    known = [f for f in figs if f is not None and f["value"] is not None]
    return figure(
        sum(_num(f["value"]) for f in known),
        unit,
        _weakest(known),
        low=sum(_num(f["low"]) for f in known),
        high=sum(_num(f["high"]) for f in known),
        assumptions=[f"sum of {len(known)} part(s); ranges added (taken as fully correlated)"],
    )


_ORDER = {MEASURED: 0, "counted": 0, POLLED: 1, MODELED: 2, "estimated": 3}


def _weakest(figs: Iterable[Figure | None]) -> str:
    """The least direct method among the parts: a total is only as measured as its weakest part."""
    methods = [f["method"] for f in figs if f is not None and f["value"] is not None]
    return max(methods, key=lambda m: _ORDER.get(m, 9)) if methods else MODELED


def _declared_total_steps(store: Store, run: RunRow) -> int | None:
    for _, meta in store.writers(run.key).values():
        if meta.get("total_steps"):
            return int(meta["total_steps"])
    return None
