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
    Saving,
    Thresholds,
    check_overrides,
    diagnose,
    diagnosed,
    joint_saving,
    ranked,
    run_rules,
)


def _f(
    id: str,
    seconds: float | None,
    usd: float | None = None,
    sev: str = "low",
    saving: float = 0.0,
    saving_usd: float | None = None,
    part: str = "run",
) -> Finding:
    won = Saving(saving, saving, saving, "fix", "assumed", part, usd=saving_usd)
    return Finding(id, id, sev, AtStake(seconds, usd), Evidence(("x",)), "do y", won)  # type: ignore[arg-type]


def test_ranking_by_saving_then_money_then_severity():
    # The symptom's duration (at_stake) does not rank: what the fix saves does.
    order = ranked(
        [
            _f("headroom", None, sev="low"),
            _f("slow", 50.0, saving=0.0),  # a long symptom with nothing to win
            _f("costly", 10.0, usd=5.0, saving=4.0, saving_usd=2.0),
            _f("cheap", 10.0, usd=5.0, saving=4.0, saving_usd=1.0),
            _f("fast", 5.0, sev="high", saving=5.0),
            _f("same", 5.0, sev="low", saving=1.0),
        ]
    )
    assert [f.id for f in order] == ["fast", "costly", "cheap", "same", "headroom", "slow"]


def test_joint_saving_never_exceeds_the_run_nor_a_part():
    # Two fixes of the same part count once (the larger); distinct parts compose as
    # successive speed-ups: 100 s with 60 s and 50 s to win keeps 100 x 0.4 x 0.5 = 20 s.
    loop_a = Saving(60.0, 50.0, 70.0, "a", "", "loop", 80.0)
    loop_b = Saving(40.0, 30.0, 90.0, "b", "", "loop", 80.0)
    steps = Saving(50.0, 40.0, 60.0, "c", "", "steps", 55.0)
    j = joint_saving([("a", loop_a), ("b", loop_b), ("c", steps)], 100.0)
    assert j.seconds == pytest.approx(80.0)
    assert j.low_seconds == pytest.approx(100 - 100 * 0.5 * 0.6)
    assert j.high_seconds == pytest.approx(100 - 100 * 0.3 * 0.45)  # b's 90 s capped at 80
    assert j.findings == ("a", "c")
    assert j.fraction == pytest.approx(0.8)
    big = [(str(i), Saving(90.0, 90.0, 90.0, "x", "", f"p{i}", 95.0)) for i in range(5)]
    assert joint_saving(big, 100.0).high_seconds < 100.0
    assert joint_saving([("a", Saving.nothing("nothing"))], 100.0).seconds == 0.0


def test_a_saving_is_clipped_to_its_part_and_the_run():
    s = Saving(120.0, -5.0, 150.0, "fix", "", "loop", 80.0).bounded(100.0)
    assert (s.low_seconds, s.seconds, s.high_seconds) == (0.0, 80.0, 80.0)
    assert s.fraction == pytest.approx(0.8)


def test_a_saving_as_written_never_reads_above_the_run_as_written():
    """The JSON rounds a saving's seconds as the summary rounds the run's duration (4 places):
    a range that reaches the run's end stays inside it (14.65384 s was written 14.654 against
    a duration of 14.6538)."""
    duration = 14.65384
    s = Saving(14.65384, 0.0, 14.65384, "fix", "", "steps", duration).bounded(duration)
    j = joint_saving([("a", s)], duration)
    written = round(duration, 4)  # analysis.summary's duration_seconds
    assert s.as_dict()["high_seconds"] <= written and s.as_dict()["seconds"] <= written
    assert j.as_dict()["high_seconds"] <= written and j.as_dict()["seconds"] <= written


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
