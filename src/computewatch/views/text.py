"""Human-readable text for summaries, run lists and comparisons (rich tables)."""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable
from typing import Any, TextIO

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from computewatch.analysis.common import iso
from computewatch.analysis.compare import Comparison, lookup
from computewatch.analysis.summary_types import (
    FlopsSection,
    GpuStats,
    RunSummary,
    energy_components,
)
from computewatch.records import Figure
from computewatch.store import RunRow
from computewatch.units import (
    format_bytes,
    format_duration,
    format_energy,
    format_flop,
    format_grams,
    format_kwh,
    format_percent,
    format_seconds,
    format_usd,
)
from computewatch.views.diagnosis import diagnosis_rows
from computewatch.views.steps_text import steps_lines


def add_row(t: Table, *cells: str | Text) -> None:
    """Add a row of plain text: user strings (names, commands, tags) are never read as rich
    markup, so a run named ``[bold]x`` prints as typed."""
    t.add_row(*(c if isinstance(c, Text) else Text(str(c)) for c in cells))


def make_console(out: TextIO) -> Console:
    """A console printing to ``out`` as wide as its terminal (at least 60 columns, else 100)."""
    return Console(file=out, highlight=False, soft_wrap=False, width=max(_width(out), 60))


def _width(out: TextIO) -> int:
    try:
        return os.get_terminal_size(out.fileno()).columns
    except (OSError, ValueError, AttributeError):
        return 100


def _num(v: Any, unit: str = "") -> str:
    if v is None:
        return "n/a"
    return f"{float(v):,.2f}{unit}"


def print_summary(summary: RunSummary, out: TextIO) -> None:
    """The summary as a compact table."""
    con = make_console(out)
    title = f"run {summary['id']}" + (f" · {summary['name']}" if summary.get("name") else "")
    t = Table(title=Text(title), show_header=False, box=None, pad_edge=False, title_justify="left")
    t.add_column("field", style="bold")
    t.add_column("value")
    tags = summary.get("tags") or {}
    status = summary["status"]
    if summary.get("exit_code") is not None:
        status += f" (exit {summary['exit_code']})"
    add_row(t, "command", shlex.join(summary.get("command") or []))
    if tags:
        add_row(t, "tags", " ".join(f"{k}={v}" for k, v in sorted(tags.items())))
    add_row(t, "status", status)
    add_row(t, "started", str(summary.get("started_at")))
    add_row(t, "duration", format_duration(summary.get("duration_seconds") or 0.0))
    cpu = summary["cpu"]
    add_row(
        t,
        "cpu",
        f"{_num(cpu.get('seconds_total'))} s · mean {format_percent(cpu.get('utilization_mean'))}, "
        f"max {format_percent(cpu.get('utilization_max'))} of {cpu.get('allowed_cores'):g} cores",
    )
    mem = summary["memory"]
    add_row(
        t,
        "memory",
        f"peak RSS {format_bytes(mem.get('peak_rss_bytes'))} · host peak used "
        f"{format_bytes(mem.get('peak_host_used_bytes'))} "
        f"of {format_bytes(mem.get('host_total_bytes'))}",
    )
    disk = summary["disk"]
    add_row(
        t,
        "disk",
        f"read {format_bytes(disk.get('read_bytes'))}, "
        f"written {format_bytes(disk.get('write_bytes'))} (the run) · "
        f"host devices r {format_bytes(disk.get('host_read_bytes'))} "
        f"w {format_bytes(disk.get('host_write_bytes'))}",
    )
    net = summary["network"]
    add_row(
        t,
        "network",
        f"received {format_bytes(net.get('recv_bytes'))}, "
        f"sent {format_bytes(net.get('sent_bytes'))} (whole host)",
    )
    for g in summary.get("gpus") or []:
        add_row(t, f"gpu {g.get('index')}", _gpu_line(g))
    steps = summary.get("steps") or {}
    if steps.get("count"):
        st = steps.get("step_time_seconds")
        line = f"{steps['count']} steps"
        if st:
            line += (
                f" · step time mean {format_seconds(st.get('mean'))}, "
                f"p50 {format_seconds(st.get('p50'))}, p90 {format_seconds(st.get('p90'))}, "
                f"p99 {format_seconds(st.get('p99'))}, max {format_seconds(st.get('max'))}"
            )
        add_row(t, "steps", line)
        rates = [
            f"{rate:,.2f} {label}"
            for rate, label in (
                (steps.get("steps_per_second"), "steps/s"),
                (steps.get("samples_per_second"), "samples/s"),
                (steps.get("tokens_per_second"), "tokens/s"),
            )
            if rate is not None
        ]
        if rates:
            add_row(t, "throughput", " · ".join(rates))
    for label, text in steps_lines(summary):  # phases, ranks, requests
        add_row(t, label, text)
    for label, text in accounting_lines(summary):
        add_row(t, label, text)
    for label, text in diagnosis_rows(summary):
        add_row(t, label, text)
    smp = summary.get("samples") or {}
    add_row(
        t,
        "samples",
        f"{smp.get('count', 0)} ticks every {smp.get('interval_seconds')} s, "
        f"{smp.get('series', 0)} series",
    )
    for n in summary.get("notes") or []:
        add_row(t, "note", Text(n, style="yellow"))
    con.print(t)


def print_runs(runs: list[RunRow], out: TextIO) -> None:
    con = make_console(out)
    t = Table(box=None, pad_edge=False)
    for col in ("id", "name", "status", "started", "duration", "cpu", "peak rss", "tags"):
        t.add_column(col, no_wrap=col in ("id", "started"))
    for r in runs:
        s = r.summary or {}
        dur = (r.ended_at - r.started_at) if r.ended_at else None
        add_row(
            t,
            r.id,
            r.name or "",
            r.status if r.exit_code in (None, 0) else f"{r.status} ({r.exit_code})",
            (iso(r.started_at) or "")[:19].replace("T", " "),
            format_duration(dur) if dur is not None else "",
            format_percent(lookup(s, "cpu.utilization_mean")) if s else "",
            format_bytes(lookup(s, "memory.peak_rss_bytes")) if s else "",
            " ".join(f"{k}={v}" for k, v in sorted(r.tags.items())),
        )
    con.print(t)


def print_compare(result: Comparison, out: TextIO) -> None:
    con = make_console(out)
    a, b = result["a"], result["b"]
    t = Table(box=None, pad_edge=False)
    t.add_column("field")
    for tag, run in (("A", a), ("B", b)):
        head = f"{tag} {run['id']}" + (f" {run['name']}" if run.get("name") else "")
        t.add_column(Text(head), justify="right")
    t.add_column("B − A", justify="right")
    t.add_column("B / A", justify="right")
    for row in result["fields"]:
        fmt = _FORMATS.get(row["unit"], _plain)
        diff = row["difference"]
        if diff is None:
            dtext = ""
        elif row["unit"] == "bytes":
            dtext = ("+" if diff >= 0 else "−") + format_bytes(abs(diff))
        elif row["unit"] == "ratio":
            dtext = f"{100 * diff:+.1f} pt"
        else:
            dtext = f"{diff:+,.4g}"
        ratio = "" if row["ratio"] is None else f"{row['ratio']:.3f}×"
        add_row(t, row["field"], fmt(row["a"]), fmt(row["b"]), dtext, ratio)
    con.print(t)


_FORMATS: dict[str, Callable[[Any], str]] = {
    "bytes": format_bytes,
    "ratio": format_percent,
    "seconds": format_seconds,
    "kWh": format_kwh,
    "gCO2e": format_grams,
    "USD": format_usd,
}


def _plain(v: Any) -> str:
    if v is None:
        return "n/a"
    if isinstance(v, float):
        return f"{v:,.4g}"
    return str(v)


def _yes(v: Any) -> str:
    return "yes" if v is True else ("no" if v is False else "n/a")


def print_devices(info: dict[str, Any], out: TextIO) -> None:
    """``computewatch devices`` as text: host, CPU energy, then each GPU's capabilities."""
    con = make_console(out)
    h = info["host"]
    limit = h.get("cgroup_cpu_limit_cores")
    con.print(
        f"[bold]host[/bold] {escape(str(h.get('hostname')))} · {escape(str(h.get('cpu_model')))} · "
        f"{h.get('logical_cpus')} logical CPUs ({h.get('allowed_cores'):g} usable"
        + (f", cgroup quota {limit:g}" if limit else "")
        + f") · {format_bytes(h.get('memory_bytes'))} · {h.get('os')}"
    )
    ce = info["cpu_energy"]
    state = "measured (RAPL)" if ce["available"] else "not measured"
    con.print(f"[bold]CPU energy[/bold] {state}: {escape(ce['detail'])}")
    for skipped in info["gpu_backends_skipped"]:
        con.print(
            f"[bold]GPU backend {skipped['backend']}[/bold] skipped: {escape(skipped['reason'])}"
        )
    if not info["gpus"]:
        con.print("[bold]GPUs[/bold] none")
        return
    t = Table(box=None, pad_edge=False)
    for col in ("#", "GPU", "memory", "power limit", "energy", "GPM", "per process", "notes"):
        t.add_column(col, overflow="fold")
    for g in info["gpus"]:
        caps = g.get("capabilities") or {}
        name = g["name"] + (" (simulated)" if g.get("simulated") else "")
        if g.get("mig_parent_uuid"):
            name += f" (MIG of {g['mig_parent_uuid'][:12]})"
        energy = "counter" if caps.get("energy_counter") else "polled power"
        why = [
            str(caps[k])
            for k in ("energy_counter_why", "gpm_why", "per_process_why")
            if caps.get(k) and caps.get(k.removesuffix("_why")) is False
        ]
        add_row(
            t,
            str(g.get("index")),
            f"{name}\n{g['uuid']}",
            format_bytes(g.get("memory_total_bytes")),
            "n/a" if g.get("power_limit_watts") is None else f"{g['power_limit_watts']:.0f} W",
            energy,
            _yes(caps.get("gpm")),
            _yes(caps.get("per_process")),
            "; ".join(why),
        )
    con.print(t)


def _gpu_line(g: GpuStats) -> str:
    name = str(g.get("name")) + (" (simulated)" if g.get("simulated") else "")
    parts = [name]
    if g.get("utilization_mean") is not None:
        parts.append(f"util {format_percent(g['utilization_mean'])}")
    if g.get("sm_active_mean") is not None:
        parts.append(f"SM active {format_percent(g['sm_active_mean'])}")
    if g.get("tensor_active_mean") is not None:
        parts.append(f"tensor {format_percent(g['tensor_active_mean'])}")
    if g.get("memory_peak_bytes") is not None:
        mem = f"mem peak {format_bytes(g['memory_peak_bytes'])}"
        if g.get("process_memory_peak_bytes") is not None:
            mem += f" (run {format_bytes(g['process_memory_peak_bytes'])})"
        parts.append(mem)
    if g.get("power_mean_watts") is not None:
        parts.append(f"{g['power_mean_watts']:.0f} W mean")
    if (joules := g.get("energy_joules")) is not None:
        parts.append(f"{format_energy(joules)} ({g.get('energy_method')})")
    throttled = {k: v for k, v in (g.get("throttle_seconds") or {}).items() if v}
    if throttled:
        spans = ", ".join(f"{k} {format_seconds(v)}" for k, v in throttled.items())
        parts.append(f"throttled {spans}")
    return " · ".join(parts)


def _kwh(f: Figure) -> str:
    return format_kwh(f["value"])


def _range(f: Figure, fmt: Callable[[Figure], str]) -> str:
    if f["low"] is None or f["low"] == f["high"]:
        return ""
    return f" ({fmt({**f, 'value': f['low']})}–{fmt({**f, 'value': f['high']})})"


def _grams(f: Figure) -> str:
    return format_grams(f["value"])


def _usd(f: Figure) -> str:
    return format_usd(f["value"])


def _flop(f: Figure) -> str:
    v = f["value"]
    return "unknown FLOP" if v is None else format_flop(v)


def flops_text(flops: FlopsSection) -> str:
    """The summary's FLOPs line: counted FLOPs with the FLOP/s achieved, MFU and HFU (or why
    there is none) and the hardware estimate beside them; or the estimate alone; and the
    regulatory thresholds crossed or approached."""
    if flops.get("value") is None:
        return "; ".join(flops.get("assumptions") or ["not estimated"])
    parts = [f"{_flop(flops)}{_range(flops, _flop)} {flops['method']}"]
    rate = flops.get("flops_per_second")
    if rate and rate["value"] is not None:
        parts.append(f"{rate['value']:.3g} FLOP/s")
    mfu = flops.get("mfu")
    if isinstance(mfu, dict):
        if mfu.get("value") is None:
            parts.append("; ".join(mfu.get("assumptions") or ["no MFU"]))
        else:
            peak = flops.get("peak_flops")
            at = f" {flops['precision']}" if flops.get("precision") else ""
            of = f" of {peak:.3g} FLOP/s{at} peak" if peak else ""
            parts.append(f"MFU {mfu['value']:.1%}{of}")
    hfu = flops.get("hfu")
    if isinstance(hfu, dict) and hfu.get("value") is not None:
        parts.append(f"HFU {hfu['value']:.1%}")
    est = flops.get("hardware_estimate")
    if isinstance(est, dict) and est.get("value") is not None:
        parts.append(f"hardware estimate {_flop(est)}{_range(est, _flop)}")
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
        parts = [
            f"{name} {_kwh(c)} {c['method']}"
            for name, c in energy_components(energy)
            if c["value"] is not None
        ]
        out.append(
            (
                "energy",
                f"{_kwh(fac)}{_range(fac, _kwh)} at the facility (PUE {energy['pue']['value']:g})"
                f" · {', '.join(parts)}",
            )
        )
    carbon = summary.get("carbon")
    if carbon:
        tot, inten = carbon["total"], carbon["intensity"]
        where = inten["name"] + (" — location unknown" if inten["how"] == "unknown" else "")
        out.append(
            (
                "carbon",
                f"{_grams(tot)}{_range(tot, _grams)} · {inten['g_per_kwh']:g} g/kWh, {where} "
                f"({inten['source']})",
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
                f"${v:.4g} {label}"
                for v, label in (
                    (per.get("usd_per_1m_tokens"), "per 1M tokens"),
                    (per.get("usd_per_1k_samples"), "per 1k samples"),
                    (per.get("usd_per_step"), "per step"),
                )
                if v is not None
            ]
            out.append(("cost", " · ".join([f"{_usd(tot)}{_range(tot, _usd)}", *extra])))
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
                f"at {fc['total_steps']} steps: {format_duration(w['value'] or 0.0)} "
                f"({format_duration(w['low'] or 0.0)}–{format_duration(w['high'] or 0.0)})"
            ]
            if "energy_kwh" in fc:
                bits.append(_kwh(fc["energy_kwh"]))
            if "carbon_gco2e" in fc:
                bits.append(_grams(fc["carbon_gco2e"]))
            if "cost_usd" in fc:
                bits.append(_usd(fc["cost_usd"]))
            out.append(("forecast", " · ".join(bits)))
    return out
