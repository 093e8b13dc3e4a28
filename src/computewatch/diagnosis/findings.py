"""What a diagnosis rule reports: a :class:`Finding` with its evidence, what is at stake and a
suggestion, and how findings are ranked."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from computewatch.analysis.summary_types import (
    AtStakeJson,
    EvidenceJson,
    FindingJson,
    Severity,
    TimeRangeJson,
)
from computewatch.units import format_percent, format_seconds, format_usd

__all__ = [
    "SEVERITIES",
    "AtStake",
    "Evidence",
    "Finding",
    "Number",
    "Severity",
    "TimeRange",
    "at_stake_text",
    "ranked",
    "severity_for",
    "span_text",
]

SEVERITIES: tuple[Severity, ...] = ("high", "medium", "low")

Number = float | int | str | None


@dataclass(frozen=True, slots=True)
class TimeRange:
    """A stretch of the run, in seconds from its start."""

    start: float
    end: float

    @property
    def seconds(self) -> float:
        return max(self.end - self.start, 0.0)

    def as_dict(self) -> TimeRangeJson:
        return {"start_seconds": round(self.start, 3), "end_seconds": round(self.end, 3)}

    def text(self) -> str:
        return span_text(self.start, self.end)


def span_text(start: float, end: float) -> str:
    """A stretch of the run as the evidence and the views write it: ``1,200.0-1,830.5 s``."""
    return f"{start:,.1f}-{end:,.1f} s"


@dataclass(frozen=True, slots=True)
class AtStake:
    """Time and money a finding costs the run. ``seconds`` is wall-clock time of the whole
    allocation that would be saved if the cause went away (an upper bound where the cause
    cannot be fully removed); ``usd`` is that time at the run's price, None without a price."""

    seconds: float | None = None
    usd: float | None = None

    def as_dict(self) -> AtStakeJson:
        return {
            "seconds": None if self.seconds is None else round(self.seconds, 3),
            "usd": None if self.usd is None else round(self.usd, 6),
        }


@dataclass(frozen=True, slots=True)
class Evidence:
    """What the rule saw: sentences quoting the numbers, the numbers themselves (SI units) and
    the stretches of the run they come from."""

    lines: tuple[str, ...]
    numbers: Mapping[str, Number] = field(default_factory=dict)
    ranges: tuple[TimeRange, ...] = ()

    def as_dict(self) -> EvidenceJson:
        return {
            "lines": list(self.lines),
            "numbers": {k: _round(v) for k, v in self.numbers.items()},
            "time_ranges": [r.as_dict() for r in self.ranges],
        }


@dataclass(frozen=True, slots=True)
class Finding:
    """One bottleneck: ``id`` names the rule (``data_starvation``, ``step_regression`` ...)."""

    id: str
    title: str
    severity: Severity
    at_stake: AtStake
    evidence: Evidence
    suggestion: str

    def as_dict(self) -> FindingJson:
        return {
            "id": self.id,
            "title": self.title,
            "severity": self.severity,
            "at_stake": self.at_stake.as_dict(),
            "evidence": self.evidence.as_dict(),
            "suggestion": self.suggestion,
        }


def severity_for(
    seconds: float | None, duration: float | None, *, high: float, medium: float
) -> Severity:
    """Severity from the share of the run's duration at stake."""
    if seconds is None or not duration or duration <= 0:
        return "low"
    share = seconds / duration
    if share >= high:
        return "high"
    if share >= medium:
        return "medium"
    return "low"


def ranked(findings: Iterable[Finding]) -> list[Finding]:
    """Most at stake first: money where priced (it is time at the run's rate, so the order is
    the same as by time), then time, then severity; findings with nothing measurable at stake
    (an opportunity such as memory headroom) come last."""

    def key(f: Finding) -> tuple[float, float, int, str]:
        return (
            -(f.at_stake.usd or 0.0),
            -(f.at_stake.seconds or 0.0),
            SEVERITIES.index(f.severity),
            f.id,
        )

    return sorted(findings, key=key)


def _round(v: Number) -> Number:
    if isinstance(v, float):
        return round(v, 6)
    return v


def at_stake_text(finding: FindingJson, duration: float | None = None) -> str:
    """``12.3 s (8% of the run), $0.42 at stake``; empty when nothing measurable is."""
    stake: AtStakeJson | None = finding.get("at_stake")
    if not isinstance(stake, dict):
        stake = {"seconds": None, "usd": None}
    parts = []
    seconds = stake.get("seconds")
    if isinstance(seconds, int | float):
        share = f" ({format_percent(seconds / duration, 0)} of the run)" if duration else ""
        parts.append(f"{format_seconds(seconds)}{share}")
    usd = stake.get("usd")
    if isinstance(usd, int | float):
        parts.append(format_usd(usd))
    return ", ".join(parts) + " at stake" if parts else ""
