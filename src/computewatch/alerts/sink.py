"""The alerts sink: evaluates the rules after every tick and hands changes to the targets.

Built alike for ``computewatch run --alerts`` and the agent by :func:`sink_from_args`.
``on_metrics`` runs on the sampling thread: it evaluates the rules (cheap: a pass over one
tick's samples), queues changes for each target and returns; delivery happens on the targets'
own threads. It never raises: a failure is written once to ``out`` and sampling goes on.
"""

from __future__ import annotations

import math
import socket
import threading
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, TextIO

from computewatch.alerts.budget import NoPriceError, Pricing, pricing_from_config
from computewatch.alerts.engine import Engine
from computewatch.alerts.event import AlertEvent
from computewatch.alerts.notify import (
    Delivery,
    Target,
    alertmanager_payload,
    parse_target,
    post_json,
    slack_payload,
    terminal_lines,
    webhook_payload,
    write_lines,
)
from computewatch.alerts.rules import AlertsError, Rule, builtin_rules, load_rules
from computewatch.config import Config, ConfigError, load_config
from computewatch.metrics.model import MetricSample

__all__ = ["AlertSink", "budget_rules", "sink_from_args"]

RESEND_INTERVAL_S = 60.0  # Prometheus's default --rules.alert.resend-delay
TERMINAL_QUEUE = 1024  # terminal lines are cheap: keep them all unless the output is stuck
VALID_FOR_FACTOR = 4  # a firing alert sent to Alertmanager lasts 4 resends (as Prometheus)


class AlertSink:
    """A :class:`~computewatch.metrics.model.MetricsSink` that evaluates alert rules."""

    def __init__(
        self,
        engine: Engine,
        targets: Sequence[Target],
        *,
        out: TextIO,
        resend_interval: float = RESEND_INTERVAL_S,
        http_timeout: float = 10.0,
        attempts: int = 6,
        backoff: float = 1.0,
        max_backoff: float = 60.0,
        queue_size: int = 64,
        generator_url: str | None = None,
    ) -> None:
        self.engine = engine
        self.targets = tuple(targets)
        self.out = out
        self.resend_interval = resend_interval
        self.generator_url = generator_url or f"computewatch://{socket.gethostname()}/alerts"
        self._write_lock = threading.Lock()
        self._reported = 0
        self._failed = False
        self._last_resend: float | None = None
        self.deliveries: list[tuple[Target, Delivery]] = []
        for t in self.targets:
            send = self._sender(t, http_timeout)
            d = Delivery(
                str(t),
                send,
                warn=self._warn,
                queue_size=max(queue_size, TERMINAL_QUEUE) if t.kind == "terminal" else queue_size,
                attempts=1 if t.kind == "terminal" else attempts,
                backoff=backoff,
                max_backoff=max_backoff,
            )
            self.deliveries.append((t, d))

    def _sender(self, t: Target, timeout: float) -> Callable[[Any], None]:
        if t.kind == "terminal":
            return lambda events: self._write(terminal_lines(events))
        if t.kind == "slack":
            return lambda events: post_json(t.url, slack_payload(events), timeout)
        if t.kind == "alertmanager":
            url = f"{t.url}/api/v2/alerts"
            return lambda alerts: post_json(url, alerts, timeout)
        return lambda events: post_json(t.url, webhook_payload(events), timeout)

    def _write(self, lines: Sequence[str]) -> None:
        with self._write_lock:
            write_lines(self.out, lines)

    def _warn(self, message: str) -> None:
        self._write([f"computewatch: alerts: {message}"])

    def on_metrics(self, now: float, samples: Sequence[MetricSample]) -> None:
        """Evaluate the rules at ``now`` (wall seconds) and queue the changes; never raises."""
        try:
            events = self.engine.evaluate(now, samples)
            for line in self.engine.errors[self._reported :]:
                self._warn(line)
            self._reported = len(self.engine.errors)
            resend = self._last_resend is None or now - self._last_resend >= self.resend_interval
            if resend:
                self._last_resend = now
            for t, d in self.deliveries:
                if t.kind == "alertmanager":
                    batch = self.engine.current() if resend else events
                    if batch:
                        d.submit(self._am(batch, now))
                elif events:
                    d.submit(events)
        except Exception as e:  # the monitor never takes the job down
            if not self._failed:
                self._failed = True
                self._warn(f"evaluation failed, alerts may be missing: {type(e).__name__}: {e}")

    def _am(self, events: Sequence[AlertEvent], now: float) -> list[dict[str, object]]:
        return alertmanager_payload(
            events,
            now=now,
            valid_for=VALID_FOR_FACTOR * self.resend_interval,
            generator_url=self.generator_url,
        )

    def close(self) -> None:
        """Deliver what is queued (a few seconds at most per target) and stop the threads."""
        for _, d in self.deliveries:
            d.close()


def budget_rules(budget_usd: float | None, budget_kwh: float | None) -> list[Rule]:
    """The rules ``--budget-usd`` and ``--budget-kwh`` add (AlertsError for a bad amount)."""
    out: list[Rule] = []
    for flag, amount in (("--budget-usd", budget_usd), ("--budget-kwh", budget_kwh)):
        if amount is not None and not (math.isfinite(amount) and amount > 0):
            raise AlertsError(f"{flag} must be a positive number, not {amount:g}")
    if budget_kwh is not None:
        out.append(
            Rule(
                name="JobEnergyBudgetExceeded",
                severity="warning",
                detector="energy_budget",
                params={"kwh": budget_kwh},
                message="{labels.job}: energy budget exceeded: {value:.4g} kWh ({detail})",
                origin="--budget-kwh",
            )
        )
    if budget_usd is not None:
        out.append(
            Rule(
                name="JobCostBudgetExceeded",
                severity="warning",
                detector="cost_budget",
                params={"usd": budget_usd},
                message="{labels.job}: cost budget exceeded: ${value:.2f} ({detail})",
                origin="--budget-usd",
            )
        )
    return out


def sink_from_args(
    rules_path: str | None,
    *,
    notify: list[str],
    budget_usd: float | None,
    budget_kwh: float | None,
    out: TextIO,
    config: Config | None = None,
    dmi_root: str = "/sys/class/dmi/id",
) -> AlertSink:
    """The sink for ``--alerts FILE`` (None: the built-in pack only), ``--notify TARGET``...,
    ``--budget-usd`` and ``--budget-kwh``. Targets are the ``--notify`` ones plus the file's
    ``receivers``; with none, the terminal. ``config`` (default: the configuration file) gives
    the prices a cost budget uses. Raises :class:`AlertsError` (``RulesError`` for the file)."""
    rules = load_rules(rules_path) if rules_path is not None else builtin_rules()
    extra = budget_rules(budget_usd, budget_kwh)
    if extra:
        names = {r.name for r in extra}
        rules = replace(rules, rules=(*(r for r in rules.rules if r.name not in names), *extra))
    targets: list[Target] = []
    for spec in [*notify, *rules.receivers]:
        try:
            t = parse_target(spec)
        except ValueError as e:
            raise AlertsError(f"--notify: {e}") from None
        if t not in targets:
            targets.append(t)
    if not targets:
        targets.append(Target("terminal"))
    pricing: Pricing | None = None
    if any(r.detector == "cost_budget" for r in rules.rules):
        try:
            cfg = config if config is not None else load_config()
            pricing = pricing_from_config(cfg, dmi_root=dmi_root)
        except ConfigError as e:
            raise AlertsError(str(e)) from None
        except NoPriceError as e:
            raise AlertsError(f"cost budget: {e}") from None
    return AlertSink(Engine(rules, pricing=pricing), targets, out=out)
