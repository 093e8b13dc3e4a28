"""The diagnosis rules, one module per family, and the helpers they share. Each rule is a function
``(RunData, Thresholds) -> list[Finding]`` that raises
:class:`~computewatch.diagnosis.loader.NotApplicable` when the run lacks what it looks at.
The registry of every rule is :func:`computewatch.diagnosis.engine.all_rules`, so that this
package, which the rule modules import, imports none of them."""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from computewatch.config.thresholds import Thresholds
from computewatch.diagnosis.findings import (
    AtStake,
    Evidence,
    Finding,
    Saving,
    Severity,
    severity_for,
)
from computewatch.diagnosis.loader import RunData
from computewatch.units import format_percent

Rule = Callable[[RunData, Thresholds], list[Finding]]


def build(
    data: RunData,
    th: Thresholds,
    *,
    id: str,
    title: str,
    seconds: float | None,
    evidence: Evidence,
    suggestion: str,
    saving: Saving,
    usd: float | None = None,
    severity: Severity | None = None,
    keep_small: bool = False,
) -> list[Finding]:
    """One finding as a list (empty when its symptom took less than ``min_seconds_at_stake``,
    unless ``keep_small``: a finding whose worth is not time, such as memory headroom).
    ``seconds`` is the symptom's time (``at_stake``); ``saving`` what the fix would win,
    clipped to the run and priced here, its range then widened by the run's own variation
    (:meth:`RunData.step_noise`). The severity follows the saving's share of the run:
    a symptom with nothing to win is ``low``."""
    if not keep_small and (seconds is None or seconds < th.min_seconds_at_stake):
        return []
    if seconds is not None and seconds >= 0:  # never more than the symptom's own time
        part = saving.part_seconds
        saving = msgspec.structs.replace(
            saving, part_seconds=seconds if part is None else min(part, seconds)
        )
    won = saving.bounded(data.duration).priced(data.usd_per_second, data.kwh_per_second)
    noise = data.step_noise()
    if noise > 0 and won.seconds > 0:
        # The run's own variation: a rerun of the fixed job differs by as much, so a measured
        # saving may fall that far outside the model's range (even above the part it shortens).
        won = msgspec.structs.replace(
            won,
            low_seconds=max(won.low_seconds - noise, 0.0),
            high_seconds=min(won.high_seconds + noise, max(data.duration, won.high_seconds)),
        )
    sev = severity or severity_for(
        won.seconds, data.duration, high=th.severity_high, medium=th.severity_medium
    )
    if won.seconds <= 0:
        sev = "low"
    stake = AtStake(seconds=seconds, usd=usd if usd is not None else data.usd(seconds))
    return [Finding(id, title, sev, stake, evidence, suggestion, won)]


def pct(v: float) -> str:
    """Whole percents, as the findings' evidence reads (``37%``)."""
    return format_percent(v, 0)
