"""The built-in detection rules (UndeclaredTraining, UndeclaredTrainingOverCap): each fires on
crafted samples of the detection families and stays quiet on healthy ones, like the rest of the
built-in pack (tests/alerts/test_builtin.py)."""

from __future__ import annotations

from computewatch.alerts import FIRING, RESOLVED, AlertEvent, Engine, builtin_rules
from computewatch.metrics.families import FAMILIES
from computewatch.metrics.model import MetricSample

JOB = {"job": "7", "user": "alice", "team": "nlp", "node": "n1"}
T0 = 1_700_000_000.0


def s(name: str, value: float, **more: str) -> MetricSample:
    return MetricSample(name, tuple(sorted({**JOB, **more}.items())), value)


def tick(undeclared: float, breach: float | None) -> list[MetricSample]:
    out = [
        s("computewatch_job_training_probability", 0.9 if undeclared else 0.1),
        s("computewatch_job_detected_training", undeclared),
        s("computewatch_job_undeclared_training", undeclared),
    ]
    if breach is not None:
        out.append(s("computewatch_job_cap_breach", breach, account="acme"))
    return out


def events(ticks: list[list[MetricSample]]) -> list[AlertEvent]:
    e = Engine(builtin_rules())
    out: list[AlertEvent] = []
    for i, samples in enumerate(ticks):
        out.extend(e.evaluate(T0 + 5 * i, samples))
    return out


def test_the_rules_are_built_in_with_their_severity() -> None:
    rules = {r.name: r for r in builtin_rules().rules}
    assert rules["UndeclaredTraining"].severity == "warning"
    assert rules["UndeclaredTrainingOverCap"].severity == "critical"
    names = {f.name for f in FAMILIES}
    for fam in (
        "computewatch_job_training_probability",
        "computewatch_job_detected_training",
        "computewatch_job_undeclared_training",
        "computewatch_job_cap_breach",
        "computewatch_agent_detection_duration_seconds",
    ):
        assert fam in names


def test_undeclared_training_warns_and_over_cap_is_critical() -> None:
    ev = events([tick(1, 1)])
    fired = {e.rule: e for e in ev if e.status == FIRING}
    assert set(fired) == {"UndeclaredTraining", "UndeclaredTrainingOverCap"}
    over = fired["UndeclaredTrainingOverCap"]
    assert over.severity == "critical"
    assert dict(over.labels)["account"] == "acme" and dict(over.labels)["job"] == "7"
    assert "account acme's caps do not allow" in over.summary
    assert "alice" in fired["UndeclaredTraining"].summary


def test_quiet_on_healthy_jobs() -> None:
    assert not events([tick(0, None), tick(0, 0), tick(0, None)])
    # Training within the caps: the warning only.
    assert {e.rule for e in events([tick(1, 0)])} == {"UndeclaredTraining"}
    # A breach of a job no longer undeclared (it declared a model since) does not fire.
    assert not events([tick(0, 1)])


def test_resolves_when_the_account_allows_again() -> None:
    ev = events([tick(1, 1), tick(1, 1), tick(1, 0)])
    over = [e.status for e in ev if e.rule == "UndeclaredTrainingOverCap"]
    assert over == [FIRING, RESOLVED]
