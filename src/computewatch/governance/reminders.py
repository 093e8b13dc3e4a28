"""Reminders of open obligations as their deadline approaches: when opened, 7 days before,
1 day before, and once overdue, each sent once (remembered in the obligation's ``alerted``), as
alert events for the server's delivery (webhook, Slack, Alertmanager: ``[server]
budget_notify``)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from sqlalchemy import select
from sqlalchemy.orm import Session

from computewatch.alerts.event import FIRING, AlertEvent, fingerprint
from computewatch.serverdb.governance_models import Obligation
from computewatch.units import format_flop

STAGES: Final = (("opened", None), ("7d", 7 * 86_400.0), ("1d", 86_400.0), ("overdue", 0.0))
"""Each reminder and how long before the deadline it is due (None: at once)."""


@dataclass(frozen=True, slots=True)
class Reminder:
    obligation_id: int
    model: str
    tier: str
    trigger: str
    kind: str
    deadline_at: float
    judged_flop: float | None
    threshold: float


def due_reminders(session: Session, now: float) -> list[Reminder]:
    """The reminders due now for the open obligations with a deadline, the most urgent one per
    obligation (the lesser ones it passed are marked sent too). The caller commits."""
    out: list[Reminder] = []
    rows = session.scalars(select(Obligation).where(Obligation.state == "open"))
    for o in rows:
        if o.deadline_at is None:
            continue
        sent = set(filter(None, (o.alerted or "").split(",")))
        left = o.deadline_at - now
        due = [k for k, before in STAGES if before is None or left <= before]
        new = [k for k in due if k not in sent]
        if not new:
            continue
        o.alerted = ",".join([k for k, _ in STAGES if k in sent or k in due])
        out.append(Reminder(o.id, o.model, o.tier, o.trigger, new[-1], o.deadline_at,
                            o.judged_flop, o.threshold))  # fmt: skip
    return out


def reminder_events(reminders: Sequence[Reminder], now: float) -> list[AlertEvent]:
    events: list[AlertEvent] = []
    for r in reminders:
        deadline = dt.datetime.fromtimestamp(r.deadline_at, dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
        days = (r.deadline_at - now) / 86_400
        when = f"overdue by {-days:.1f} days" if days < 0 else f"{days:.1f} days left"
        what = "forecast to cross" if r.trigger == "forecast" else "crossed"
        labels = {
            "alertname": "ComputeObligationDue",
            "severity": "critical" if r.kind in ("1d", "overdue") else "warning",
            "model": r.model,
            "tier": r.tier,
            "obligation": str(r.obligation_id),
            "reminder": r.kind,
        }
        events.append(
            AlertEvent(
                rule="ComputeObligationDue",
                status=FIRING,
                severity=labels["severity"],
                labels=labels,
                summary=f"{r.model}: {what} {r.tier} ({format_flop(r.threshold)}); obligation "
                f"{r.obligation_id} due {deadline}, {when}",
                description="computewatch governance done ID --reference TEXT closes it "
                "(docs/governance.md)",
                value=days,
                detail=f"judged {format_flop(r.judged_flop)} (upper bound)",
                active_at=now,
                starts_at=now,
                ends_at=None,
                fingerprint=fingerprint(labels),
            )
        )
    return events
