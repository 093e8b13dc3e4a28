"""Text views of the benchmarks: an inference run (LoadGen's results beside ours), a variant
comparison, a scaling sweep and a resource check, as plain aligned tables."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TextIO

from computewatch.bench.gate import METRICS, CheckResult
from computewatch.bench.records import CompareResult, InferenceResult, SweepResult
from computewatch.units import (
    MISSING,
    format_bytes,
    format_count,
    format_energy,
    format_grams,
    format_number,
    format_percent,
    format_seconds,
    format_usd,
)

__all__ = [
    "format_metric",
    "format_qps",
    "print_check",
    "print_compare",
    "print_inference",
    "print_sweep",
    "table",
]


def table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Columns aligned: text to the left, the rest to the right."""
    widths = [max(len(str(c)) for c in col) for col in zip(head, *rows, strict=True)]

    def line(cells: Sequence[str]) -> str:
        out = []
        for i, c in enumerate(cells):
            out.append(c.ljust(widths[i]) if i == 0 else c.rjust(widths[i]))
        return "  ".join(out).rstrip()

    return "\n".join([line(head), line(["-" * w for w in widths]), *map(line, rows)])


def format_qps(v: float | None) -> str:
    """Queries (samples) per second, the benchmarks' throughput: ``1,234.5/s``."""
    return MISSING if v is None else f"{format_number(v, 1)}/s"


def format_metric(name: str, v: float | None) -> str:
    """A gate metric's value in its unit."""
    unit = METRICS[name].unit if name in METRICS else ""
    if unit == "seconds":
        return format_seconds(v)
    if unit == "bytes":
        return format_bytes(v)
    if unit == "joules":
        return format_energy(v)
    if unit == "usd":
        return format_usd(v)
    if unit == "per_second":
        return format_qps(v)
    if unit == "cpu_seconds":
        return MISSING if v is None else f"{format_number(v, 2)} CPU-s"
    return MISSING if v is None else format_number(v, 3)


def print_inference(r: InferenceResult, out: TextIO) -> None:
    lg, res = r.loadgen, r.resources
    lat = lg.latency_seconds
    valid = lg.validity + (f" ({lg.invalid_reason})" if lg.invalid_reason else "")
    if lg.scenario == "server":
        held = {True: "held", False: "missed", None: MISSING}[lg.perf_constraints_met]
        valid += f"; latency bound {format_seconds(lg.target_latency_seconds)} {held}"
    rows = [
        ("target", r.target),
        ("scenario", f"{r.scenario} (MLCommons LoadGen, PerformanceOnly)"),
        ("run", res.run_id or MISSING),
        ("loadgen", f"{format_count(lg.query_count)} queries · {valid}"),
        (
            "throughput",
            f"{format_qps(lg.qps)} (LoadGen) · {format_qps(res.samples_per_second)} (ours)",
        ),
        (
            "latency",
            " · ".join(f"{k} {format_seconds(lat.get(k))}" for k in ("p50", "p90", "p99", "max")),
        ),
        (
            "cpu",
            f"{format_percent(res.cpu_utilization_mean)} of the allowed cores · "
            f"{format_number(res.cpu_seconds, 2)} CPU-s",
        ),
        (
            "gpu",
            f"{format_percent(res.gpu_utilization_mean)} · "
            f"{format_bytes(res.gpu_memory_peak_bytes)}",
        ),
        ("memory", f"peak RSS {format_bytes(res.peak_rss_bytes)}"),
        (
            "energy",
            f"{format_energy(res.energy_per_query_joules)} per query "
            f"({format_energy(res.energy_joules)} in all; {res.energy_method or 'unknown'})",
        ),
        ("cost", f"{format_usd(res.cost_per_1m_queries_usd)} per 1M queries"),
        ("carbon", f"{format_grams(res.carbon_per_1k_queries_g)} per 1k queries"),
    ]
    if r.search is not None:
        s = r.search
        tried = ", ".join(f"{t.target_qps:.4g}{'✓' if t.met else '✗'}" for t in s.steps)
        rows.append(
            (
                "server search",
                f"highest QPS meeting p99 ≤ {format_seconds(s.latency_bound_seconds)}: "
                f"{format_qps(s.best_qps)} (tried {tried})",
            )
        )
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        out.write(f"{k.ljust(width)}  {v}\n")
    for note in r.notes + res.assumptions:
        out.write(f"note: {note}\n")


def print_compare(c: CompareResult, out: TextIO) -> None:
    head = ["variant", "status", "p50", "p90", "throughput", "energy/query", "peak RSS",
            "model", "accuracy", "pareto"]  # fmt: skip
    rows = [
        [
            v.name,
            v.status,
            format_seconds(v.latency_p50_seconds),
            format_seconds(v.latency_p90_seconds),
            format_qps(v.samples_per_second),
            format_energy(v.energy_per_query_joules),
            format_bytes(v.peak_rss_bytes),
            format_bytes(v.model_bytes),
            format_percent(v.accuracy),
            "yes" if v.pareto else "",
        ]
        for v in c.variants
    ]
    out.write(
        f"{c.scenario}, {c.repetitions} interleaved repetition(s), medians "
        f"(Pareto: {c.pareto_axes[1]} against {c.pareto_axes[0]})\n"
    )
    out.write(table(head, rows) + "\n")
    for v in c.variants:
        if v.error:
            out.write(f"{v.name}: failed: {v.error}\n")
    methods = sorted({v.energy_method for v in c.variants if v.energy_method})
    for m in methods:
        out.write(f"energy: {m}\n")


def print_sweep(s: SweepResult, out: TextIO) -> None:
    names = list(s.params)
    head = [*names, "status", "throughput", "step p50", "peak RSS", "energy/sample"]
    rows = [
        [
            *(str(p.params.get(n)) for n in names),
            p.status,
            format_qps(p.samples_per_second),
            format_seconds(p.step_time_p50_seconds),
            format_bytes(p.peak_rss_bytes),
            format_energy(p.energy_per_sample_joules),
        ]
        for p in s.points
    ]
    limit = format_bytes(s.memory_limit_bytes) if s.memory_limit_bytes else "none"
    out.write(f"sweep of {s.target}, memory limit {limit}\n")
    out.write(table(head, rows) + "\n")

    def pts(ps: Sequence[dict[str, int | float | str]]) -> str:
        return "; ".join(", ".join(f"{k}={v}" for k, v in p.items()) for p in ps) or "none"

    out.write(
        f"knee (no later point gains {s.knee_gain:.0%} throughput): {pts(s.knee)}\n"
        f"out of memory from: {pts(s.out_of_memory_at)}\n"
    )
    for p in s.points:
        if p.error:
            out.write(f"{', '.join(f'{k}={v}' for k, v in p.params.items())}: {p.error}\n")


def print_check(r: CheckResult, out: TextIO) -> None:
    head = ["metric", "baseline", "current", "change", "limit", "test", "result"]
    rows = []
    for row in r.rows:
        change = MISSING if row.change is None else f"{row.change * 100:+.1f}%"
        test = row.test if row.p_value is None else f"{row.test} p={row.p_value:.2g}"
        rows.append(
            [
                row.metric,
                format_metric(row.metric, row.baseline),
                format_metric(row.metric, row.current),
                change,
                row.limit,
                test,
                row.status.upper() if row.status != "ok" else "ok",
            ]
        )
    out.write(f"{r.current or 'run'} against {r.baseline or 'baseline'}\n")
    out.write(table(head, rows) + "\n")
    if r.regressed:
        out.write(
            "regression: " + ", ".join(x.metric for x in r.rows if x.status == "regression") + "\n"
        )
    elif r.missing:
        out.write("cannot check: " + ", ".join(x.metric for x in r.rows if x.status == "missing")
                  + " missing on one side\n")  # fmt: skip
    else:
        out.write("within limits\n")
    for x in r.rows:
        if x.status == "incomparable":
            out.write(f"not compared: {x.metric} ({x.test})\n")
