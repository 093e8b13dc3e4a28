"""Notifications: payloads, retries with backoff, and a dead endpoint never blocking sampling."""

from __future__ import annotations

import io
from typing import Any

import pytest
from tests.conftest import free_loopback_port

from computewatch.alerts import AlertSink, Engine, Target, parse_rules, parse_target
from computewatch.alerts.notify import backoff_delays
from computewatch.metrics.model import MetricSample

T0 = 1_700_000_000.0
RULES = parse_rules(
    "rules:\n  - name: Hot\n    expr: temp > 80\n    severity: critical\n"
    "    message: 'GPU {labels.gpu} at {value:g} C'\n",
    "test",
)


def hot(v: float) -> list[MetricSample]:
    return [MetricSample("temp", (("gpu", "GPU-a"), ("node", "n1")), v)]


def sink(targets: list[str], out: io.StringIO | None = None, **kw: Any) -> AlertSink:
    kw.setdefault("backoff", 0.01)
    kw.setdefault("max_backoff", 0.02)
    kw.setdefault("http_timeout", 5.0)
    return AlertSink(
        Engine(RULES), [parse_target(t) for t in targets], out=out or io.StringIO(), **kw
    )


def test_backoff_doubles_up_to_the_cap() -> None:
    assert backoff_delays(6, 1.0, 10.0) == [1, 2, 4, 8, 10]
    assert backoff_delays(1, 1.0, 10.0) == []


@pytest.mark.parametrize(
    ("text", "target"),
    [
        ("terminal", Target("terminal")),
        ("webhook:https://h.example/x?y=1", Target("webhook", "https://h.example/x?y=1")),
        ("alertmanager:http://127.0.0.1:9093/", Target("alertmanager", "http://127.0.0.1:9093")),
    ],
)
def test_targets(text: str, target: Target) -> None:
    assert parse_target(text) == target


@pytest.mark.parametrize("text", ["email:a@b", "webhook:", "slack:ftp://x", "terminal:x", "x"])
def test_bad_targets(text: str) -> None:
    with pytest.raises(ValueError, match="notification target"):
        parse_target(text)


def test_webhook_firing_and_resolved_once_each_after_retries(receiver: Any) -> None:
    receiver.fail_first = 2  # the first two POSTs get 503: retried with backoff
    sk = sink([f"webhook:{receiver.url}/hook"])
    sk.on_metrics(T0, hot(90))
    receiver.wait(lambda r: len(r.bodies) == 1)
    for i in range(1, 5):  # still firing: nothing new is sent
        sk.on_metrics(T0 + i, hot(91))
    sk.on_metrics(T0 + 10, hot(20))
    receiver.wait(lambda r: len(r.bodies) == 2)
    sk.close()
    assert receiver.requests == 4 and receiver.paths == ["/hook", "/hook"]
    firing, resolved = receiver.bodies
    assert firing["version"] == "1" and firing["status"] == "firing"
    [a] = firing["alerts"]
    assert a["rule"] == "Hot" and a["status"] == "firing" and a["severity"] == "critical"
    assert a["labels"] == {"alertname": "Hot", "gpu": "GPU-a", "node": "n1", "severity": "critical"}
    assert a["annotations"]["summary"] == "GPU GPU-a at 90 C"
    assert a["value"] == 90 and a["startsAt"] == "2023-11-14T22:13:20.000Z" and a["endsAt"] is None
    [b] = resolved["alerts"]
    assert resolved["status"] == "resolved" and b["status"] == "resolved"
    assert b["endsAt"] == "2023-11-14T22:13:30.000Z" and b["fingerprint"] == a["fingerprint"]


def test_gives_up_after_the_attempts_and_warns_once(receiver: Any) -> None:
    receiver.fail_first = 100
    out = io.StringIO()
    sk = sink([f"webhook:{receiver.url}"], out, attempts=3)
    sk.on_metrics(T0, hot(90))
    receiver.wait(lambda r: r.requests == 3)
    sk.on_metrics(T0 + 1, hot(10))
    receiver.wait(lambda r: r.requests == 6)
    sk.close()
    assert receiver.bodies == []
    warnings = [line for line in out.getvalue().splitlines() if "delivery failed" in line]
    assert len(warnings) == 1 and "after 3 attempt(s): HTTP 503" in warnings[0]
    [(_, d)] = sk.deliveries
    assert d.failed == 2 and d.attempts == 6


def test_client_errors_are_not_retried(receiver: Any) -> None:
    receiver.fail_first, receiver.fail_status = 1, 400
    out = io.StringIO()
    sk = sink([f"slack:{receiver.url}"], out)
    sk.on_metrics(T0, hot(90))
    sk.on_metrics(T0 + 1, hot(10))
    receiver.wait(lambda r: len(r.bodies) == 1)
    sk.close()
    assert receiver.requests == 2  # the firing one was refused once and dropped
    assert "(not retried): HTTP 400" in out.getvalue()
    assert receiver.bodies == [{"text": "[RESOLVED] Hot (critical): GPU GPU-a at 90 C"}]


def test_a_stuck_endpoint_never_blocks_on_metrics(receiver: Any) -> None:
    receiver.hold.clear()  # the endpoint accepts and never answers until released
    out = io.StringIO()
    sk = sink([f"webhook:{receiver.url}", "terminal"], out, queue_size=3)
    for i in range(40):  # 40 changes: fires, resolves, fires...
        sk.on_metrics(T0 + i, hot(90 if i % 2 == 0 else 10))
    receiver.wait(lambda r: r.requests >= 1)
    webhook = sk.deliveries[0][1]
    assert receiver.requests == 1 and webhook.dropped >= 40 - 1 - 3
    assert "queue full" in out.getvalue()
    receiver.hold.set()
    sk.close()
    lines = [line for line in out.getvalue().splitlines() if " alert [" in line]
    assert len(lines) == 40  # the terminal got every change
    assert lines[0].endswith("alert [FIRING] Hot (critical): GPU GPU-a at 90 C")
    assert "[RESOLVED]" in lines[1]


def test_a_dead_endpoint_is_retried_without_blocking() -> None:
    port = free_loopback_port()  # a port with nothing listening: connection refused
    out = io.StringIO()
    sk = sink([f"alertmanager:http://127.0.0.1:{port}"], out, attempts=3)
    for i in range(20):
        sk.on_metrics(T0 + i, hot(90 if i % 2 == 0 else 10))
    sk.close()
    assert "delivery failed after 3 attempt(s)" in out.getvalue()


def test_alertmanager_gets_resends_and_resolved(receiver: Any) -> None:
    sk = sink([f"alertmanager:{receiver.url}"], resend_interval=60)
    sk.on_metrics(T0, hot(90))
    sk.on_metrics(T0 + 10, hot(90))  # no change, no resend yet
    sk.on_metrics(T0 + 70, hot(90))  # resend: Alertmanager must not time it out
    sk.on_metrics(T0 + 80, hot(10))
    receiver.wait(lambda r: len(r.bodies) == 3)
    sk.close()
    assert receiver.paths == ["/api/v2/alerts"] * 3
    first, again, resolved = (b[0] for b in receiver.bodies)
    assert first["startsAt"] == again["startsAt"] == "2023-11-14T22:13:20.000Z"
    assert first["endsAt"] == "2023-11-14T22:17:20.000Z"  # 4 resend intervals ahead
    assert again["endsAt"] == "2023-11-14T22:18:30.000Z"
    assert resolved["endsAt"] == "2023-11-14T22:14:40.000Z"
    assert first["labels"]["alertname"] == "Hot"
    assert first["annotations"] == {"summary": "GPU GPU-a at 90 C"}
    assert first["generatorURL"].endswith("#Hot")


def test_on_metrics_never_raises() -> None:
    out = io.StringIO()
    sk = sink(["terminal"], out)
    sk.engine = None  # type: ignore[assignment]  # a broken engine
    sk.on_metrics(T0, hot(90))
    sk.on_metrics(T0 + 1, hot(90))
    sk.close()
    assert out.getvalue().count("evaluation failed") == 1
