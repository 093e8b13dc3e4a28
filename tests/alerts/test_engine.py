"""The evaluation engine: conditions, and the pending/firing/resolved states on a fake clock."""

from __future__ import annotations

from computewatch.alerts import FIRING, RESOLVED, Engine, parse_rules
from computewatch.alerts.expr import History, InstantSamples, evaluate, parse_condition
from computewatch.metrics.model import MetricSample


def s(name: str, value: float, **labels: str) -> MetricSample:
    return MetricSample(name, tuple(sorted(labels.items())), value)


def engine(rules_yaml: str) -> Engine:
    return Engine(parse_rules(rules_yaml, "test"))


def values(expr: str, samples: list[MetricSample], now: float = 0.0) -> dict[str, float]:
    result = evaluate(parse_condition(expr), InstantSamples(now, samples, History()))
    return {",".join(f"{k}={v}" for k, v in labels): value for labels, value in result.items()}


def test_comparison_and_label_matchers() -> None:
    samples = [
        s("temp", 90, gpu="a", model="H100"),
        s("temp", 70, gpu="b", model="H100"),
        s("temp", 95, gpu="c", model="A100"),
    ]
    assert values("temp > 80", samples) == {"gpu=a,model=H100": 90, "gpu=c,model=A100": 95}
    assert values('temp{model="H100"} > 80', samples) == {"gpu=a,model=H100": 90}
    assert values('temp{model!="H100"} >= 95', samples) == {"gpu=c,model=A100": 95}
    assert values('temp{gpu=~"a|b"} < 80', samples) == {"gpu=b,model=H100": 70}
    assert values('temp{gpu!~"a|b"} != 0', samples) == {"gpu=c,model=A100": 95}
    assert values("temp == 70", samples) == {"gpu=b,model=H100": 70}
    assert values("nothing > 0", samples) == {}


def test_ratio_matches_identical_labels_and_skips_zero() -> None:
    samples = [
        s("used", 96, gpu="a"),
        s("total", 100, gpu="a"),
        s("used", 10, gpu="b"),
        s("total", 100, gpu="b"),
        s("used", 5, gpu="c"),
        s("total", 0, gpu="c"),
        s("used", 99, gpu="d"),  # no total: no result
    ]
    assert values("used / total > 0.95", samples) == {"gpu=a": 0.96}
    assert values("used / total >= 0", samples) == {"gpu=a": 0.96, "gpu=b": 0.1}


def test_and_on_labels() -> None:
    samples = [
        s("util", 0.01, gpu="a", node="n", model="X"),
        s("util", 0.01, gpu="b", node="n", model="X"),
        s("alloc", 1, gpu="a", node="n"),
        s("alloc", 0, gpu="b", node="n"),
    ]
    assert values("util < 0.05 and on(gpu, node) alloc == 1", samples) == {
        "gpu=a,model=X,node=n": 0.01
    }
    assert values("util < 0.05 and alloc == 1", samples) == {}  # label sets differ


def test_rate_increase_and_over_time_with_counter_reset() -> None:
    h = History(frozenset({"c", "g"}), 60)
    points = [(0, 0.0), (10, 10.0), (20, 20.0), (30, 5.0), (40, 15.0)]  # reset at 30
    for t, v in points:
        h.record(t, [s("c", v, job="j"), s("g", v, job="j")])
    tick = InstantSamples(40, [], h)
    rate = evaluate(parse_condition("rate(c[1m]) > 0"), tick)
    assert list(rate.values()) == [(10 + 10 + 5 + 10) / 40]
    inc = evaluate(parse_condition("increase(c[1m]) > 0"), tick)
    assert list(inc.values()) == [35]
    avg = evaluate(parse_condition("avg_over_time(g[15s]) > 0"), tick)
    assert list(avg.values()) == [10]  # points at 30 and 40
    mx = evaluate(parse_condition("max_over_time(g[1m]) > 0"), tick)
    mn = evaluate(parse_condition("min_over_time(g[1m]) >= 0"), tick)
    assert list(mx.values()) == [20] and list(mn.values()) == [0]
    h.record(200, [s("c", 1, job="j")])  # older points are pruned past the longest window
    assert all(t >= 140 for dq in h.points.values() for t, _ in dq)


RULE = """
rules:
  - name: Hot
    expr: temp > 80
    for: 5m
    labels: {team: infra}
    message: "GPU {labels.gpu} at {value:.0f} C (over {threshold:g} for {for})"
"""


def test_pending_then_firing_after_for_then_resolved() -> None:
    e = engine(RULE)
    assert e.evaluate(0, [s("temp", 90, gpu="a")]) == []
    assert e.pending() == [
        ("Hot", {"alertname": "Hot", "gpu": "a", "severity": "warning", "team": "infra"})
    ]
    assert e.evaluate(299, [s("temp", 91, gpu="a")]) == []
    [fired] = e.evaluate(300, [s("temp", 92, gpu="a")])
    assert fired.status == FIRING and fired.rule == "Hot"
    assert fired.summary == "GPU a at 92 C (over 80 for 5m)"
    assert fired.active_at == 0 and fired.starts_at == 300 and fired.ends_at is None
    assert fired.labels["team"] == "infra" and fired.labels["severity"] == "warning"
    assert e.evaluate(360, [s("temp", 93, gpu="a")]) == []  # still firing: no new event
    [resolved] = e.evaluate(420, [s("temp", 60, gpu="a")])
    assert resolved.status == RESOLVED and resolved.ends_at == 420
    assert resolved.fingerprint == fired.fingerprint
    assert e.evaluate(480, [s("temp", 60, gpu="a")]) == []  # resolved once only
    assert [x.status for x in e.current()] == [RESOLVED]  # kept for re-sending
    e.evaluate(420 + 901, [])
    assert e.current() == []


def test_pending_that_does_not_last_is_dropped_silently() -> None:
    e = engine(RULE)
    e.evaluate(0, [s("temp", 90, gpu="a")])
    assert e.evaluate(100, [s("temp", 50, gpu="a")]) == []
    assert e.pending() == []
    # the duration restarts from the new activation
    e.evaluate(200, [s("temp", 90, gpu="a")])
    assert e.evaluate(400, [s("temp", 90, gpu="a")]) == []
    assert [x.status for x in e.evaluate(500, [s("temp", 90, gpu="a")])] == [FIRING]


def test_label_sets_appearing_and_disappearing() -> None:
    e = engine(RULE.replace("for: 5m", "for: 0s"))
    ev = e.evaluate(0, [s("temp", 90, gpu="a"), s("temp", 50, gpu="b")])
    assert [(x.status, x.labels["gpu"]) for x in ev] == [(FIRING, "a")]
    ev = e.evaluate(10, [s("temp", 90, gpu="a"), s("temp", 85, gpu="b")])
    assert [(x.status, x.labels["gpu"]) for x in ev] == [(FIRING, "b")]
    ev = e.evaluate(20, [s("temp", 85, gpu="b")])  # gpu a vanished: resolved
    assert [(x.status, x.labels["gpu"]) for x in ev] == [(RESOLVED, "a")]
    ev = e.evaluate(30, [s("temp", 90, gpu="a"), s("temp", 85, gpu="b")])  # a again: fires anew
    assert [(x.status, x.labels["gpu"]) for x in ev] == [(FIRING, "a")]
    assert sorted(x.labels["gpu"] for x in e.firing()) == ["a", "b"]


def test_a_failing_rule_is_reported_once_and_the_others_go_on() -> None:
    e = engine(
        """
        rules:
          - {name: A, expr: "x > 1"}
          - {name: B, detector: step_time_regression}
        """.replace("\n        ", "\n")
    )
    e.compiled[1].detector = None  # a detector gone wrong: no condition, no detector
    for t in (0, 1):
        ev = e.evaluate(t, [s("x", 2)])
    assert [x.rule for x in e.firing()] == ["A"]
    assert len(e.errors) == 1 and "rule B failed" in e.errors[0]
    assert ev == []
