"""``when`` and ``where`` at their edges: a ``--now`` before the data (said, or an error when
no window reaches the data), duplicate regions, negative and zero durations."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest
from tests.carbon.test_cli_e2e import DAY, T0, write_csv


def test_when_before_the_data_says_so(cw: Any, tmp_path: Path) -> None:
    f = write_csv(tmp_path / "day.csv", T0, DAY)
    now = (T0 - dt.timedelta(hours=2)).isoformat()
    r = cw.ok("when", "--duration", "3h", "--intensity-file", f, "--now", now, "--json")
    plan = json.loads(r.stdout)
    assert any("the forecast starts at 2026-12-01 00:00 UTC" in n for n in plan["notes"])
    text = cw.ok("when", "--duration", "3h", "--intensity-file", f, "--now", now).stdout
    assert "note         the forecast starts at" in text


def test_when_days_before_the_data_is_an_error(cw: Any, tmp_path: Path) -> None:
    f = write_csv(tmp_path / "day.csv", T0, DAY)
    now = (T0 - dt.timedelta(days=3)).isoformat()
    r = cw("when", "--duration", "3h", "--intensity-file", f, "--now", now)
    assert r.returncode == 1, r.stderr
    assert "after every window considered" in r.stderr and "Traceback" not in r.stderr


def test_where_lists_each_region_once(cw: Any) -> None:
    doc = json.loads(
        cw.ok(
            "where", "--duration", "4h", "--energy", "10", "--regions", "FR,fr,DE,FR", "--json"
        ).stdout
    )
    assert [r["region"] for r in doc["regions"]] == ["FR", "DE"]


@pytest.mark.parametrize("value", ["-4h", "0h", "-0.5d"])
@pytest.mark.parametrize("command", ["when", "where"])
def test_a_duration_must_be_positive(cw: Any, command: str, value: str) -> None:
    extra = ["--regions", "FR"] if command == "where" else []
    r = cw(command, "--duration", value, *extra)
    assert r.returncode == 2, r.stderr
    assert f"a duration must be more than 0, not '{value}'" in r.stderr
