"""An alert at a change of state, as the engine reports it and the notifiers send it.

Kept apart from the engine so that the notifiers (which the rules parser imports to check
receivers) can read events without importing the engine.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, replace

from computewatch.analysis.common import iso

__all__ = ["FIRING", "RESOLVED", "AlertEvent", "fingerprint", "with_ends_at"]

FIRING = "firing"
RESOLVED = "resolved"


@dataclass(frozen=True, slots=True)
class AlertEvent:
    """An alert at a change of state (or re-sent to Alertmanager); times are wall seconds."""

    rule: str
    status: str  # FIRING or RESOLVED
    severity: str
    labels: Mapping[str, str]  # alertname, severity, the series' labels and the rule's labels
    summary: str  # the rendered message
    description: str
    value: float
    detail: str
    active_at: float  # when the condition first held (pending began)
    starts_at: float  # when it fired
    ends_at: float | None  # when it resolved
    fingerprint: str

    def to_json(self) -> dict[str, object]:
        """The alert as it appears in the webhook payload (docs/alerts.md)."""
        return {
            "status": self.status,
            "rule": self.rule,
            "severity": self.severity,
            "labels": dict(self.labels),
            "annotations": _annotations(self),
            "value": self.value if math.isfinite(self.value) else None,
            "startsAt": iso(self.starts_at),
            "endsAt": iso(self.ends_at) if self.ends_at is not None else None,
            "fingerprint": self.fingerprint,
        }


def _annotations(e: AlertEvent) -> dict[str, str]:
    out = {"summary": e.summary}
    if e.description:
        out["description"] = e.description
    if e.detail:
        out["detail"] = e.detail
    return out


def fingerprint(labels: Mapping[str, str]) -> str:
    """A stable id of an alert identity: its labels (alertname included)."""
    text = json.dumps(sorted(labels.items()), separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def with_ends_at(e: AlertEvent, ends_at: float) -> AlertEvent:
    return replace(e, ends_at=ends_at)
