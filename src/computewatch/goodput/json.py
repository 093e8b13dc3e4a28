"""The JSON form of a goodput report (``computewatch goodput --json``, the server's
``/api/v1/goodput``): its field names are a contract (docs/diagnosis.md, "Goodput")."""

from __future__ import annotations

from typing import TypedDict

from computewatch.goodput.model import BADPUT, Breakdown, GoodputReport, RunGoodput

__all__ = ["BreakdownJson", "CheckpointJson", "GoodputJson", "RunGoodputJson", "report_json"]


class BreakdownJson(TypedDict):
    """Seconds, share of the total, GPU-hours, kWh and USD (null where unknown)."""

    seconds: float
    fraction: float | None
    gpu_hours: float | None
    kwh: float | None
    usd: float | None


class RunGoodputJson(TypedDict):
    run_id: str
    name: str | None
    status: str
    started_at: float
    ended_at: float
    total_seconds: float
    start_step: int | None
    last_step: int | None
    last_checkpoint_step: int | None
    redone_from_step: int | None
    goodput: BreakdownJson
    badput: dict[str, BreakdownJson]


class CheckpointJson(TypedDict):
    checkpoint_seconds: float | None
    mtbf_seconds: float | None
    failures: int
    interval_seconds: float | None
    current_interval_seconds: float | None
    saving_seconds: float | None
    saving_fraction: float | None
    how: str


class GoodputJson(TypedDict):
    key: str
    runs: list[RunGoodputJson]
    total_seconds: float
    goodput: BreakdownJson
    badput: dict[str, BreakdownJson]
    checkpoint: CheckpointJson
    notes: list[str]


def _r(v: float | None, nd: int = 6) -> float | None:
    return None if v is None else round(v, nd)


def breakdown_json(b: Breakdown) -> BreakdownJson:
    return {
        "seconds": round(b.seconds, 6),
        "fraction": _r(b.fraction),
        "gpu_hours": _r(b.gpu_hours, 9),
        "kwh": _r(b.kwh, 9),
        "usd": _r(b.usd),
    }


def _run_breakdown(seconds: float, p: RunGoodput, total: float, gap: bool = False) -> BreakdownJson:
    r = p.run
    per = r.seconds if r.seconds > 0 else None
    return breakdown_json(
        Breakdown(
            seconds,
            seconds / total if total > 0 else None,
            None if gap else seconds * r.gpu_count / 3600,
            None if gap or r.kwh is None or per is None else seconds * r.kwh / per,
            None if gap or r.usd is None or per is None else seconds * r.usd / per,
        )
    )


def run_json(p: RunGoodput) -> RunGoodputJson:
    r = p.run
    total = p.total_seconds
    return {
        "run_id": r.run_id,
        "name": r.name,
        "status": r.status,
        "started_at": r.started_at,
        "ended_at": r.ended_at,
        "total_seconds": round(total, 6),
        "start_step": r.start_step,
        "last_step": r.last_step,
        "last_checkpoint_step": r.last_checkpoint_step,
        "redone_from_step": p.redone_from_step,
        "goodput": _run_breakdown(p.productive_seconds, p, total),
        "badput": {
            c: _run_breakdown(p.badput[c], p, total, gap=c == "restart_gap") for c in BADPUT
        },
    }


def report_json(report: GoodputReport) -> GoodputJson:
    ck = report.checkpoint
    return {
        "key": report.key,
        "runs": [run_json(p) for p in report.runs],
        "total_seconds": round(report.total_seconds, 6),
        "goodput": breakdown_json(report.goodput),
        "badput": {c: breakdown_json(report.badput[c]) for c in BADPUT},
        "checkpoint": {
            "checkpoint_seconds": _r(ck.checkpoint_seconds),
            "mtbf_seconds": _r(ck.mtbf_seconds),
            "failures": ck.failures,
            "interval_seconds": _r(ck.interval_seconds),
            "current_interval_seconds": _r(ck.current_interval_seconds),
            "saving_seconds": _r(ck.saving_seconds),
            "saving_fraction": _r(ck.saving_fraction),
            "how": ck.why,
        },
        "notes": list(report.notes),
    }
