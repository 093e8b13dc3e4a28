"""Fuzzing the configuration file: ``load_config``/``parse_config`` and the agent's sections."""

from __future__ import annotations

import math
import subprocess
import sys
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from computewatch.config import (
    _SCHEMA,
    NUMBERS,
    Config,
    ConfigError,
    TomlError,
    load_config,
    parse_config,
    parse_toml,
)
from computewatch.config.thresholds import DEFAULTS
from computewatch.fleet.agent_config import (
    _AGENT_KEYS,
    _TEAM_TABLES,
    AgentConfigError,
    parse_agent_config,
)

BASE = settings.get_profile("computewatch-fuzz")  # tests/fuzz/conftest.py


def fuzz(n: int) -> settings:
    return settings(BASE, max_examples=n * BASE.max_examples)


FUZZ = fuzz(150)

_DIAGNOSIS_KEYS = [f.name for f in msgspec.structs.fields(DEFAULTS)]


def _sections(fz: ModuleType) -> st.SearchStrategy[dict[str, dict[str, str]]]:
    """Tables of real sections and keys (and a few unknown ones), with TOML value literals."""
    known = {s: list(keys) for s, keys in _SCHEMA.items()}
    known["diagnosis"] = _DIAGNOSIS_KEYS
    known["agent"] = list(_AGENT_KEYS)
    known["teams"] = ["default", *_TEAM_TABLES]
    section = st.sampled_from([*known, "unknown", "energy.sub"])
    good_numbers = st.sampled_from(["1", "1.2", "0", "0.5", "300", "5", "0.05"])

    def table(name: str) -> st.SearchStrategy[dict[str, str]]:
        keys = st.sampled_from([*known.get(name, ["x"]), "bogus"])
        literal = st.one_of(good_numbers, fz.toml_value)
        return st.dictionaries(keys, literal, max_size=5)

    return section.flatmap(lambda name: table(name).map(lambda body: {name: body}))


def _render(tables: list[dict[str, dict[str, str]]]) -> str:
    lines: list[str] = []
    for t in tables:
        for name, body in t.items():
            lines.append(f"[{name}]")
            lines.extend(f"{k} = {v}" for k, v in body.items())
    return "\n".join(lines) + "\n"


def _check_config(cfg: Config) -> None:
    """A configuration that loaded has only finite numbers, each in its key's range."""
    for key, allowed in NUMBERS.items():
        section, name = key.split(".")
        field = _SCHEMA[section][name][0]
        v = getattr(cfg, field)
        if v is not None:
            assert isinstance(v, float) and allowed.contains(v), (key, v)
    for key, v in cfg.diagnosis.items():
        assert isinstance(v, int | float) and math.isfinite(v), (key, v)


def _write(data: bytes) -> Path:
    d = Path(tempfile.mkdtemp(prefix="cw-fuzz-"))
    p = d / "config.toml"
    p.write_bytes(data)
    return p


@FUZZ
@given(data=st.data())
def test_structured_configuration(fz: ModuleType, data: st.DataObject) -> None:
    text = _render(data.draw(st.lists(_sections(fz), max_size=4)))
    try:
        cfg = parse_config(parse_toml(text, "fuzz.toml"))
    except fz.OWN_ERRORS:
        return
    _check_config(cfg)


@FUZZ
@given(data=st.data())
def test_structured_agent_configuration(fz: ModuleType, data: st.DataObject) -> None:
    text = _render(data.draw(st.lists(_sections(fz), max_size=4)))
    try:
        cfg = parse_agent_config(text, Path("/etc/computewatch/config.toml"))
    except fz.OWN_ERRORS:
        return
    _check_config(cfg.base)
    for v in (cfg.interval, cfg.min_cpu_cores, cfg.job_expiry_seconds):
        assert v is None or math.isfinite(v)


@FUZZ
@given(text=st.text(max_size=200))
def test_any_text(fz: ModuleType, text: str) -> None:
    try:
        _check_config(parse_config(parse_toml(text, "fuzz.toml")))
    except fz.OWN_ERRORS:
        pass
    try:
        parse_agent_config(text)
    except fz.OWN_ERRORS:
        pass


@fuzz(60)
@given(data=st.binary(max_size=200))
def test_any_bytes_in_a_file(fz: ModuleType, data: bytes) -> None:
    p = _write(data)
    try:
        _check_config(load_config(p))
    except fz.OWN_ERRORS:
        pass
    finally:
        p.unlink()
        p.parent.rmdir()


@FUZZ
@given(data=st.data())
def test_parse_config_of_any_structure(fz: ModuleType, data: st.DataObject) -> None:
    """What a TOML reader could hand over, real keys included, with any JSON-shaped values."""
    keys = st.sampled_from(sorted({k for t in _SCHEMA.values() for k in t} | {"x"}))
    body = st.one_of(fz.values, st.dictionaries(keys, fz.values, max_size=4))
    doc = data.draw(st.dictionaries(st.sampled_from([*_SCHEMA, "diagnosis", "x"]), body))
    try:
        _check_config(parse_config(doc))
    except fz.OWN_ERRORS:
        pass


# Deep nesting: Hypothesis never draws documents this deep; tomllib recurses once per level.
DEPTHS = [500, 1000, 2000, 20000]


def _deep(depth: int, kind: str) -> str:
    value = "[" * depth + "]" * depth if kind == "array" else "{a = " * depth + "1" + "}" * depth
    return f"[energy]\nx = {value}\n"


@pytest.mark.parametrize("kind", ["array", "inline table"])
@pytest.mark.parametrize("depth", DEPTHS)
def test_deep_nesting_is_a_configuration_error(depth: int, kind: str) -> None:
    text = _deep(depth, kind)
    with pytest.raises(TomlError, match=r"^deep\.toml: not valid TOML: nests too deeply"):
        parse_toml(text, "deep.toml")
    with pytest.raises(AgentConfigError, match="not valid TOML: nests too deeply"):
        parse_agent_config(text)
    p = _write(text.encode())
    try:
        with pytest.raises(ConfigError, match="nests too deeply"):
            load_config(p)
    finally:
        p.unlink()
        p.parent.rmdir()


def test_deep_nesting_on_the_command_line(cw: Any, tmp_path: Path) -> None:
    """run --config, $COMPUTEWATCH_CONFIG and the agent's --config: one line, exit 2."""
    cfg = tmp_path / "deep.toml"
    cfg.write_text(_deep(2000, "array"))
    marker = tmp_path / "ran"
    job = ["--", sys.executable, "-c", f"open({str(marker)!r}, 'w')"]
    env_run = subprocess.run(
        [sys.executable, "-m", "computewatch", "run", "--quiet", *job],
        capture_output=True,
        text=True,
        env=cw.env(COMPUTEWATCH_CONFIG=str(cfg)),
        cwd=tmp_path,
        timeout=120,
        check=False,
    )
    for r in (
        cw("run", "--config", cfg, *job),
        env_run,
        cw("agent", "--config", cfg, "--once", "--gpu-backend", "none"),
    ):
        assert r.returncode == 2, r.stderr
        assert "nests too deeply" in r.stderr and r.stderr.count("\n") == 1, r.stderr
        assert "Traceback" not in r.stderr and "internal error" not in r.stderr
    assert not marker.exists()
