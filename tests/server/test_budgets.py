"""Budget arithmetic (period bounds, progress, linear forecast, crossed thresholds) and the
delivery of budget alerts to a real local webhook receiver, once per period."""

from __future__ import annotations

import datetime as dt
import io
from pathlib import Path

import pytest
from tests.conftest import Receiver

from computewatch.alerts.notify import Target
from computewatch.errors import UsageError
from computewatch.server.budgets import (
    FORECAST,
    MIN_FORECAST_ELAPSED_S,
    BudgetNotifier,
    BudgetSpec,
    DbSentLog,
    MemorySentLog,
    alert_event,
    crossed,
    due_alerts,
    format_amount,
    period_bounds,
    status,
)


def ts(y: int, mo: int, d: int, h: int = 0, mi: int = 0) -> float:
    return dt.datetime(y, mo, d, h, mi, tzinfo=dt.UTC).timestamp()


def test_month_bounds() -> None:
    assert period_bounds("month", ts(2026, 11, 30, 12)) == (ts(2026, 11, 1), ts(2026, 12, 1))
    assert period_bounds("month", ts(2026, 12, 31, 23, 59)) == (ts(2026, 12, 1), ts(2027, 1, 1))
    assert period_bounds("month", ts(2026, 12, 1)) == (ts(2026, 12, 1), ts(2027, 1, 1))


def test_week_bounds_start_on_monday() -> None:
    # 2026-11-30 is a Monday
    assert period_bounds("week", ts(2026, 12, 3, 8)) == (ts(2026, 11, 30), ts(2026, 12, 7))
    assert period_bounds("week", ts(2026, 11, 30)) == (ts(2026, 11, 30), ts(2026, 12, 7))
    with pytest.raises(UsageError, match="period"):
        period_bounds("year", 0.0)


def test_progress_and_linear_forecast() -> None:
    b = BudgetSpec(1, "team", "ml", "gpu_hours", 300.0, "month", (0.8, 1.0))
    # November has 30 days; after 10 days, 90 GPU-h used: 270 by the end at that rate.
    s = status(b, 90.0, ts(2026, 11, 11))
    assert s.fraction == pytest.approx(0.3)
    assert s.forecast == pytest.approx(270.0)
    assert s.forecast_fraction == pytest.approx(0.9)
    assert s.elapsed_fraction == pytest.approx(1 / 3)
    assert s.crossed == ()
    s = status(b, 120.0, ts(2026, 11, 11))  # 360 forecast: over
    assert s.crossed == (FORECAST,)
    s = status(b, 250.0, ts(2026, 11, 21))
    assert s.crossed == ("0.8", FORECAST)
    s = status(b, 301.0, ts(2026, 11, 29))
    assert s.crossed == ("0.8", "1")  # over 100%: the forecast says nothing more


def test_no_forecast_in_the_first_hour() -> None:
    b = BudgetSpec(1, "project", "llm", "kwh", 10.0, "month")
    s = status(b, 5.0, ts(2026, 11, 1) + MIN_FORECAST_ELAPSED_S - 1)
    assert s.forecast is None and s.forecast_fraction is None
    assert s.crossed == ()
    assert status(b, 5.0, ts(2026, 11, 1) + MIN_FORECAST_ELAPSED_S).forecast is not None


def test_crossed_thresholds() -> None:
    assert crossed([1.0, 0.5], 0.5, None) == ("0.5",)
    assert crossed([0.5, 1.0], 1.2, 3.0) == ("0.5", "1")
    assert crossed([0.9], 0.1, 1.01) == (FORECAST,)
    assert crossed([0.9], 0.1, 1.0) == ()


def test_format_amount() -> None:
    assert format_amount("gpu_hours", 12.5) == "12.5 GPU-h"
    assert format_amount("gpu_hours", 0.01234) == "0.0123 GPU-h"
    assert format_amount("cost", None) == "n/a"
    assert "kWh" in format_amount("kwh", 3.0)
    assert "$" in format_amount("cost", 3.0) or "USD" in format_amount("cost", 3.0)


def test_each_alert_once_per_period() -> None:
    b = BudgetSpec(7, "team", "ml", "cost", 1000.0, "month", (0.8, 1.0))
    sent = MemorySentLog()
    first = due_alerts([status(b, 850.0, ts(2026, 11, 25))], sent)
    assert [a.kind for a in first] == ["0.8", FORECAST]
    assert due_alerts([status(b, 900.0, ts(2026, 11, 26))], sent) == []
    later = due_alerts([status(b, 1001.0, ts(2026, 11, 28))], sent)
    assert [a.kind for a in later] == ["1"]
    # A new period: the same kinds are due again.
    again = due_alerts([status(b, 900.0, ts(2026, 12, 28))], sent)  # 1,033 forecast
    assert [a.kind for a in again] == ["0.8", FORECAST]


def test_alert_event_labels_and_text() -> None:
    b = BudgetSpec(3, "project", "<llm>", "gpu_hours", 100.0, "month", (0.8,))
    s = status(b, 85.0, ts(2026, 11, 20))
    e = alert_event(due_alerts([s], MemorySentLog())[0])
    assert e.rule == "BudgetThresholdReached"
    assert e.labels["project"] == "<llm>" and e.labels["budget_id"] == "3"
    assert e.labels["period_start"] == "2026-11-01"
    assert "80% reached for 2026-11" in e.summary
    assert "85.0 GPU-h of 100.0 GPU-h" in e.summary
    assert e.value == pytest.approx(0.85)


def test_delivered_to_a_webhook_and_slack(receiver: Receiver) -> None:
    out = io.StringIO()
    n = BudgetNotifier(
        [Target("webhook", receiver.url + "/hook"), Target("slack", receiver.url + "/slack")],
        out=out,
    )
    b = BudgetSpec(1, "team", "ml", "kwh", 10.0, "month", (0.8, 1.0))
    n.notify(due_alerts([status(b, 12.0, ts(2026, 11, 20))], MemorySentLog()))
    receiver.wait(lambda r: len(r.bodies) == 2)
    n.close()
    by_path = dict(zip(receiver.paths, receiver.bodies, strict=True))
    hook = by_path["/hook"]
    assert hook["source"] == "computewatch" and hook["status"] == "firing"
    assert [a["labels"]["threshold"] for a in hook["alerts"]] == ["0.8", "1"]
    assert "team ml: kwh budget 100% reached" in by_path["/slack"]["text"]
    assert out.getvalue() == ""


def test_failed_delivery_warns_once_and_never_raises() -> None:
    out = io.StringIO()
    n = BudgetNotifier([Target("webhook", "http://127.0.0.1:9/none")], out=out, attempts=1)
    b = BudgetSpec(1, "team", "ml", "kwh", 10.0, "month", (0.8,))
    n.notify(due_alerts([status(b, 9.0, ts(2026, 11, 20))], MemorySentLog()))
    n.close()
    assert "delivery failed" in out.getvalue()


def test_delivered_to_alertmanager(receiver: Receiver) -> None:
    n = BudgetNotifier([Target("alertmanager", receiver.url)], out=io.StringIO())
    b = BudgetSpec(4, "project", "llm", "cost", 100.0, "week", (0.8,))
    n.notify(due_alerts([status(b, 90.0, ts(2026, 12, 3))], MemorySentLog()))
    receiver.wait(lambda r: len(r.bodies) == 1)
    n.close()
    assert receiver.paths == ["/api/v2/alerts"]
    alert, forecast = receiver.bodies[0]  # 90 in 3 days of 7: 210 by Sunday
    assert forecast["labels"]["alertname"] == "BudgetForecastOver"
    assert "$210.00 by the period's end of $100.00" in forecast["annotations"]["summary"]
    assert alert["labels"]["alertname"] == "BudgetThresholdReached"
    assert alert["labels"]["project"] == "llm" and alert["labels"]["period_start"] == "2026-11-30"
    assert alert["startsAt"].startswith("2026-12-03T00:00:00")
    assert "80% reached for week of 2026-11-30" in alert["annotations"]["summary"]


def test_sent_log_in_the_database_is_shared_and_kept(tmp_path: Path) -> None:
    """Two server processes' logs on one database (two engines), then a fresh one (a restart):
    each alert is claimed once per period; a deleted budget's claims go with it."""
    from computewatch.serverdb.budgets import create_budget, delete_budget
    from computewatch.serverdb.engine import open_database, upgrade

    url = f"sqlite:///{tmp_path / 'server.db'}"
    dbs = [open_database(url) for _ in range(3)]
    try:
        upgrade(dbs[0])
        with dbs[0].session() as s:
            b = create_budget(
                s, scope_kind="team", scope_name="ml", metric="kwh", amount=1.0, period="month"
            )
        one, two, later = (DbSentLog(db) for db in dbs)
        nov, dec = ts(2026, 11, 1), ts(2026, 12, 1)
        assert one.claim(b.id, nov, "0.8") is True
        assert two.claim(b.id, nov, "0.8") is False
        assert later.claim(b.id, nov, "0.8") is False
        assert later.claim(b.id, nov, "1") is True
        assert two.claim(b.id, dec, "0.8") is True
        with dbs[0].session() as s:
            assert delete_budget(s, b.id)
        with dbs[0].session() as s:
            b2 = create_budget(
                s, scope_kind="team", scope_name="ml", metric="kwh", amount=1.0, period="month"
            )
        assert one.claim(b2.id, nov, "0.8") is True  # a new budget: its own alerts
    finally:
        for db in dbs:
            db.dispose()
