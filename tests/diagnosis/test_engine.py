"""The engine: ranking, a failing rule isolated, thresholds and the [diagnosis] section."""

from __future__ import annotations

import json

import pytest

from computewatch.config import Config, ConfigError, load_config
from computewatch.diagnosis import (
    AtStake,
    Evidence,
    Finding,
    NotApplicable,
    Thresholds,
    check_overrides,
    diagnose,
    diagnosed,
    ranked,
    run_rules,
)


def _f(id: str, seconds: float | None, usd: float | None = None, sev: str = "low") -> Finding:
    return Finding(id, id, sev, AtStake(seconds, usd), Evidence(("x",)), "do y")  # type: ignore[arg-type]


def test_ranking_by_money_then_time_then_severity():
    order = ranked(
        [
            _f("headroom", None, sev="low"),
            _f("slow", 50.0),
            _f("costly", 10.0, usd=5.0),
            _f("fast", 5.0, sev="high"),
            _f("same", 5.0, sev="low"),
        ]
    )
    assert [f.id for f in order] == ["costly", "slow", "fast", "same", "headroom"]


def test_a_failing_rule_does_not_hide_the_others(crafted):
    run = crafted()
    run.ticks(10)

    def broken(data, th):
        raise ZeroDivisionError("boom")

    def skipped(data, th):
        raise NotApplicable("nothing to see")

    def fires(data, th):
        return [_f("fires", 3.0)]

    d = run_rules(run.data(), None, {"broken": broken, "skipped": skipped, "fires": fires})
    assert [f.id for f in d.findings] == ["fires"]
    assert d.failed == {"broken": "ZeroDivisionError: boom"}
    assert d.not_applicable == {"skipped": "nothing to see"}
    assert d.checked == ("fires",)
    assert json.loads(json.dumps(d.as_dict()))["failed"]["broken"].startswith("ZeroDivision")


def test_min_seconds_at_stake_drops_small_findings(crafted):
    run = crafted()
    run.ticks(100)
    run.extra["flops"] = {"mfu": 0.1}
    assert "low_mfu" in run.ids()
    assert "low_mfu" not in run.ids(min_seconds_at_stake=1000)


def test_diagnose_reads_the_store(crafted):
    run = crafted()
    run.ticks(20)
    run.writer(10)
    t = 0.0
    for _ in range(30):
        run.phase(10, "data", t, t + 0.4)
        t += 0.5
    run.steps(10, [0.5] * 30)
    run.finish()
    row = run.store.run_by_key(run.key)
    assert [f.id for f in diagnose(run.store, row)] == ["data_starvation"]
    assert diagnose(run.store, row, thresholds={"data_wait_share": 0.9}) == []
    section = diagnosed(run.store, row, {"duration_seconds": 20.0})
    assert section["findings"][0]["id"] == "data_starvation"
    assert section["findings"][0]["at_stake"]["seconds"] == pytest.approx(12.0)


def test_diagnosed_never_raises(crafted):
    run = crafted()
    run.ticks(5)
    run.finish()
    row = run.store.run_by_key(run.key)
    run.store.close()  # every read now fails
    out = diagnosed(run.store, row, {})
    assert out["findings"] == [] and out["error"].startswith("diagnosis failed:")


def test_threshold_overrides_are_checked():
    assert check_overrides({"data_wait_share": 0.1, "min_segment_steps": 8}) == {
        "data_wait_share": 0.1,
        "min_segment_steps": 8,
    }
    assert Thresholds().with_overrides({"idle_min_seconds": 60}).idle_min_seconds == 60
    with pytest.raises(ValueError, match=r"unknown key diagnosis\.nope"):
        check_overrides({"nope": 1})
    with pytest.raises(ValueError, match="must be a number"):
        check_overrides({"data_wait_share": "high"})
    with pytest.raises(ValueError, match="ratio"):
        check_overrides({"data_wait_share": 15})
    with pytest.raises(ValueError, match="whole number"):
        check_overrides({"min_segment_steps": 2.5})
    with pytest.raises(ValueError, match="not negative"):
        check_overrides({"idle_min_seconds": -1})


def test_configuration_file_section(tmp_path):
    cfg = tmp_path / "config.toml"
    cfg.write_text("[diagnosis]\ndata_wait_share = 0.05\nidle_min_seconds = 600\n")
    assert dict(load_config(cfg).diagnosis) == {"data_wait_share": 0.05, "idle_min_seconds": 600}
    cfg.write_text("[diagnosis]\ndata_wait_share = 2\n")
    with pytest.raises(ConfigError, match=r"config.toml: diagnosis.data_wait_share = 2 is a ratio"):
        load_config(cfg)
    assert dict(Config().diagnosis) == {}  # no section: the defaults
