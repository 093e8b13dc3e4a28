"""Human-readable text for run lists, comparisons, devices and diagnoses (rich tables). The run
summary is printed without rich: ``views.summary_text``."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, TextIO

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from computewatch.analysis.common import iso
from computewatch.analysis.compare import Comparison, lookup
from computewatch.analysis.summary_types import DiagnosisReport
from computewatch.diagnosis.findings import at_stake_text
from computewatch.store import RunRow
from computewatch.units import (
    format_bytes,
    format_duration,
    format_grams,
    format_kwh,
    format_percent,
    format_seconds,
    format_usd,
    format_watts,
)
from computewatch.views.diagnosis import (
    evidence_of,
    finding_head,
    findings,
    joint_text,
    rule_notes,
    saving_detail,
    time_ranges_text,
)
from computewatch.views.repro import change_lines
from computewatch.views.summary_rows import format_value


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
        fmt = _FORMATS.get(row["unit"], format_value)
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
    for key, va, vb in change_lines(result):  # configuration and environment differences
        add_row(t, key, va, vb, "", "")
    con.print(t)


_FORMATS: dict[str, Callable[[Any], str]] = {
    "bytes": format_bytes,
    "ratio": format_percent,
    "seconds": format_seconds,
    "kWh": format_kwh,
    "gCO2e": format_grams,
    "USD": format_usd,
}


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
    tpus = any((g.get("capabilities") or {}).get("accelerator") == "tpu" for g in info["gpus"])
    t = Table(box=None, pad_edge=False)
    device = "accelerator" if tpus else "GPU"
    for col in ("#", device, "memory", "power limit", "energy", "GPM", "per process", "notes"):
        t.add_column(col, overflow="fold")
    for g in info["gpus"]:
        caps = g.get("capabilities") or {}
        name = g["name"] + (" (simulated)" if g.get("simulated") else "")
        if g.get("mig_parent_uuid"):
            name += f" (MIG of {g['mig_parent_uuid'][:12]})"
        if caps.get("energy_counter"):
            energy = "counter"
        elif caps.get("power") is False:  # no power reading (TPUs): energy is modelled
            energy = "modelled"
        else:
            energy = "polled power"
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
            format_watts(g.get("power_limit_watts")),
            energy,
            format_value(caps.get("gpm")),
            format_value(caps.get("per_process")),
            "; ".join(why),
        )
    con.print(t)


_STYLE = {"high": "bold red", "medium": "yellow", "low": "cyan"}


def print_diagnosis(result: DiagnosisReport, out: TextIO) -> None:
    """The full diagnosis: each finding with its evidence, time ranges and suggestion."""
    con = Console(file=out, highlight=False, soft_wrap=False, width=_diagnosis_width(out))
    run = result["run"]
    head = f"diagnosis of run {run.get('id')}" + (f" · {run['name']}" if run.get("name") else "")
    con.print(Text(head, style="bold"))
    if result.get("note"):  # the diagnosis stored when the run ended
        con.print(Text(str(result.get("note")), style="dim"))
    error = result.get("error")
    if error:
        con.print(Text(str(error), style="yellow"))
    found = findings(result)
    if not found and not error:
        con.print(f"no bottleneck found by the {len(result.get('checked') or [])} rules applied")
    duration = run.get("duration_seconds")
    joint = joint_text(result, duration if isinstance(duration, int | float) else None)
    if joint:
        con.print(Text(joint, style="bold"))
    for i, f in enumerate(found, 1):
        sev, title = finding_head(f)
        line = Text(f"\n{i}. ")
        line.append(f"[{sev}]", style=_STYLE.get(sev, ""))
        line.append(f" {title}", style="bold")
        stake = at_stake_text(f, duration if isinstance(duration, int | float) else None)
        if stake:
            line.append(f" · {stake}")
        con.print(line)
        ev = evidence_of(f)
        for text in ev.get("lines") or []:
            _hang(con, "   - ", str(text))
        spans = time_ranges_text(ev.get("time_ranges") or [])
        if spans:
            _hang(con, "   when: ", f"{spans} from the run's start")
        _hang(con, "   suggestion: ", str(f.get("suggestion")), style="green")
        assumes = saving_detail(f)[1]
        if assumes:
            _hang(con, "   saving assumes: ", assumes, style="dim")
    skipped = rule_notes(result.get("not_applicable"))
    failed = rule_notes(result.get("failed"))
    if skipped or failed:
        con.print()
    for rule, why in skipped.items():
        _hang(con, "not checked: ", f"{rule}: {why}", style="dim")
    for rule, why in failed.items():
        _hang(con, "rule failed: ", f"{rule}: {why}", style="yellow")


def _hang(con: Console, prefix: str, text: str, style: str = "") -> None:
    """``prefix`` then ``text``, wrapped lines indented under the text (a hanging indent)."""
    grid = Table.grid(padding=0)
    grid.add_column(width=len(prefix), no_wrap=True)
    grid.add_column(ratio=1)
    grid.add_row(Text(prefix, style=style), Text(text, style=style))
    con.print(grid)


def _diagnosis_width(out: TextIO) -> int:
    try:
        return max(Console(file=out).width, 100) if out.isatty() else 100
    except Exception:
        return 100
