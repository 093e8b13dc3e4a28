"""Text lines for the summary's phases, ranks and requests sections (``computewatch show``)."""

from __future__ import annotations

from computewatch.analysis.summary_types import PhaseStats, RankStats, RequestStats, RunSummary
from computewatch.records import Figure
from computewatch.units import format_kwh, format_percent, format_seconds, format_usd

MAX_PHASES_SHOWN = 8
MAX_RANKS_SHOWN = 16


def _energy(f: Figure) -> str:
    return f"{format_kwh(f['value'])} {f.get('method')}"


def _usd(f: Figure) -> str:
    return f"{format_usd(f['value'])} {f.get('method')}"


def steps_lines(summary: RunSummary) -> list[tuple[str, str]]:
    """(label, text) rows for the phases, ranks and requests sections present in ``summary``."""
    return [
        *phase_lines(summary.get("phases")),
        *rank_lines(summary.get("ranks")),
        *request_lines(summary.get("requests")),
    ]


def phase_lines(ph: PhaseStats | None) -> list[tuple[str, str]]:
    """Each phase's self share of the step time (nested ones say where they ran) and its
    per-step median, then the unaccounted share."""
    if not ph or not ph.get("by_name"):
        return []
    parts = []
    items = list(ph["by_name"].items())
    for name, p in items[:MAX_PHASES_SHOWN]:
        text = f"{name} {format_percent(p.get('share'))}"
        if p.get("within"):
            text += f" (in {p['within']})"
        text += f" p50 {format_seconds((p.get('per_step_seconds') or {}).get('p50'))}/step"
        if p.get("accel_seconds") is not None:
            text += f", accelerator {format_seconds(p['accel_seconds'])}"
        parts.append(text)
    if len(items) > MAX_PHASES_SHOWN:
        parts.append(f"{len(items) - MAX_PHASES_SHOWN} more")
    un = ph.get("unaccounted") or {}
    parts.append(f"unaccounted {format_percent(un.get('share'))}")
    return [("phases", " · ".join(parts))]


def rank_lines(rk: RankStats | None) -> list[tuple[str, str]]:
    """The distributed run in one line, then one line per rank."""
    if not rk:
        return []
    rows = rk.get("ranks") or []
    slowest = next((r for r in rows if r["rank"] == rk.get("slowest_rank")), None)
    head = [f"{rk['count']} ranks"]
    if slowest is not None:
        head.append(
            f"slowest rank {slowest['rank']} "
            f"(compute {format_seconds(slowest.get('compute_seconds_per_step'))}/step)"
        )
    head.append(f"load imbalance {format_percent(rk.get('load_imbalance'))}")
    head.append(f"comm {format_percent(rk.get('comm_share'))} of step time")
    out = [("ranks", " · ".join(head))]
    for r in rows[:MAX_RANKS_SHOWN]:
        st = r.get("step_time_seconds") or {}
        out.append(
            (
                f"rank {r['rank']}",
                f"{r['steps']} steps · step p50 {format_seconds(st.get('p50'))}, "
                f"p90 {format_seconds(st.get('p90'))} · "
                f"compute {format_seconds(r.get('compute_seconds_per_step'))}/step · "
                f"comm {format_seconds(r.get('comm_seconds'))} "
                f"({format_percent(r.get('comm_share'))})",
            )
        )
    if len(rows) > MAX_RANKS_SHOWN:
        out.append(("ranks", f"{len(rows) - MAX_RANKS_SHOWN} more ranks: see --json"))
    return out


def request_lines(rq: RequestStats | None) -> list[tuple[str, str]]:
    """Counts, latency percentiles and rates; then energy and cost per request and per 1M
    tokens where accounted."""
    if not rq:
        return []
    lat = rq.get("latency_seconds") or {}
    bits = [f"{rq['count']} requests, {rq['errors']} errors"]
    bits.append(
        f"latency p50 {format_seconds(lat.get('p50'))}, p90 {format_seconds(lat.get('p90'))}, "
        f"p99 {format_seconds(lat.get('p99'))}, max {format_seconds(lat.get('max'))}"
    )
    if rq.get("requests_per_second") is not None:
        bits.append(f"{rq['requests_per_second']:,.2f} requests/s")
    if rq.get("tokens_per_second") is not None:
        bits.append(f"{rq['tokens_per_second']:,.1f} tokens/s out")
    out = [("requests", " · ".join(bits))]
    for label, energy, cost in (
        ("per request", rq.get("energy_per_request"), rq.get("cost_per_request")),
        ("per 1M tokens", rq.get("energy_per_1m_tokens"), rq.get("cost_per_1m_tokens")),
    ):
        per = [
            f"{what} {fmt(f)}"
            for what, fmt, f in (("energy", _energy, energy), ("cost", _usd, cost))
            if f is not None and f["value"] is not None
        ]
        if per:
            out.append((label, " · ".join(per)))
    return out
