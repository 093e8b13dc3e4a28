"""`computewatch alerts check|list` as a user runs them, and the flags run and agent take."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest

from computewatch.cli.alerts import add_alert_arguments, alerts_enabled


def test_check_a_good_file(cw: Any, tmp_path: Path) -> None:
    f = tmp_path / "rules.yaml"
    f.write_text("receivers: [terminal]\nrules:\n  - {name: Hot, expr: 'temp > 80', for: 1m}\n")
    r = cw.ok("alerts", "check", f)
    assert r.stdout.startswith(f"{f}: OK, 12 rules (1 from the file, 11 built-in)")
    assert "receivers: terminal" in r.stdout
    doc = json.loads(cw.ok("alerts", "list", f, "--json").stdout)
    hot = next(x for x in doc["rules"] if x["name"] == "Hot")
    assert hot["for"] == "1m" and hot["origin"] == f"{f}:3"


def test_check_a_bad_file_names_the_line(cw: Any, tmp_path: Path) -> None:
    f = tmp_path / "rules.yaml"
    f.write_text("rules:\n  - name: Hot\n    expr: temp > 80\n    for: soon\n")
    r = cw("alerts", "check", f)
    assert r.returncode == 1
    assert r.stderr.strip() == (
        f"computewatch: {f}:4: rule Hot: for: 'soon' is not a duration "
        "(examples: 30s, 5m, 1h30m, 2d)"
    )
    assert "Traceback" not in r.stderr


def test_list_the_builtin_pack(cw: Any) -> None:
    r = cw.ok("alerts", "list")
    names = [line.split()[0] for line in r.stdout.splitlines()]
    assert names[:2] == ["GpuAllocatedIdle", "GpuMemoryHigh"] and "DiskAlmostFull" in names


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="x", exit_on_error=True)
    add_alert_arguments(p)
    return p


def test_alert_flags(tmp_path: Path) -> None:
    f = tmp_path / "r.yaml"
    f.write_text("rules: []\n")
    a = parser().parse_args(
        [
            "--alerts",
            str(f),
            "--notify",
            "terminal",
            "--notify",
            "slack:https://x.example/h",
            "--budget-usd",
            "12.5",
            "--budget-kwh",
            "3",
        ]
    )
    assert a.alerts == str(f) and a.notify == ["terminal", "slack:https://x.example/h"]
    assert (a.budget_usd, a.budget_kwh) == (12.5, 3.0) and alerts_enabled(a)
    assert not alerts_enabled(parser().parse_args([]))


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--budget-usd", "-1"], "must be a positive number of dollars"),
        (["--budget-kwh", "lots"], "not a number of kWh"),
        (["--notify", "pager:x"], "notification target"),
        (["--alerts", "/nonexistent.yaml"], "/nonexistent.yaml: no such file"),
    ],
)
def test_bad_alert_flags(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as ei:
        parser().parse_args(argv)
    assert ei.value.code == 2
    assert message in capsys.readouterr().err
