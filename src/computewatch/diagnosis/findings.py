"""What a diagnosis rule reports: a :class:`Finding` with its evidence, the time its symptom
took (``at_stake``), what applying its suggestion would save (:class:`Saving`) and the
suggestion; how findings are ranked and how their savings combine (:func:`joint_saving`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import msgspec

from computewatch.analysis.summary_types import (
    AtStakeJson,
    EvidenceJson,
    FindingJson,
    JointSavingJson,
    SavingJson,
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
    "Saving",
    "Severity",
    "TimeRange",
    "at_stake_text",
    "joint_saving",
    "ranked",
    "saving_text",
    "severity_for",
    "span_text",
]

SEVERITIES: tuple[Severity, ...] = ("high", "medium", "low")

Number = float | int | str | None


class TimeRange(msgspec.Struct, frozen=True):
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


class AtStake(msgspec.Struct, frozen=True):
    """The symptom's own time: wall-clock seconds of the whole allocation during which the run
    showed it (waiting for data, one core saturated, steps above their median ...), and that
    time at the run's price (None without a price). An upper bound on what any fix can save,
    not a saving: :class:`Saving` is that."""

    seconds: float | None = None
    usd: float | None = None

    def as_dict(self) -> AtStakeJson:
        return {
            "seconds": None if self.seconds is None else round(self.seconds, 3),
            "usd": None if self.usd is None else round(self.usd, 6),
        }


SECONDS_PLACES = 4
"""Decimal places of a saving's seconds as written: those of the run's ``duration_seconds``
(computewatch.analysis.summary), so that rounding keeps a range that reaches the run's end
inside it (rounded to 3 places, 14.65384 s read 14.654 against a run of 14.6538 s)."""


class Saving(msgspec.Struct, frozen=True):
    """What applying a finding's suggestion is expected to save the run, from a model of the
    run (its phases, the cores it was allowed, overlap, Amdahl's law, the hardware's peak):
    ``seconds`` of wall-clock time of the whole allocation (between ``low_seconds`` and
    ``high_seconds``, from the run's own variation and the model's unknowns), the concrete
    ``fix`` with its parameters and what the model ``assumes``. ``part`` names the time the fix
    shortens (``loop``: the training loop's own time; ``steps``: slow steps; ``idle``: idle
    allocation ...) and ``part_seconds`` what the run spent on it; ``fraction``, ``usd`` and
    ``kwh`` are the seconds as a share of the run, at its price and its mean power."""

    seconds: float
    low_seconds: float
    high_seconds: float
    fix: str
    assumes: str
    part: str = "run"
    part_seconds: float | None = None
    fraction: float | None = None
    usd: float | None = None
    kwh: float | None = None

    @classmethod
    def nothing(cls, why: str, fix: str = "none", part: str = "run") -> Saving:
        """A symptom with nothing to win (said as such: ``why`` goes into ``assumes``)."""
        return cls(0.0, 0.0, 0.0, fix, why, part)

    def bounded(self, duration: float) -> Saving:
        """Clipped to ``[0, part_seconds]`` and the run's duration, the range around the
        estimate; ``fraction`` set from ``duration``."""
        cap = duration if duration > 0 else float("inf")
        if self.part_seconds is not None:
            cap = min(cap, max(self.part_seconds, 0.0))

        def clip(v: float) -> float:
            return min(max(v, 0.0), cap)

        sec = clip(self.seconds)
        low, high = clip(min(self.low_seconds, sec)), clip(max(self.high_seconds, sec))
        frac = sec / duration if duration > 0 else None
        return Saving(
            sec, low, high, self.fix, self.assumes, self.part, self.part_seconds, frac,
            self.usd, self.kwh,
        )  # fmt: skip

    def priced(self, usd_per_second: float | None, kwh_per_second: float | None) -> Saving:
        """With ``usd`` and ``kwh`` from the run's rates (None where a rate is unknown)."""
        return Saving(
            self.seconds, self.low_seconds, self.high_seconds, self.fix, self.assumes,
            self.part, self.part_seconds, self.fraction,
            None if usd_per_second is None else self.seconds * usd_per_second,
            None if kwh_per_second is None else self.seconds * kwh_per_second,
        )  # fmt: skip

    def as_dict(self) -> SavingJson:
        def r(v: float | None, nd: int = 3) -> float | None:
            return None if v is None else round(v, nd)

        return {
            "seconds": round(self.seconds, SECONDS_PLACES),
            "fraction": r(self.fraction, 4),
            "low_seconds": round(self.low_seconds, SECONDS_PLACES),
            "high_seconds": round(self.high_seconds, SECONDS_PLACES),
            "usd": r(self.usd, 6),
            "kwh": r(self.kwh, 9),
            "fix": self.fix,
            "assumes": self.assumes,
            "part": self.part,
            "part_seconds": r(self.part_seconds),
        }


class Evidence(msgspec.Struct, frozen=True):
    """What the rule saw: sentences quoting the numbers, the numbers themselves (SI units) and
    the stretches of the run they come from."""

    lines: tuple[str, ...]
    numbers: Mapping[str, Number] = msgspec.field(default_factory=dict)
    ranges: tuple[TimeRange, ...] = ()

    def as_dict(self) -> EvidenceJson:
        return {
            "lines": list(self.lines),
            "numbers": {k: _round(v) for k, v in self.numbers.items()},
            "time_ranges": [r.as_dict() for r in self.ranges],
        }


class Finding(msgspec.Struct, frozen=True):
    """One bottleneck: ``id`` names the rule (``data_starvation``, ``step_regression`` ...)."""

    id: str
    title: str
    severity: Severity
    at_stake: AtStake
    evidence: Evidence
    suggestion: str
    saving: Saving = msgspec.field(default_factory=lambda: Saving.nothing("no fix modelled"))

    def as_dict(self) -> FindingJson:
        return {
            "id": self.id,
            "title": self.title,
            "severity": self.severity,
            "saving": self.saving.as_dict(),
            "at_stake": self.at_stake.as_dict(),
            "evidence": self.evidence.as_dict(),
            "suggestion": self.suggestion,
        }


def severity_for(
    seconds: float | None, duration: float | None, *, high: float, medium: float
) -> Severity:
    """Severity from the share of the run's duration a fix would save."""
    if seconds is None or not duration or duration <= 0:
        return "low"
    share = seconds / duration
    if share >= high:
        return "high"
    if share >= medium:
        return "medium"
    return "low"


def ranked(findings: Iterable[Finding]) -> list[Finding]:
    """Most to win first: by the seconds the fix saves, then its money, then severity; a
    symptom with nothing to win comes after every finding with a saving, whatever its
    duration."""

    def key(f: Finding) -> tuple[float, float, int, str]:
        return (
            -f.saving.seconds,
            -(f.saving.usd or 0.0),
            SEVERITIES.index(f.severity),
            f.id,
        )

    return sorted(findings, key=key)


class JointSaving(msgspec.Struct, frozen=True):
    """Every fix applied together (:func:`joint_saving`)."""

    seconds: float
    low_seconds: float
    high_seconds: float
    fraction: float | None
    usd: float | None
    kwh: float | None
    findings: tuple[str, ...]

    def as_dict(self) -> JointSavingJson:
        return {
            "seconds": round(self.seconds, SECONDS_PLACES),
            "fraction": None if self.fraction is None else round(self.fraction, 4),
            "low_seconds": round(self.low_seconds, SECONDS_PLACES),
            "high_seconds": round(self.high_seconds, SECONDS_PLACES),
            "usd": None if self.usd is None else round(self.usd, 6),
            "kwh": None if self.kwh is None else round(self.kwh, 9),
            "findings": list(self.findings),
        }


def joint_saving(
    savings: Iterable[tuple[str, Saving]],
    duration: float,
    usd_per_second: float | None = None,
    kwh_per_second: float | None = None,
) -> JointSaving:
    """The savings of several fixes combined, never summed past what the run spent on the
    parts they change: findings on the same part (``loop``, ``steps`` ...) count their largest
    saving, at most the part's time; different parts compose as successive speed-ups, each
    shortening what the fixes before it left (the run keeps ``prod(1 - s_i / T)`` of its time
    ``T``), so the total is below every sum and below the run."""
    best: dict[str, tuple[float, float, float, str]] = {}
    for fid, s in savings:
        if s.seconds <= 0 and s.high_seconds <= 0:
            continue
        cap = duration if s.part_seconds is None else min(duration, s.part_seconds)
        cur = best.get(s.part)
        mid, low, high = min(s.seconds, cap), min(s.low_seconds, cap), min(s.high_seconds, cap)
        if cur is None or mid > cur[0]:
            best[s.part] = (mid, low, high, fid)
    if duration <= 0 or not best:
        return JointSaving(0.0, 0.0, 0.0, 0.0 if duration > 0 else None, None, None, ())

    def combine(values: Iterable[float]) -> float:
        kept = 1.0
        for v in values:
            kept *= 1.0 - min(max(v, 0.0), duration) / duration
        return duration * (1.0 - kept)

    parts = list(best.values())
    sec = combine(p[0] for p in parts)
    return JointSaving(
        sec,
        combine(p[1] for p in parts),
        combine(p[2] for p in parts),
        sec / duration,
        None if usd_per_second is None else sec * usd_per_second,
        None if kwh_per_second is None else sec * kwh_per_second,
        tuple(p[3] for p in sorted(parts, key=lambda p: -p[0])),
    )


def _round(v: Number) -> Number:
    if isinstance(v, float):
        return round(v, 6)
    return v


def at_stake_text(finding: FindingJson, duration: float | None = None) -> str:
    """What a finding's fix would win, as every view and tracker line writes it: ``saves
    4.7 s (26% of the run; 3.9-5.5 s), $0.42 with 2 loader workers`` or ``nothing to win
    (...)`` (:func:`saving_text`); a finding stored before savings existed keeps its old
    ``12.3 s (8% of the run), $0.42 at stake``; empty when nothing measurable is."""
    saving = finding.get("saving")
    if isinstance(saving, dict):
        return saving_text(saving, duration)
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


def saving_text(saving: SavingJson | JointSavingJson, duration: float | None = None) -> str:
    """``saves 4.7 s (26% of the run; 3.9-5.5 s), $0.42 with 2 loader workers``; ``nothing
    to win`` for a zero saving; read defensively (a stored one may lack fields)."""
    seconds = saving.get("seconds")
    if not isinstance(seconds, int | float):
        return ""
    high = saving.get("high_seconds")
    fix = saving.get("fix") if "fix" in saving else None
    if seconds <= 0 and not (isinstance(high, int | float) and high > 0):
        return "nothing to win"
    share = ""
    if duration:
        share = f"{format_percent(seconds / duration, 0)} of the run"
    low = saving.get("low_seconds")
    if isinstance(low, int | float) and isinstance(high, int | float):
        span = f"{format_seconds(low)}-{format_seconds(high)}"
        share = f"{share}; {span}" if share else span
    text = f"saves {format_seconds(seconds)}" + (f" ({share})" if share else "")
    usd = saving.get("usd")
    if isinstance(usd, int | float):
        text += f", {format_usd(usd)}"
    if isinstance(fix, str) and fix and fix != "none":
        text += f" with {fix}"
    return text
