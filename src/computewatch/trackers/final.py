"""The end of a run as trackers take it: the accounting's figures with how each was obtained,
and the diagnosis' top findings."""

from __future__ import annotations

import datetime as dt
from typing import Any

from computewatch.analysis.summary_types import RunSummary
from computewatch.diagnosis.findings import at_stake_text
from computewatch.records import Figure
from computewatch.trackers.base import FinalRecord

__all__ = ["TOP_FINDINGS", "final_record", "source_name"]

TOP_FINDINGS = 3
"""How many of the diagnosis' findings (most at stake first) a tracker gets."""


def _figure(metrics: dict[str, float], tags: dict[str, str], key: str, fig: Any) -> None:
    if not isinstance(fig, dict) or fig.get("value") is None:
        return
    f: Figure = fig  # type: ignore[assignment]  # the summary's Figure, read back from JSON
    metrics[f"computewatch/{key}"] = float(f["value"])  # type: ignore[arg-type]
    for end in ("low", "high"):
        v = f.get(end)
        if v is not None:
            metrics[f"computewatch/{key}_{end}"] = float(v)  # type: ignore[arg-type]
    tags[f"computewatch.{key}.method"] = str(f.get("method"))
    if f.get("source"):
        tags[f"computewatch.{key}.source"] = str(f["source"])[:250]


def final_record(summary: RunSummary | None, status: str) -> FinalRecord:
    """The accounting (kWh at the facility, gCO2e, USD, FLOPs, MFU) with method, source and
    range, the run's duration and steps, and the top findings as one line each."""
    metrics: dict[str, float] = {}
    tags: dict[str, str] = {"computewatch.status": status}
    findings: list[str] = []
    if summary is None:
        return FinalRecord(metrics, tags, findings, status)
    record = _record_fields(summary)
    tags["computewatch.run_id"] = summary["id"]
    if summary.get("duration_seconds") is not None:
        metrics["computewatch/duration_seconds"] = float(summary["duration_seconds"] or 0.0)
    steps = summary.get("steps") or {}
    if steps.get("count"):
        metrics["computewatch/steps"] = float(steps["count"])
    energy = summary.get("energy")
    if energy is not None:
        _figure(metrics, tags, "energy_kwh", energy.get("facility"))
        pue = energy.get("pue")
        if pue:
            metrics["computewatch/pue"] = float(pue["value"])
    carbon = summary.get("carbon")
    if carbon is not None:
        _figure(metrics, tags, "co2e_grams", carbon.get("total"))
        intensity = carbon.get("intensity")
        if intensity:
            metrics["computewatch/grid_gco2e_per_kwh"] = float(intensity["g_per_kwh"])
            tags["computewatch.region"] = str(intensity.get("region"))
    cost = summary.get("cost")
    if cost is not None:
        _figure(metrics, tags, "cost_usd", cost.get("total"))
    flops = summary.get("flops")
    if flops is not None:
        _figure(metrics, tags, "flops", flops)
        _figure(metrics, tags, "mfu_run", flops.get("mfu"))
    gpu_seconds = sum(1 for _ in summary.get("gpus") or []) * float(
        summary.get("duration_seconds") or 0.0
    )
    if gpu_seconds:
        metrics["computewatch/gpu_hours"] = gpu_seconds / 3600.0
    diagnosis = summary.get("diagnosis")
    duration = summary.get("duration_seconds")
    for f in ((diagnosis.get("findings") if diagnosis else None) or [])[:TOP_FINDINGS]:
        if isinstance(f, dict):
            stake = at_stake_text(f, duration if isinstance(duration, int | float) else None)
            extra = f" — {stake}" if stake else ""
            findings.append(f"[{f.get('severity')}] {f.get('title')}{extra}: {f.get('suggestion')}")
    for i, line in enumerate(findings, 1):
        tags[f"computewatch.finding.{i}"] = line[:500]
    return FinalRecord(metrics, tags, findings, status, **record)


def _unix(text: object) -> float | None:
    if not isinstance(text, str):
        return None
    try:
        return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def source_name(argv: list[str]) -> str | None:
    """The program a command line runs: its first ``.py`` word (``python train.py``), else
    its first word."""
    return next((a for a in argv if a.endswith(".py")), argv[0] if argv else None)


def _record_fields(summary: RunSummary) -> dict[str, Any]:
    """The reproducibility record's part of the end: config, commit, program, diff, times."""
    out: dict[str, Any] = {
        "started": _unix(summary.get("started_at")),
        "ended": _unix(summary.get("ended_at")),
    }
    config = summary.get("config")
    if isinstance(config, dict):
        out["config"] = dict(config)
    env = summary.get("environment")
    argv = (env.get("argv") if isinstance(env, dict) else None) or summary.get("command")
    if isinstance(argv, list):
        out["source_name"] = source_name([str(a) for a in argv])
    git = env.get("git") if isinstance(env, dict) else None
    if isinstance(git, dict):
        commit, diff = git.get("commit"), git.get("diff")
        out["git_commit"] = commit if isinstance(commit, str) else None
        out["diff"] = diff if isinstance(diff, str) and diff else None
    return out
