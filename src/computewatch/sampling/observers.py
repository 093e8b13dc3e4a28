"""Observers: code that watches a run's ticks as they happen (a Prometheus endpoint, alert
rules), without touching the store.

The sampler hands every observer each tick's readings once; an observer that raises is
reported once and dropped, never the sampler. Observers run on the sampler's thread, so
``on_tick`` must be quick: hand slow work (network delivery) to a thread of its own.
"""

from __future__ import annotations

from typing import Any, Protocol

import msgspec

from computewatch.analysis.summary_types import RunSummary
from computewatch.readings import Reading
from computewatch.records import StepRecord


class RunInfo(msgspec.Struct, frozen=True):
    """What an observer knows of the run it watches."""

    run_id: str
    name: str | None
    tags: dict[str, str]
    command: list[str]
    started_at: float
    facts: dict[str, Any] = msgspec.field(default_factory=dict)


class SamplerTick(msgspec.Struct, frozen=True):
    """One sampler tick as run observers see it: its readings and the step records that
    arrived since the previous tick."""

    seq: int
    mono: float
    wall: float
    readings: list[Reading]
    steps: list[StepRecord]


class RunObserver(Protocol):
    def start(self, run: RunInfo) -> None:
        """Called once, before the first tick."""

    def on_tick(self, tick: SamplerTick) -> None:
        """Called after every tick; must not block."""

    def finish(self, status: str, summary: RunSummary | None) -> None:
        """Called once when the run has ended (its summary is stored by then)."""
