"""Rule evaluation with Prometheus's alert states: pending, firing, resolved.

Each tick, a rule's condition gives the series for which it holds. A series newly true becomes
*pending*; once it has been true for the rule's ``for`` duration (at once when ``for`` is 0) it
is *firing*; when it is no longer true a firing alert is *resolved* and a pending one is dropped
without notice. Only changes are reported (firing, resolved), once per alert identity: the rule
name plus the alert's labels. A rule that raises is skipped for that tick and reported once;
the others go on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from computewatch.alerts.budget import Pricing
from computewatch.alerts.detectors import Detector, make_detector
from computewatch.alerts.event import FIRING, RESOLVED, AlertEvent, fingerprint
from computewatch.alerts.expr import History, InstantSamples, evaluate, range_names
from computewatch.alerts.rules import Rule, RuleSet, render
from computewatch.metrics.model import MetricSample
from computewatch.readings import Labels

__all__ = ["Engine"]

RESOLVED_RETENTION_S = 900.0  # resolved alerts kept for re-sending, as Prometheus does (15 m)


@dataclass
class _State:
    labels: dict[str, str]
    active_at: float
    value: float
    detail: str = ""
    fired_at: float | None = None
    resolved_at: float | None = None
    event: AlertEvent | None = None  # the last event sent (kept for re-sending)


@dataclass
class _Compiled:
    rule: Rule
    detector: Detector | None = None
    states: dict[Labels, _State] = field(default_factory=dict)


class Engine:
    """Evaluates a rule set over each tick's samples and returns the changes of state."""

    def __init__(self, rules: RuleSet, *, pricing: Pricing | None = None) -> None:
        self.rules = rules
        self.compiled: list[_Compiled] = []
        names: dict[str, float] = {}
        for r in rules.rules:
            det = make_detector(r.detector, r.params, pricing) if r.detector else None
            self.compiled.append(_Compiled(r, det))
            if r.condition is not None:
                for n, w in range_names(r.condition).items():
                    names[n] = max(names.get(n, 0.0), w)
        keep = max(names.values(), default=0.0)
        self.history = History(frozenset(names), keep)
        self.errors: list[str] = []  # one line per rule that failed, once each
        self._failed: set[str] = set()

    def evaluate(self, now: float, samples: Sequence[MetricSample]) -> list[AlertEvent]:
        """Advance every rule to ``now``; the alerts that fired or resolved at this tick."""
        self.history.record(now, samples)
        tick = InstantSamples(now, samples, self.history)
        events: list[AlertEvent] = []
        for c in self.compiled:
            try:
                hits = self._hits(c, tick)
            except Exception as e:  # a rule's bug must not stop the others or the sampler
                if c.rule.name not in self._failed:
                    self._failed.add(c.rule.name)
                    self.errors.append(f"rule {c.rule.name} failed: {type(e).__name__}: {e}")
                continue
            events.extend(self._advance(c, now, hits))
        return events

    def _hits(self, c: _Compiled, tick: InstantSamples) -> dict[Labels, tuple[float, str]]:
        if c.detector is not None:
            return c.detector.evaluate(tick)
        assert c.rule.condition is not None
        return {k: (v, "") for k, v in evaluate(c.rule.condition, tick).items()}

    def _advance(
        self, c: _Compiled, now: float, hits: dict[Labels, tuple[float, str]]
    ) -> list[AlertEvent]:
        rule = c.rule
        out: list[AlertEvent] = []
        for key, (value, detail) in sorted(hits.items()):
            st = c.states.get(key)
            if st is None or st.resolved_at is not None:
                st = c.states[key] = _State(_alert_labels(rule, key), now, value, detail)
            st.value, st.detail = value, detail
            if st.fired_at is None and now - st.active_at >= rule.for_seconds:
                st.fired_at = now
                st.event = self._event(rule, st, FIRING)
                out.append(st.event)
        for key in sorted(k for k in c.states if k not in hits):
            st = c.states[key]
            if st.resolved_at is not None:
                if now - st.resolved_at > RESOLVED_RETENTION_S:
                    del c.states[key]
                continue
            if st.fired_at is None:  # pending that did not last: dropped, nothing was sent
                del c.states[key]
                continue
            st.resolved_at = now
            st.event = self._event(rule, st, RESOLVED)
            out.append(st.event)
        return out

    def _event(self, rule: Rule, st: _State, status: str) -> AlertEvent:
        threshold = rule.condition.threshold if rule.condition is not None else None
        kw: dict[str, Any] = {
            "name": rule.name,
            "severity": rule.severity,
            "threshold": threshold,
            "for_seconds": rule.for_seconds,
            "detail": st.detail,
        }
        summary = _safe_render(rule.message, st.labels, st.value, kw)
        desc = _safe_render(rule.description, st.labels, st.value, kw) if rule.description else ""
        assert st.fired_at is not None
        return AlertEvent(
            rule=rule.name,
            status=status,
            severity=rule.severity,
            labels=st.labels,
            summary=summary,
            description=desc,
            value=st.value,
            detail=st.detail,
            active_at=st.active_at,
            starts_at=st.fired_at,
            ends_at=st.resolved_at,
            fingerprint=fingerprint(st.labels),
        )

    def current(self) -> list[AlertEvent]:
        """Firing alerts and those resolved in the last 15 minutes, for re-sending."""
        out = []
        for c in self.compiled:
            for st in c.states.values():
                if st.event is not None:
                    out.append(st.event)
        return out

    def firing(self) -> list[AlertEvent]:
        return [e for e in self.current() if e.status == FIRING]

    def pending(self) -> list[tuple[str, Mapping[str, str]]]:
        """(rule, labels) of the alerts waiting out their ``for`` duration."""
        return [
            (c.rule.name, st.labels)
            for c in self.compiled
            for st in c.states.values()
            if st.fired_at is None
        ]


def _safe_render(tmpl: str, labels: Mapping[str, str], value: float, kw: dict[str, Any]) -> str:
    try:
        return render(tmpl, labels, value, **kw)
    except (ValueError, TypeError, KeyError, IndexError):
        return f"{tmpl} (value {value:g})"


def _alert_labels(rule: Rule, series: Labels) -> dict[str, str]:
    labels = {k: v for k, v in series if v != "" and k != "__name__"}
    labels.update(rule.labels)
    labels["alertname"] = rule.name
    labels["severity"] = rule.severity
    return dict(sorted(labels.items()))
