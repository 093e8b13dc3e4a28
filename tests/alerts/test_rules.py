"""Rules files: parsing, validation, and errors that name the file, the line and the reason."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from computewatch.alerts import RulesError, builtin_rules, load_rules, parse_rules
from computewatch.alerts.expr import parse_duration


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "rules.yaml"
    p.write_text(textwrap.dedent(text).lstrip())
    return p


def error_of(tmp_path: Path, text: str) -> RulesError:
    p = write(tmp_path, text)
    with pytest.raises(RulesError) as ei:
        load_rules(p)
    assert str(ei.value).startswith(str(p))
    return ei.value


def test_a_good_file_is_parsed_with_the_builtin_pack(tmp_path: Path) -> None:
    p = write(
        tmp_path,
        """
        receivers:
          - terminal
          - type: slack
            url: https://hooks.example.com/T1
        rules:
          - name: GpuHot
            expr: computewatch_gpu_temperature_celsius{gpu_model=~"NVIDIA.*"} > 85
            for: 1m30s
            severity: critical
            labels: {team: infra, tier: 1}
            message: "GPU {labels.gpu_index} at {value:.0f} C"
        """,
    )
    rs = load_rules(p)
    rule = rs.get("GpuHot")
    assert rule is not None
    assert rule.for_seconds == 90
    assert rule.severity == "critical"
    assert dict(rule.labels) == {"team": "infra", "tier": "1"}
    assert rule.origin == f"{p}:6"
    assert rs.receivers == ("terminal", "slack:https://hooks.example.com/T1")
    assert set(builtin_rules().names()) < set(rs.names())


def test_builtin_false_disable_and_override(tmp_path: Path) -> None:
    p = write(
        tmp_path,
        """
        disable: [GpuLowUtilization]
        rules:
          - name: GpuMemoryHigh
            expr: computewatch_gpu_memory_used_bytes / computewatch_gpu_memory_total_bytes > 0.8
        """,
    )
    rs = load_rules(p)
    assert "GpuLowUtilization" not in rs.names()
    override = rs.get("GpuMemoryHigh")
    assert override is not None and override.origin.startswith(str(p))
    assert rs.names().count("GpuMemoryHigh") == 1
    only = parse_rules("builtin: false\nrules: []\n", "x", builtin=builtin_rules())
    assert only.rules == ()


@pytest.mark.parametrize(
    ("text", "line", "reason"),
    [
        ("rules:\n  - name: A\n    expr: x > 1\n   bad: [\n", 4, "not valid YAML"),
        (
            "rules:\n  - name: A\n    expr: x > 1\n    frobnicate: 2\n",
            4,
            "unknown key 'frobnicate'",
        ),
        ("rules:\n  - name: A\n    expr: nosuch(x[5m]) > 1\n", 3, "unknown function 'nosuch'"),
        ("rules:\n  - name: A\n    expr: rate(x) > 1\n", 3, "expected '[' and a window"),
        ("rules:\n  - name: A\n    expr: x >\n", 3, "expected a number"),
        ("rules:\n  - name: A\n    expr: x{a=b} > 1\n", 3, "expected a quoted value"),
        ("rules:\n  - name: A\n    expr: x > 1\n    for: 5 minutes\n", 4, "not a duration"),
        ("rules:\n  - name: A\n    expr: x > 1\n    for: 300\n", 4, "not a duration"),
        ("rules:\n  - name: A\n    expr: x > 1\n    severity: page\n", 4, "severity 'page'"),
        (
            "rules:\n  - name: A\n    expr: x > 1\n    message: '{nope}'\n",
            4,
            "unknown field {nope}",
        ),
        ("rules:\n  - name: A\n    expr: x > 1\n    message: '{value:d}'\n", 4, "cannot be filled"),
        ("rules:\n  - name: A\n    detector: magic\n", 3, "unknown detector 'magic'"),
        (
            "rules:\n  - name: A\n    detector: step_time_regression\n    params:\n"
            "      threshold: 0.2\n      window: soon\n",
            6,
            "window",
        ),
        ("rules:\n  - name: A\n    detector: energy_budget\n", 3, "needs kwh"),
        ("rules:\n  - name: A\n  - name: B\n    expr: x > 1\n", 2, "exactly one of 'expr'"),
        ("rules:\n  - expr: x > 1\n", 2, "needs a name"),
        ("rules:\n  - name: bad name\n    expr: x > 1\n", 2, "letters, digits"),
        ("rules:\n  - {name: A, expr: x > 1}\n  - {name: A, expr: x > 2}\n", 3, "defined twice"),
        ("rules:\n  - name: A\n    name: B\n    expr: x > 1\n", 3, "duplicate key 'name'"),
        ("receivers: [pager:http://x]\n", 1, "notification target"),
        ("receivers: ['webhook:ftp://x']\n", 1, "not an http(s) URL"),
        ("disable: [NoSuchRule]\n", 1, "no built-in rule 'NoSuchRule'"),
        ("rulez: []\n", 1, "unknown key 'rulez'"),
        (
            "rules:\n  - name: A\n    expr: x > 1\n    labels: {alertname: B}\n",
            4,
            "set from the rule",
        ),
    ],
)
def test_errors_name_the_line_and_the_reason(
    tmp_path: Path, text: str, line: int, reason: str
) -> None:
    e = error_of(tmp_path, text)
    assert e.line == line, str(e)
    assert reason in e.reason, str(e)
    assert f":{line}: " in str(e)


def test_expr_errors_give_the_column(tmp_path: Path) -> None:
    e = error_of(tmp_path, "rules:\n  - name: A\n    expr: up > 1 and foo(up[1m]) < 2\n")
    assert "column 12" in e.reason and "unknown function 'foo'" in e.reason


def test_empty_and_missing_files(tmp_path: Path) -> None:
    assert "empty" in error_of(tmp_path, "").reason
    with pytest.raises(RulesError, match="no such file"):
        load_rules(tmp_path / "nope.yaml")
    with pytest.raises(RulesError, match="is a directory"):
        load_rules(tmp_path)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30s", 30), ("5m", 300), ("1h30m", 5400), ("2d", 172800), ("1w", 604800), ("250ms", 0.25)],
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "5", "m", "5 m", "1.5h", "-1m"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration(text)


@pytest.mark.parametrize(
    "text",
    [
        "rules: " + "[" * 5000 + "]" * 5000,  # the probe's case: a 5000-deep flow list
        "rules:\n" + "".join("  " * i + "-\n" for i in range(200)),  # block style
        "receivers: " + "{a: " * 100 + "1" + "}" * 100,
    ],
)
def test_deep_nesting_is_one_error_naming_the_line(tmp_path: Path, text: str) -> None:
    p = tmp_path / "deep.yaml"
    p.write_text(text)
    with pytest.raises(RulesError, match="nests more than 64 levels deep") as info:
        load_rules(p)
    assert info.value.line is not None


def test_a_huge_duration_is_an_error() -> None:
    with pytest.raises(ValueError, match="too long a duration"):
        parse_duration("9" * 400 + "w")


def test_undecodable_rules_file(tmp_path: Path) -> None:
    p = tmp_path / "bad.yaml"
    p.write_bytes(b"rules:\n  - name: \xff\xfe\n")
    with pytest.raises(RulesError, match="cannot read"):
        load_rules(p)


def test_deep_rules_file_through_the_cli(cw: Any, tmp_path: Path) -> None:
    p = tmp_path / "deep.yaml"
    p.write_text("rules: " + "[" * 5000 + "]" * 5000)
    marker = tmp_path / "ran"
    r = cw("run", "--alerts", p, "--", sys.executable, "-c", f"open({str(marker)!r}, 'w')")
    assert r.returncode == 2, r.stderr
    assert "nests more than 64 levels deep" in r.stderr
    assert "Traceback" not in r.stderr and "RecursionError" not in r.stderr
    assert not marker.exists()
