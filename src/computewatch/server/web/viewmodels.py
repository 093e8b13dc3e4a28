"""The typed records the page templates read: a running run and a node of the Now page, a line
of the runs list, and the uploaded series as the chart builder takes them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from computewatch.server.web.charts import SeriesData
from computewatch.server.web.figures import gpu_hours_text, gpus_text, iso_minute, run_label
from computewatch.serverdb.queries import RunRow, SeriesRow
from computewatch.units import format_duration, format_kwh, format_percent, format_usd

__all__ = ["Node", "NowRun", "NowView", "RunLine", "run_line", "series_data"]


@dataclass(frozen=True)
class NowRun:
    """A running run on the Now page."""

    id: str
    label: str
    command: str
    team: str
    user: str
    project: str
    host: str
    gpus: str
    """How many GPUs (``2 x``), the model apart (:attr:`gpu_model`)."""
    gpu_model: str
    utilization: str
    power: str
    energy: str
    cost: str
    duration: str
    """How long it has run at the page's rendering (``H:MM:SS``); the page's script ticks it."""
    since: str
    """When it started, Unix seconds (the page's clock counts from it)."""
    started: str
    """When it started, ISO 8601 UTC."""
    idle: str


@dataclass(frozen=True)
class Node:
    """A node that runs something now."""

    host: str
    runs: int
    gpus: int
    models: str
    power: str
    idle_gpus: int


@dataclass(frozen=True)
class NowView:
    cards: list[tuple[str, str, str]]
    runs: list[NowRun]
    nodes: list[Node]
    idle_threshold: str
    at: str


@dataclass(frozen=True)
class RunLine:
    """A run in the runs list."""

    id: str
    label: str
    team: str
    user: str
    project: str
    status: str
    started: str
    duration: str
    gpus: str
    """How many GPUs (``2 x``), the model apart (:attr:`gpu_model`)."""
    gpu_model: str
    gpu_hours: str
    utilization: str
    energy: str
    cost: str
    tags: list[tuple[str, str]]


def run_line(r: RunRow) -> RunLine:
    return RunLine(
        id=r.id,
        label=run_label(r),
        team=r.team,
        user=r.user,
        project=r.project or "",
        status=r.status,
        started=iso_minute(r.started_at),
        duration=format_duration(r.duration_seconds),
        gpus=f"{r.gpu_count} x" if r.gpu_count > 0 and r.gpu_model else gpus_text(r),
        gpu_model=(r.gpu_model or "") if r.gpu_count > 0 else "",
        gpu_hours=gpu_hours_text(r.gpu_hours),
        utilization=format_percent(r.gpu_utilization),
        energy=format_kwh(r.kwh),
        cost=format_usd(r.cost_usd),
        tags=sorted(r.tags.items()),
    )


def series_data(rows: Sequence[SeriesRow]) -> list[SeriesData]:
    """Stored series as the chart builders (:mod:`computewatch.server.web.charts`) take them."""
    return [SeriesData(s.name, s.labels, s.bucket_seconds, s.points) for s in rows]
