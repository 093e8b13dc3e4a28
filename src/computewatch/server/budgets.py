"""Budgets: how much of a team's or project's monthly (or weekly) allowance is used, where the
period is heading, and the alerts when it crosses a threshold.

A budget caps one quantity per calendar period (UTC): GPU-hours, kWh (facility energy, as the
runs' accounting reports it) or money (USD). What counts towards a period is the sum of that
quantity over the runs of the team or project that *started* in it (a run that straddles the
boundary counts whole in the period it started: the server holds each run's totals, not their
split by hour). A running run counts with what it has used up to its latest upload.

The forecast is a straight line: the usage so far divided by the time elapsed in the period,
times the period's length (``used x period / elapsed``). It assumes the rest of the period runs
at the average rate so far; during the first hour of a period there is too little to go on, and
no forecast is made.

Alerts: each threshold (a fraction of the amount, e.g. 0.8 and 1.0) and "forecast over the
amount" is one alert kind. When an evaluation finds a kind crossed that was not yet delivered in
this period, it is claimed in a :class:`SentLog` (the server database's
``budget_alerts_sent``, :class:`DbSentLog`) and delivered once through the alert targets of
``computewatch.alerts`` (webhook, Slack, Alertmanager): the next evaluation, another server
process or a restarted server do not send it again.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Final, Protocol, TextIO

from sqlalchemy.orm import Session

from computewatch.alerts.event import FIRING, AlertEvent, fingerprint
from computewatch.alerts.notify import (
    Delivery,
    Target,
    alertmanager_payload,
    post_json,
    slack_payload,
    webhook_payload,
    write_lines,
)
from computewatch.errors import UsageError
from computewatch.serverdb.budget_alerts import claim_alert
from computewatch.serverdb.budgets import BudgetInfo, list_budgets
from computewatch.serverdb.engine import Database
from computewatch.serverdb.queries import usage
from computewatch.units import format_kwh, format_number, format_usd

__all__ = [
    "FORECAST",
    "METRICS",
    "MIN_FORECAST_ELAPSED_S",
    "PERIODS",
    "SCOPES",
    "BudgetAlert",
    "BudgetEvaluator",
    "BudgetNotifier",
    "BudgetSpec",
    "BudgetStatus",
    "DbSentLog",
    "MemorySentLog",
    "SentLog",
    "alert_event",
    "budget_statuses",
    "crossed",
    "due_alerts",
    "format_amount",
    "period_bounds",
    "spec_of",
    "status",
]

METRICS: Final = ("gpu_hours", "kwh", "cost")
"""What a budget caps: GPU-hours, facility kWh, or USD."""
PERIODS: Final = ("month", "week")
SCOPES: Final = ("team", "project")
FORECAST: Final = "forecast"
"""The alert kind for "the forecast at the period's end is over the amount"."""
MIN_FORECAST_ELAPSED_S: Final = 3600.0
"""No forecast before an hour of the period has passed: a few minutes say nothing of a month."""
DEFAULT_THRESHOLDS: Final = (0.8, 1.0)
METHOD: Final = (
    "usage: the sum over the runs that started in the period (UTC); forecast: linear, "
    "usage so far x period length / time elapsed"
)

log = logging.getLogger("computewatch.server")


@dataclass(frozen=True, slots=True)
class BudgetSpec:
    """One budget as stored (serverdb's ``budgets`` row)."""

    id: int
    scope_kind: str  # team or project
    scope_name: str
    metric: str  # gpu_hours, kwh or cost
    amount: float
    period: str  # month or week
    thresholds: tuple[float, ...] = DEFAULT_THRESHOLDS


def spec_of(b: BudgetInfo) -> BudgetSpec:
    """The stored budget (``serverdb.budgets``) as this module reads it."""
    return BudgetSpec(
        b.id, b.scope_kind, b.scope_name, b.metric, b.amount, b.period, tuple(b.thresholds)
    )


def period_bounds(period: str, at: float) -> tuple[float, float]:
    """The UTC calendar period (``month`` or ``week`` from Monday) holding ``at``: its start
    and end in Unix seconds."""
    day = dt.datetime.fromtimestamp(at, dt.UTC)
    if period == "month":
        start = day.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        nxt = start.replace(year=start.year + 1, month=1) if start.month == 12 else (
            start.replace(month=start.month + 1)
        )  # fmt: skip
    elif period == "week":
        start = (day - dt.timedelta(days=day.weekday())).replace(
            hour=0, minute=0, second=0, microsecond=0
        )
        nxt = start + dt.timedelta(days=7)
    else:
        raise UsageError(f"budget period must be one of {', '.join(PERIODS)}, not {period!r}")
    return start.timestamp(), nxt.timestamp()


@dataclass(frozen=True, slots=True)
class BudgetStatus:
    """A budget at one moment: what is used, the share, the forecast and what it crossed."""

    budget: BudgetSpec
    period_start: float
    period_end: float
    at: float
    used: float
    fraction: float
    """``used / amount`` (may exceed 1)."""
    forecast: float | None
    """Linear forecast of the usage at the period's end; None in the period's first hour."""
    forecast_fraction: float | None
    crossed: tuple[str, ...]
    """Alert kinds crossed now: thresholds as text (``"0.8"``), and :data:`FORECAST`."""
    method: str = METHOD

    @property
    def elapsed_fraction(self) -> float:
        """How much of the period has passed (0-1)."""
        span = self.period_end - self.period_start
        return min(max((self.at - self.period_start) / span, 0.0), 1.0)


def status(budget: BudgetSpec, used: float, at: float) -> BudgetStatus:
    """``budget``'s state at ``at`` given ``used`` (the period's usage so far)."""
    start, end = period_bounds(budget.period, at)
    elapsed = at - start
    forecast: float | None = None
    if elapsed >= MIN_FORECAST_ELAPSED_S:
        forecast = used * (end - start) / elapsed
    fraction = used / budget.amount
    ff = forecast / budget.amount if forecast is not None else None
    return BudgetStatus(
        budget=budget,
        period_start=start,
        period_end=end,
        at=at,
        used=used,
        fraction=fraction,
        forecast=forecast,
        forecast_fraction=ff,
        crossed=crossed(budget.thresholds, fraction, ff),
    )


def _threshold_key(t: float) -> str:
    return format(t, "g")


def crossed(
    thresholds: Sequence[float], fraction: float, forecast_fraction: float | None
) -> tuple[str, ...]:
    """The alert kinds a usage ``fraction`` (and forecast) has reached."""
    out = [_threshold_key(t) for t in sorted(thresholds) if fraction >= t]
    if forecast_fraction is not None and forecast_fraction > 1.0 and fraction < 1.0:
        out.append(FORECAST)  # once over 100%, the 1.0 threshold says more than the forecast
    return tuple(out)


def format_amount(metric: str, v: float | None) -> str:
    """A budget quantity as people read it ("n/a" when unknown)."""
    if v is None:
        return "n/a"
    if metric == "kwh":
        return format_kwh(v)
    if metric == "cost":
        return format_usd(v)
    if abs(v) < 10:
        return f"{v:.3g} GPU-h"
    return f"{format_number(v)} GPU-h"


# -- alerts --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BudgetAlert:
    """One budget alert to deliver: a kind crossed in a period."""

    status: BudgetStatus
    kind: str


def _scope_label(b: BudgetSpec) -> str:
    return f"{b.scope_kind} {b.scope_name}"


def alert_event(a: BudgetAlert) -> AlertEvent:
    """The alert as the notifiers send it (the webhook payload's ``alerts`` items)."""
    s = a.status
    b = s.budget
    period = dt.datetime.fromtimestamp(s.period_start, dt.UTC)
    period_text = f"{period:%Y-%m}" if b.period == "month" else f"week of {period:%Y-%m-%d}"
    used = format_amount(b.metric, s.used)
    amount = format_amount(b.metric, b.amount)
    if a.kind == FORECAST:
        rule = "BudgetForecastOver"
        severity = "warning"
        summary = (
            f"{_scope_label(b)}: {b.metric} budget forecast over for {period_text}: "
            f"{format_amount(b.metric, s.forecast)} by the period's end of {amount} "
            f"({used} used so far)"
        )
        value = s.forecast_fraction if s.forecast_fraction is not None else math.nan
    else:
        rule = "BudgetThresholdReached"
        severity = "critical" if float(a.kind) >= 1.0 else "warning"
        summary = (
            f"{_scope_label(b)}: {b.metric} budget {float(a.kind):.0%} reached for "
            f"{period_text}: {used} of {amount} ({s.fraction:.0%})"
        )
        value = s.fraction
    labels = {
        "alertname": rule,
        "severity": severity,
        "budget_id": str(b.id),
        "scope_kind": b.scope_kind,
        "scope": b.scope_name,
        b.scope_kind: b.scope_name,
        "metric": b.metric,
        "period": b.period,
        "period_start": period.strftime("%Y-%m-%d"),
        "threshold": a.kind,
    }
    return AlertEvent(
        rule=rule,
        status=FIRING,
        severity=severity,
        labels=labels,
        summary=summary,
        description=s.method,
        value=value,
        detail=f"{used} of {amount}, forecast {format_amount(b.metric, s.forecast)}",
        active_at=s.at,
        starts_at=s.at,
        ends_at=None,
        fingerprint=fingerprint(labels),
    )


class SentLog(Protocol):
    """Remembers which budget alerts were delivered: ``claim`` returns True exactly once per
    (budget, period start, kind), across evaluations and server processes."""

    def claim(self, budget_id: int, period_start: float, kind: str) -> bool: ...


class MemorySentLog:
    """A :class:`SentLog` in this process's memory (tests, a single process)."""

    def __init__(self) -> None:
        self._seen: set[tuple[int, float, str]] = set()
        self._lock = threading.Lock()

    def claim(self, budget_id: int, period_start: float, kind: str) -> bool:
        key = (budget_id, period_start, kind)
        with self._lock:
            if key in self._seen:
                return False
            self._seen.add(key)
            return True


class DbSentLog:
    """A :class:`SentLog` in the server database (``budget_alerts_sent``): shared by every
    server process on it and kept across restarts."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def claim(self, budget_id: int, period_start: float, kind: str) -> bool:
        with self.db.writing(), self.db.session() as session:
            return claim_alert(session, budget_id, period_start, kind)


def due_alerts(statuses: Iterable[BudgetStatus], sent: SentLog) -> list[BudgetAlert]:
    """The alerts of ``statuses`` not delivered yet in their period, claimed in ``sent``."""
    out: list[BudgetAlert] = []
    for s in statuses:
        for kind in s.crossed:
            if sent.claim(s.budget.id, s.period_start, kind):
                out.append(BudgetAlert(s, kind))
    return out


class BudgetNotifier:
    """Delivers budget alerts to the targets, each on its own thread with retries
    (:class:`computewatch.alerts.notify.Delivery`); ``notify`` never blocks."""

    def __init__(
        self,
        targets: Sequence[Target],
        *,
        out: TextIO | None = None,
        generator_url: str = "computewatch://server/budgets",
        http_timeout: float = 10.0,
        attempts: int = 6,
        backoff: float = 1.0,
        valid_for: float = 7 * 86400.0,
    ) -> None:
        self.out = out if out is not None else sys.stderr
        self.generator_url = generator_url
        self.valid_for = valid_for
        self.deliveries: list[tuple[Target, Delivery]] = []
        for t in targets:
            self.deliveries.append(
                (
                    t,
                    Delivery(
                        f"budgets {t}",
                        self._sender(t, http_timeout),
                        warn=self._warn,
                        attempts=1 if t.kind == "terminal" else attempts,
                        backoff=backoff,
                    ),
                )
            )

    def _sender(self, t: Target, timeout: float) -> Callable[[object], None]:
        def send(item: object) -> None:
            events = [e for e in item if isinstance(e, AlertEvent)] if isinstance(
                item, list
            ) else []  # fmt: skip
            if t.kind == "terminal":
                write_lines(self.out, [f"budget alert: {e.summary}" for e in events])
            elif t.kind == "slack":
                post_json(t.url, slack_payload(events), timeout)
            elif t.kind == "alertmanager":
                now = max(e.starts_at for e in events)
                doc = alertmanager_payload(
                    events, now=now, valid_for=self.valid_for, generator_url=self.generator_url
                )
                post_json(f"{t.url}/api/v2/alerts", doc, timeout)
            else:
                post_json(t.url, webhook_payload(events), timeout)

        return send

    def _warn(self, message: str) -> None:
        write_lines(self.out, [f"computewatch: budgets: {message}"])

    def notify(self, alerts: Sequence[BudgetAlert]) -> None:
        """Queue ``alerts`` (one batch per target) and return."""
        self.send_events([alert_event(a) for a in alerts])

    def send_events(self, events: Sequence[AlertEvent]) -> None:
        """Queue any of the server's alert events (budgets', governance's obligation reminders)
        to every target, one batch per target, and return."""
        if not events:
            return
        for _, d in self.deliveries:
            d.submit(list(events))

    def close(self, timeout: float = 5.0) -> None:
        for _, d in self.deliveries:
            d.close(timeout)


# -- evaluation in the server ------------------------------------------------------------------


def budget_statuses(
    session: Session, budgets: Iterable[BudgetSpec], at: float
) -> list[BudgetStatus]:
    """The state of each budget at ``at``: its period's usage read by
    :func:`computewatch.serverdb.queries.usage` over the runs of its team or project (every
    team's runs: a budget is the organisation's, whoever reads it)."""
    out: list[BudgetStatus] = []
    cache: dict[tuple[str, float, float], dict[str | None, tuple[float, float, float]]] = {}
    for b in budgets:
        start, end = period_bounds(b.period, at)
        key = (b.scope_kind, start, end)
        if key not in cache:
            rows = usage(session, by=b.scope_kind, teams=None, since=start, until=end)
            cache[key] = {
                r.key: (
                    r.gpu_hours.value or 0.0,
                    r.kwh.value or 0.0,
                    r.cost_usd.value or 0.0,
                )
                for r in rows
            }
        gpu_h, kwh, usd = cache[key].get(b.scope_name, (0.0, 0.0, 0.0))
        used = {"gpu_hours": gpu_h, "kwh": kwh, "cost": usd}.get(b.metric, 0.0)
        out.append(status(b, used, at))
    return out


class BudgetEvaluator:
    """Checks every budget each ``interval`` seconds on a thread of the server process and
    hands the alerts due to a :class:`BudgetNotifier`. Never raises: a failed evaluation is
    logged and tried again at the next interval."""

    def __init__(
        self,
        db: Database,
        notifier: BudgetNotifier,
        *,
        interval: float = 60.0,
        sent: SentLog | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.db = db
        self.notifier = notifier
        self.interval = interval
        self.sent: SentLog = sent if sent is not None else DbSentLog(db)
        self.clock = clock
        self.evaluations = 0
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def evaluate(self) -> list[BudgetAlert]:
        """One evaluation now: the alerts it queued."""
        with self.db.session() as session:
            specs = [spec_of(b) for b in list_budgets(session)]
            statuses = budget_statuses(session, specs, self.clock())
        alerts = due_alerts(statuses, self.sent)
        self.notifier.notify(alerts)
        self.evaluations += 1
        return alerts

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="computewatch-budgets", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            try:
                self.evaluate()
            except Exception as e:  # the database is away, a bad row: try again later
                log.warning("budgets: evaluation failed: %s: %s", type(e).__name__, e)
            self._wake.wait(self.interval)
            self._wake.clear()
            if self._stop.is_set():
                return

    def wake(self) -> None:
        """Evaluate now rather than at the next interval (a budget was created)."""
        self._wake.set()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.notifier.close()
