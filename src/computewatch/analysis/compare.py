"""Two run summaries side by side, with absolute and relative differences."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NotRequired, TypedDict

from computewatch.analysis.repro import RecordChange, record_changes
from computewatch.analysis.summary_types import RunSummary

COMPARED: tuple[tuple[str, str], ...] = (
    ("status", ""),
    ("exit_code", ""),
    ("duration_seconds", "seconds"),
    ("cpu.seconds_total", "seconds"),
    ("cpu.utilization_mean", "ratio"),
    ("cpu.utilization_max", "ratio"),
    ("memory.peak_rss_bytes", "bytes"),
    ("memory.peak_host_used_bytes", "bytes"),
    ("disk.read_bytes", "bytes"),
    ("disk.write_bytes", "bytes"),
    ("network.recv_bytes", "bytes"),
    ("network.sent_bytes", "bytes"),
    ("steps.count", "count"),
    ("steps.step_time_seconds.mean", "seconds"),
    ("steps.step_time_seconds.p50", "seconds"),
    ("steps.step_time_seconds.p90", "seconds"),
    ("steps.step_time_seconds.p99", "seconds"),
    ("steps.steps_per_second", "per_second"),
    ("steps.samples_per_second", "per_second"),
    ("steps.tokens_per_second", "per_second"),
    ("energy.facility.value", "kWh"),
    ("energy.device.value", "kWh"),
    ("carbon.total.value", "gCO2e"),
    ("cost.total.value", "USD"),
    ("cost.per_unit.usd_per_step", "USD"),
    ("cost.per_unit.usd_per_1k_samples", "USD"),
    ("cost.per_unit.usd_per_1m_tokens", "USD"),
    ("flops.value", "FLOP"),
)


class RunRef(TypedDict):
    id: str | None
    name: str | None


class ComparedField(TypedDict):
    field: str  # a dotted path into the summary, e.g. ``cpu.utilization_mean``
    unit: str
    a: Any  # the summaries' values: numbers, or text for ``status``
    b: Any
    difference: float | None
    ratio: float | None


class Comparison(TypedDict):
    schema_version: int
    a: RunRef
    b: RunRef
    fields: list[ComparedField]
    config: NotRequired[list[RecordChange]]  # hyperparameters that differ (analysis/repro.py)
    environment: NotRequired[list[RecordChange]]  # code, software, hardware that differ


def lookup(summary: Mapping[str, Any], path: str) -> Any:
    """The value at a dotted ``path`` in a summary (None where any part is missing)."""
    cur: Any = summary
    for part in path.split("."):
        if not isinstance(cur, dict):
            return None
        cur = cur.get(part)
    return cur


def compare(a: RunSummary, b: RunSummary) -> Comparison:
    """``{"a": id, "b": id, "fields": [{field, unit, a, b, difference, ratio}]}``; the
    difference is b − a and the ratio b / a, where both are numbers."""
    rows: list[ComparedField] = []
    for path, unit in COMPARED:
        va, vb = lookup(a, path), lookup(b, path)
        if va is None and vb is None:
            continue
        diff = ratio = None
        numeric = isinstance(va, int | float) and isinstance(vb, int | float)
        if numeric and not isinstance(va, bool):
            diff = vb - va
            ratio = vb / va if va else None
        rows.append(
            {"field": path, "unit": unit, "a": va, "b": vb, "difference": diff, "ratio": ratio}
        )
    out: Comparison = {
        "schema_version": 1,
        "a": {"id": a.get("id"), "name": a.get("name")},
        "b": {"id": b.get("id"), "name": b.get("name")},
        "fields": rows,
    }
    # the reproducibility records, where recorded (analysis/repro.py)
    if "config" in a or "config" in b:
        out["config"] = record_changes(a.get("config") or {}, b.get("config") or {}, "config")
    if "environment" in a or "environment" in b:
        ea: Mapping[str, Any] = a.get("environment") or {}
        eb: Mapping[str, Any] = b.get("environment") or {}
        out["environment"] = record_changes(ea, eb, "environment")
    return out
