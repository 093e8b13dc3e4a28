"""The exported view of readings: samples under their Prometheus names and labels.

The agent and ``computewatch run --prometheus`` produce these; the ``/metrics`` endpoint renders
them, and alert rules are evaluated over them, so a rule reads the same names and labels in
``computewatch run --alerts``, in the agent and in Prometheus.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from computewatch.readings import Labels

DEFAULT_LISTEN = "127.0.0.1:9464"
"""Where the agent serves ``/metrics`` unless told otherwise: loopback only."""

GROUPINGS = ("job", "user", "team", "gpu-model")
"""How a fleet report can group jobs."""


@dataclass(frozen=True, slots=True)
class MetricSample:
    """One exported value: ``name`` is the full Prometheus name (``_total`` for counters)."""

    name: str
    labels: Labels  # sorted (key, value) pairs, the same type as a reading's
    value: float

    def label(self, key: str, default: str = "") -> str:
        for k, v in self.labels:
            if k == key:
                return v
        return default


class MetricsSink(Protocol):
    """Takes each evaluation's exported samples: the ``/metrics`` endpoint, alert rules."""

    def on_metrics(self, now: float, samples: Sequence[MetricSample]) -> None:
        """``now``: wall-clock seconds. Called on the sampling thread: must not block."""

    def close(self) -> None:
        """Stop (flush pending notifications, close sockets)."""
