"""The run summary's rows, composed once for every view: ``computewatch show`` prints them as a
rich table (``views.text``), the report escapes them into its tables (``views.html.run``)."""

from __future__ import annotations

import math
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

from computewatch.analysis.summary_types import (
    FlopsSection,
    GpuStats,
    RunSummary,
    energy_components,
)
from computewatch.records import Figure
from computewatch.units import (
    MISSING,
    format_bytes,
    format_duration,
    format_energy,
    format_flop,
    format_grams,
    format_kwh,
    format_mfu,
    format_percent,
    format_seconds,
    format_significant,
    format_usd,
    format_watts,
)
from computewatch.views.diagnosis import diagnosis_rows
from computewatch.views.repro import repro_lines
from computewatch.views.steps_text import steps_lines

RowKind = Literal["plain", "code", "tags", "note"]


@dataclass(frozen=True, slots=True)
class Row:
    """One labelled line of the summary, as plain text (never markup).

    ``missing``: the value is absent (``text`` says how): the text table leaves the row out, the
    page shows it greyed. ``kind``: ``code`` a command, ``tags`` one chip per item of ``items``
    (``text`` joins them), ``note`` a warning."""

    label: str
    text: str
    missing: bool = False
    kind: RowKind = "plain"
    items: tuple[str, ...] = ()


def format_value(v: object) -> str:
    """A number as a person reads it: four significant digits, thousands separated, never in
    scientific notation below 10⁹ (``0.00008925``), a year kept as 2024, booleans as yes/no, a
    missing value as ``n/a``; anything else as ``str``."""
    if v is None:
        return MISSING
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}" if abs(v) >= 10_000 else str(v)
    if isinstance(v, float):
        if math.isfinite(v) and abs(v) >= 1e9:
            return f"{v:.4g}"  # FLOP counts and rates, as the compute thresholds are written
        return format_significant(v, 4)
    return str(v)


def _per_second_flop(v: float) -> str:
    return f"{format_flop(v)}/s"


def _per_gpu_hour(v: float) -> str:
    return f"{format_usd(v)}/GPU-hour"


_FIGURE_FORMATS: dict[str, Callable[[float], str]] = {
    "ratio": format_mfu,  # MFU, HFU: a share of the peak, never above 100 %
    "kWh": format_kwh,  # J, Wh or kWh: never 9.616e-06 kWh
    "gCO2e": format_grams,
    "USD": format_usd,
    "FLOP": format_flop,
    "FLOP/s": _per_second_flop,
    "s": format_seconds,  # the forecast's wall time: H:MM:SS from 100 s
    "USD/GPU-hour": _per_gpu_hour,  # the fleet report's prices
}


def _unit_format(unit: object) -> Callable[[float], str] | None:
    """The formatter of ``unit``; ``gCO2e per step`` (an SCI score) is the grams' one with
    `` per step`` after it."""
    text = str(unit)
    fmt = _FIGURE_FORMATS.get(text)
    if fmt is not None:
        return fmt
    head, sep, per = text.partition(" per ")
    base = _FIGURE_FORMATS.get(head) if sep else None
    if base is None:
        return None
    return lambda v: f"{base(v)} per {per}"


def value_text(v: object, unit: object = None) -> str:
    """A number in ``unit`` through the unit's formatter when it has one, else
    :func:`format_value` followed by the unit; a missing value as ``n/a`` alone."""
    fmt = _unit_format(unit)
    if fmt is not None and isinstance(v, int | float) and not isinstance(v, bool):
        return fmt(v)
    text = format_value(v)
    return f"{text} {unit}" if unit and text != MISSING else text


def figure_text(f: Mapping[str, object]) -> str:
    """A figure's value with its unit, through the unit's formatter when there is one."""
    return value_text(f.get("value"), f.get("unit"))


def range_text(f: Mapping[str, object]) -> str:
    """A figure's low–high range, each end through the unit's formatter as :func:`figure_text`
    writes the value (so ``0.32 J–0.39 J``, never ``8.925e-05–0.0001091 kWh``); in a unit
    with no formatter, the two numbers then the unit once. ``n/a`` for a missing end."""
    unit = f.get("unit")
    lo, hi = f.get("low"), f.get("high")
    if _unit_format(unit) is not None:
        return f"{value_text(lo, unit)}–{value_text(hi, unit)}"
    return f"{format_value(lo)}–{format_value(hi)}" + (f" {unit}" if unit else "")


def status_text(s: RunSummary) -> str:
    """``failed (exit 1)``: the status with the exit code when there is one."""
    status = str(s.get("status"))
    if s.get("exit_code") is not None:
        status += f" (exit {s['exit_code']})"
    return status


def command_text(s: RunSummary) -> str:
    """The command as a shell would read it back."""
    return shlex.join(str(c) for c in s.get("command") or [])


def run_rows(s: RunSummary) -> list[Row]:
    """command, tags, status, started and duration."""
    tags = tuple(f"{k}={v}" for k, v in sorted((s.get("tags") or {}).items()))
    started = s.get("started_at")
    return [
        Row("command", command_text(s), kind="code"),
        Row("tags", " ".join(tags), kind="tags", items=tags)
        if tags
        else Row("tags", "none", missing=True),
        Row("status", status_text(s)),
        Row("started", started) if started else Row("started", MISSING, missing=True),
        Row("duration", format_duration(s.get("duration_seconds"))),
    ]


def usage_rows(s: RunSummary) -> list[Row]:
    """What the run used: cpu, memory, disk, network, then its steps and throughput."""
    cpu, mem, disk, net = s["cpu"], s["memory"], s["disk"], s["network"]
    rows = [
        Row(
            "cpu",
            f"{format_value(cpu.get('seconds_total'))} CPU-seconds · mean "
            f"{format_percent(cpu.get('utilization_mean'))}, "
            f"max {format_percent(cpu.get('utilization_max'))} "
            f"of {format_value(cpu.get('allowed_cores'))} allowed cores"
            + (f" ({m})" if (m := cpu.get("method")) else ""),
        ),
        Row(
            "memory",
            f"peak RSS {format_bytes(mem.get('peak_rss_bytes'))} · host peak used "
            f"{format_bytes(mem.get('peak_host_used_bytes'))} of "
            f"{format_bytes(mem.get('host_total_bytes'))}",
        ),
        Row(
            "disk",
            f"the run read {format_bytes(disk.get('read_bytes'))}, wrote "
            f"{format_bytes(disk.get('write_bytes'))} · host disks read "
            f"{format_bytes(disk.get('host_read_bytes'))}, wrote "
            f"{format_bytes(disk.get('host_write_bytes'))}",
        ),
        Row(
            "network",
            f"received {format_bytes(net.get('recv_bytes'))}, "
            f"sent {format_bytes(net.get('sent_bytes'))} (whole host)",
        ),
    ]
    steps = s.get("steps") or {}
    if not steps.get("count"):
        return [*rows, Row("steps", "none reported", missing=True)]
    line = f"{format_value(steps['count'])} steps"
    if steps.get("processes") is not None:
        line += f" from {format_value(steps.get('processes'))} process(es)"
    st = steps.get("step_time_seconds")
    if st:
        line += (
            f" · step time mean {format_seconds(st.get('mean'))}, "
            f"p50 {format_seconds(st.get('p50'))}, p90 {format_seconds(st.get('p90'))}, "
            f"p99 {format_seconds(st.get('p99'))}, max {format_seconds(st.get('max'))}"
        )
    rows.append(Row("steps", line))
    rates = [
        f"{format_value(rate)} {label}"
        for rate, label in (
            (steps.get("steps_per_second"), "steps/s"),
            (steps.get("samples_per_second"), "samples/s"),
            (steps.get("tokens_per_second"), "tokens/s"),
        )
        if rate is not None
    ]
    if rates:
        rows.append(Row("throughput", " · ".join(rates)))
    return rows


def samples_row(s: RunSummary) -> Row:
    smp = s.get("samples") or {}
    return Row(
        "samples",
        f"{format_value(smp.get('count', 0))} ticks every "
        f"{format_value(smp.get('interval_seconds'))} s, "
        f"{format_value(smp.get('series', 0))} series",
    )


def summary_rows(s: RunSummary) -> list[Row]:
    """Every row of the summary, in the order ``computewatch show`` prints them."""
    rows = [*run_rows(s), *usage_rows(s)]
    for g in s.get("gpus") or []:  # a Google TPU chip is a "tpu" row (docs/tpu.md)
        kind = "tpu" if (g.get("model") or "").startswith("TPU-") else "gpu"
        rows.append(Row(f"{kind} {g.get('index')}", gpu_text(g)))
    for label, text in [*steps_lines(s), *accounting_lines(s), *diagnosis_rows(s)]:
        rows.append(Row(label, text))  # phases, ranks, requests; energy ... forecast; findings
    rows += [Row(label, text) for label, text in repro_lines(s)]  # environment, config
    rows.append(samples_row(s))
    rows += [Row("note", n, kind="note") for n in s.get("notes") or []]
    return rows


def gpu_text(g: GpuStats) -> str:
    """One GPU in a line: name, utilization, memory peak, power, energy, throttling."""
    name = str(g.get("name")) + (" (simulated)" if g.get("simulated") else "")
    parts = [name]
    if g.get("utilization_mean") is not None:
        parts.append(f"util {format_percent(g['utilization_mean'])}")
    if g.get("sm_active_mean") is not None:
        parts.append(f"SM active {format_percent(g['sm_active_mean'])}")
    if g.get("tensor_active_mean") is not None:
        parts.append(f"tensor {format_percent(g['tensor_active_mean'])}")
    if g.get("hbm_bandwidth_mean") is not None:
        parts.append(f"HBM bandwidth {format_percent(g['hbm_bandwidth_mean'])}")
    if g.get("memory_peak_bytes") is not None:
        mem = f"mem peak {format_bytes(g['memory_peak_bytes'])}"
        if g.get("process_memory_peak_bytes") is not None:
            mem += f" (run {format_bytes(g['process_memory_peak_bytes'])})"
        parts.append(mem)
    if g.get("power_mean_watts") is not None:
        parts.append(f"{format_watts(g['power_mean_watts'])} mean")
    if (joules := g.get("energy_joules")) is not None:
        parts.append(f"{format_energy(joules)} ({g.get('energy_method')})")
    throttled = {k: v for k, v in (g.get("throttle_seconds") or {}).items() if v}
    if throttled:
        spans = ", ".join(f"{k} {format_seconds(v)}" for k, v in throttled.items())
        parts.append(f"throttled {spans}")
    return " · ".join(parts)


# -- accounting: one line each ------------------------------------------------------------------


def _kwh(f: Figure) -> str:
    return format_kwh(f["value"])


def _range(f: Figure) -> str:
    """`` (low–high)`` after a figure's value, when it has a range."""
    if f["low"] is None or f["low"] == f["high"]:
        return ""
    return f" ({range_text(f)})"


def _grams(f: Figure) -> str:
    return format_grams(f["value"])


def _usd(f: Figure) -> str:
    return format_usd(f["value"])


def _flop(f: Figure) -> str:
    return format_flop(f["value"])


def flops_text(flops: FlopsSection) -> str:
    """The summary's FLOPs line: counted FLOPs with the FLOP/s achieved, MFU and HFU (or why
    there is none) and the hardware estimate beside them; or the estimate alone; and the
    regulatory thresholds crossed or approached."""
    if flops.get("value") is None:
        return "; ".join(flops.get("assumptions") or ["not estimated"])
    parts = [f"{_flop(flops)}{_range(flops)} {flops['method']}"]
    rate = flops.get("flops_per_second")
    if rate and rate["value"] is not None:
        parts.append(value_text(rate["value"], "FLOP/s"))
    mfu = flops.get("mfu")
    if isinstance(mfu, dict):
        if mfu.get("value") is None:
            parts.append("; ".join(mfu.get("assumptions") or ["no MFU"]))
        else:
            peak = flops.get("peak_flops")
            at = f" {flops['precision']}" if flops.get("precision") else ""
            of = f" of {value_text(peak, 'FLOP/s')}{at} peak" if peak else ""
            parts.append(f"MFU {format_mfu(mfu['value'])}{of}")
    hfu = flops.get("hfu")
    if isinstance(hfu, dict) and hfu.get("value") is not None:
        parts.append(f"HFU {format_percent(hfu['value'])}")
    est = flops.get("hardware_estimate")
    if isinstance(est, dict) and est.get("value") is not None:
        parts.append(f"hardware estimate {_flop(est)}{_range(est)}")
    for t in flops.get("thresholds") or []:
        if t.get("crossed"):
            parts.append(f"crosses {t['flop']:.0e} FLOP ({t['name']})")
        elif t.get("approached"):
            parts.append(f"{t['fraction']:.0%} of {t['flop']:.0e} FLOP ({t['name']})")
    return " · ".join(parts)


def accounting_lines(summary: RunSummary) -> list[tuple[str, str]]:
    """One line each for energy, carbon, cost, FLOPs and the forecast, with method and range."""
    out: list[tuple[str, str]] = []
    energy = summary.get("energy")
    if energy:
        fac = energy["facility"]
        # the "gpu" component of a run on TPUs is said as theirs (its key stays "gpu")
        tpus = bool(summary.get("gpus")) and all(
            (g.get("model") or "").startswith("TPU-") for g in summary.get("gpus") or []
        )
        parts = [
            f"{'tpu' if name == 'gpu' and tpus else name} {_kwh(c)} {c['method']}"
            for name, c in energy_components(energy)
            if c["value"] is not None
        ]
        out.append(
            (
                "energy",
                f"{_kwh(fac)}{_range(fac)} at the facility (PUE {energy['pue']['value']:g})"
                f" · {', '.join(parts)}",
            )
        )
        if (dh := energy.get("device_hours")) is not None:
            pairs = ((dh["gpu_hours"], "GPU-hours"), (dh["tpu_hours"], "TPU-hours"))
            hours = [f"{h:.4g} {n}" for h, n in pairs if h]
            if hours:
                out.append(("device time", " · ".join(hours)))
    carbon = summary.get("carbon")
    if carbon:
        tot, inten = carbon["total"], carbon["intensity"]
        where = inten["name"] + (" — location unknown" if inten["how"] == "unknown" else "")
        out.append(
            (
                "carbon",
                f"{_grams(tot)}{_range(tot)} · {inten['g_per_kwh']:g} g/kWh, {where} "
                f"({inten['source']})",
            )
        )
        if (sci := carbon.get("sci")) is not None:  # ISO/IEC 21031 (docs/carbon.md)
            i = sci["inputs"]
            score = (
                f"{format_grams(sci['value'])} per {i['R_unit']}"
                f" ({format_grams(sci['low'])}–{format_grams(sci['high'])})"
                if sci["value"] is not None
                else "; ".join(sci["notes"]) or MISSING
            )
            out.append(
                (
                    "sci",
                    f"{score} · E {format_kwh(i['E_kwh'])}, I {i['I_g_per_kwh']:.4g} g/kWh "
                    f"({i['I_method'].split(':')[0]}), M {format_grams(i['M_g'])}, "
                    f"R {i['R']:g} {i['R_unit']} ({i['R_source']})",
                )
            )
    cost = summary.get("cost")
    if cost:
        tot = cost["total"]
        if tot.get("value") is None:
            out.append(("cost", "; ".join(tot.get("assumptions") or ["no price known"])))
        else:
            per = cost.get("per_unit") or {}
            extra = [
                f"{format_usd(v)} {label}"
                for v, label in (
                    (per.get("usd_per_1m_tokens"), "per 1M tokens"),
                    (per.get("usd_per_1k_samples"), "per 1k samples"),
                    (per.get("usd_per_step"), "per step"),
                )
                if v is not None
            ]
            out.append(("cost", " · ".join([f"{_usd(tot)}{_range(tot)}", *extra])))
    flops = summary.get("flops")
    if flops:
        out.append(("flops", flops_text(flops)))
    fc = summary.get("forecast")
    if fc:
        if fc.get("complete"):
            out.append(("forecast", f"complete: {fc['steps_done']} of {fc['total_steps']} steps"))
        elif "wall_seconds_at_completion" in fc:
            w = fc["wall_seconds_at_completion"]
            bits = [
                f"at {fc['total_steps']} steps: {format_duration(w['value'])} "
                f"({format_duration(w['low'])}–{format_duration(w['high'])})"
            ]
            if "energy_kwh" in fc:
                bits.append(_kwh(fc["energy_kwh"]))
            if "carbon_gco2e" in fc:
                bits.append(_grams(fc["carbon_gco2e"]))
            if "cost_usd" in fc:
                bits.append(_usd(fc["cost_usd"]))
            out.append(("forecast", " · ".join(bits)))
    return out
