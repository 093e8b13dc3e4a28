"""The configuration file: every key checked when read, errors naming file, key and value."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from computewatch.config import (
    ENV_CONFIG,
    NUMBERS,
    Config,
    ConfigError,
    default_config_path,
    load_config,
    parse_config,
)

FULL = """
[location]
region = " FR "

[energy]
pue = 1.2
server_watts = 50
memory_watts_per_gib = 0.5
cpu_tdp_watts = 280

[carbon]
embodied = true
electricitymaps_token = "tok"
electricitymaps_url = "https://api.electricitymap.org/v3"

[cost]
instance_type = "aws:p5.48xlarge"
discount = 0.6
usd_per_gpu_hour = 2.1
usd_per_hour = 0
usd_per_kwh = 0.15

[flops]
precision = "bf16"

[catalog]
cloud_instances = "prices.csv"
"""

PRICES = """\
provider,instance,gpus,gpu_model,usd_per_hour,price_region,as_of,source,year
aws,p5.48xlarge,8,H100-SXM,30.0,us-east-1,2026-01,our negotiated price,2026
"""


@pytest.fixture(autouse=True)
def _no_config_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No configuration of the machine running the tests leaks in."""
    monkeypatch.delenv(ENV_CONFIG, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))


def write(tmp_path: Path, text: str, name: str = "config.toml") -> Path:
    p = tmp_path / name
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(textwrap.dedent(text))
    return p


def test_every_key_is_read(tmp_path: Path) -> None:
    p = write(tmp_path / "etc", FULL)
    write(tmp_path / "etc", PRICES, "prices.csv")
    cfg = load_config(p)
    assert cfg.extra_instances["aws:p5.48xlarge"].usd_per_hour == 30.0
    assert cfg == Config(
        path=p,
        region="FR",  # stripped
        pue=1.2,
        server_watts=50.0,
        memory_watts_per_gib=0.5,
        cpu_tdp_watts=280.0,
        embodied=True,
        electricitymaps_token="tok",
        electricitymaps_url="https://api.electricitymap.org/v3",
        instance_type="aws:p5.48xlarge",
        discount=0.6,
        usd_per_gpu_hour=2.1,
        usd_per_hour=0.0,
        usd_per_kwh=0.15,
        precision="bf16",
        catalog_cloud_instances=tmp_path / "etc" / "prices.csv",  # next to the config file
        extra_instances=cfg.extra_instances,
    )


def test_numbers_are_floats() -> None:
    cfg = parse_config({"energy": {"pue": 1, "server_watts": 3}})
    assert isinstance(cfg.pue, float) and isinstance(cfg.server_watts, float)


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ("[cost]\nusd_per_hour = -1", "cost.usd_per_hour = -1 must not be negative"),
        ("[cost]\nusd_per_gpu_hour = -0.5", "cost.usd_per_gpu_hour = -0.5 must not be negative"),
        ("[cost]\nusd_per_kwh = -0.1", "cost.usd_per_kwh = -0.1 must not be negative"),
        ("[energy]\nserver_watts = -5", "energy.server_watts = -5 must not be negative"),
        (
            "[energy]\nmemory_watts_per_gib = -1.0",
            "energy.memory_watts_per_gib = -1.0 must not be negative",
        ),
        ("[energy]\ncpu_tdp_watts = 0", "energy.cpu_tdp_watts = 0 must be positive"),
        ("[energy]\npue = 0.9", "energy.pue = 0.9 is out of range (a finite number from 1 to 10"),
        (
            "[cost]\ndiscount = 1",
            "cost.discount = 1 is out of range (a finite number from 0 to below 1",
        ),
        ("[cost]\ndiscount = 1.5", "cost.discount = 1.5 is out of range"),
        ("[cost]\ndiscount = -0.1", "cost.discount = -0.1 must not be negative"),
        ("[energy]\npue = 'high'", "energy.pue = 'high' must be a number"),
        ("[cost]\nusd_per_kwh = true", "cost.usd_per_kwh = True must be a number"),
        ("[cost]\nusd_per_hour = [1]", "cost.usd_per_hour = [1] must be a number"),
        ("[energy]\npue = inf", "energy.pue = inf is not a finite number (a finite number from 1"),
        ("[energy]\npue = nan", "energy.pue = nan is not a finite number"),
        ("[energy]\ncpu_tdp_watts = 1e400", "energy.cpu_tdp_watts = inf is not a finite number"),
        ("[energy]\ncpu_tdp_watts = -inf", "energy.cpu_tdp_watts = -inf is not a finite number"),
        ("[energy]\nserver_watts = 1e9", "energy.server_watts = 1000000000.0 is out of range"),
        ("[cost]\nusd_per_kwh = nan", "cost.usd_per_kwh = nan is not a finite number"),
        ("[cost]\nusd_per_gpu_hour = inf", "cost.usd_per_gpu_hour = inf is not a finite number"),
        ("[cost]\ndiscount = nan", "cost.discount = nan is not a finite number"),
        ("[energy]\nmemory_watts_per_gib = +inf", "memory_watts_per_gib = inf is not a finite"),
        ("[carbon]\nembodied = 'yes'", "carbon.embodied = 'yes' must be true or false"),
        ("[carbon]\nembodied = 1", "carbon.embodied = 1 must be true or false"),
        ("[location]\nregion = 5", "location.region = 5 must be a non-empty string"),
        ("[location]\nregion = '  '", "location.region = '  ' must be a non-empty string"),
        ("[cost]\ninstance_type = ''", "cost.instance_type = '' must be a non-empty string"),
        ("[catalog]\ncloud_instances = 3", "catalog.cloud_instances = 3 must be a non-empty"),
        ("[flops]\nprecision = 'fp7'", "flops.precision = 'fp7' must be one of fp64, fp32"),
        (
            "[carbon]\nelectricitymaps_url = 'api.electricitymap.org/v3'",
            "carbon.electricitymaps_url = 'api.electricitymap.org/v3' must be an http or https",
        ),
    ],
)
def test_bad_values_name_file_key_and_value(tmp_path: Path, toml: str, message: str) -> None:
    p = write(tmp_path, toml)
    with pytest.raises(ConfigError) as info:
        load_config(p)
    assert str(info.value).startswith(f"{p}: ")
    assert message in str(info.value)


def test_good_edge_values(tmp_path: Path) -> None:
    p = write(tmp_path, "[energy]\npue = 1\n[cost]\ndiscount = 0\nusd_per_hour = 0.0\n")
    cfg = load_config(p)
    assert (cfg.pue, cfg.discount, cfg.usd_per_hour) == (1.0, 0.0, 0.0)


def test_unknown_section_lists_the_known_ones(tmp_path: Path) -> None:
    p = write(tmp_path, "[prices]\nx = 1\n")
    with pytest.raises(ConfigError) as info:
        load_config(p)
    head, _, known = str(info.value).partition("; known: ")
    assert head == f"{p}: unknown section [prices]"
    names = known.split(", ")
    assert names == sorted(names)  # every section, in order (features add their own)
    assert {"carbon", "cost", "energy", "governance", "location", "privacy", "server"} <= set(names)


def test_unknown_key_lists_the_known_ones(tmp_path: Path) -> None:
    p = write(tmp_path, "[cost]\nusd_per_day = 1\n")
    with pytest.raises(ConfigError) as info:
        load_config(p)
    assert str(info.value) == (
        f"{p}: unknown key cost.usd_per_day; known: discount, instance_type, usd_per_gpu_hour, "
        "usd_per_hour, usd_per_kwh"
    )


def test_a_section_must_be_a_table(tmp_path: Path) -> None:
    p = write(tmp_path, 'cost = "cheap"\n')
    with pytest.raises(ConfigError, match=r"\[cost\] must be a table"):
        load_config(p)


def test_toml_syntax_error_names_the_file_and_line(tmp_path: Path) -> None:
    p = write(tmp_path, "[energy]\npue = 1.2\nserver_watts 50\n")
    with pytest.raises(ConfigError) as info:
        load_config(p)
    msg = str(info.value)
    assert msg.startswith(f"{p}: not valid TOML: ")
    assert "line 3" in msg


def test_unreadable_file(tmp_path: Path) -> None:
    p = tmp_path / "bad.toml"
    p.write_bytes(b"[location]\nregion = '\xff'\n")
    with pytest.raises(ConfigError, match=f"cannot read {p}"):
        load_config(p)
    d = tmp_path / "adir.toml"
    d.mkdir()
    with pytest.raises(ConfigError, match=f"cannot read {d}"):
        load_config(d)


def test_relative_catalog_paths_resolve_against_the_config_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = write(tmp_path / "a" / "b", "[catalog]\ncloud_instances = 'sub/prices.csv'\n")
    write(tmp_path / "a" / "b" / "sub", PRICES, "prices.csv")
    monkeypatch.chdir(tmp_path)  # not against the working directory
    cfg = load_config(p)
    assert cfg.catalog_cloud_instances == tmp_path / "a" / "b" / "sub" / "prices.csv"
    assert "aws:p5.48xlarge" in cfg.extra_instances


def test_home_in_a_catalog_path_is_expanded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    write(tmp_path / "home", PRICES, "prices.csv")
    cfg = load_config(write(tmp_path, "[catalog]\ncloud_instances = '~/prices.csv'\n"))
    assert cfg.catalog_cloud_instances == tmp_path / "home" / "prices.csv"


def test_missing_default_file_is_an_empty_configuration(tmp_path: Path) -> None:
    assert default_config_path() == tmp_path / "xdg" / "computewatch" / "config.toml"
    assert load_config() == Config()


def test_default_file_under_xdg_config_home(tmp_path: Path) -> None:
    write(tmp_path / "xdg" / "computewatch", "[location]\nregion = 'DE'\n")
    cfg = load_config()
    assert cfg.region == "DE"
    assert cfg.path == tmp_path / "xdg" / "computewatch" / "config.toml"


def test_default_without_xdg_is_under_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("XDG_CONFIG_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_config_path() == tmp_path / "home" / ".config" / "computewatch" / "config.toml"


def test_explicit_missing_file_is_an_error(tmp_path: Path) -> None:
    p = tmp_path / "nope.toml"
    with pytest.raises(ConfigError, match=f"configuration file {p} does not exist"):
        load_config(p)
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(str(p))


def test_environment_variable_is_honoured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path / "xdg" / "computewatch", "[location]\nregion = 'DE'\n")
    p = write(tmp_path, "[location]\nregion = 'FR'\n", "env.toml")
    monkeypatch.setenv(ENV_CONFIG, str(p))
    assert load_config().region == "FR"  # the variable wins over the default file
    other = write(tmp_path, "[location]\nregion = 'PL'\n", "other.toml")
    assert load_config(other).region == "PL"  # an explicit path wins over the variable
    monkeypatch.setenv(ENV_CONFIG, str(tmp_path / "missing.toml"))
    with pytest.raises(ConfigError, match="does not exist"):
        load_config()  # named by the variable: it must exist


def test_parse_config_without_a_file_says_configuration() -> None:
    with pytest.raises(ConfigError, match=r"^configuration: energy.pue = 0.5"):
        parse_config({"energy": {"pue": 0.5}})
    assert parse_config({}) == Config()


@pytest.mark.parametrize("key", sorted(NUMBERS))
@pytest.mark.parametrize("literal", ["inf", "-inf", "nan", "1e400"])
def test_every_numeric_key_rejects_non_finite_values(
    tmp_path: Path, key: str, literal: str
) -> None:
    section, name = key.split(".")
    p = write(tmp_path, f"[{section}]\n{name} = {literal}\n")
    with pytest.raises(ConfigError, match=f"{key} = .* is not a finite number") as info:
        load_config(p)
    assert str(NUMBERS[key]) in str(info.value)  # the allowed range is named


@pytest.mark.parametrize("key", sorted(NUMBERS))
def test_every_numeric_key_rejects_a_huge_integer(key: str) -> None:
    section, name = key.split(".")
    with pytest.raises(ConfigError, match=r"is not a finite number|is out of range"):
        parse_config({section: {name: 10**400}})


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--config", "CFG"], "energy.pue = inf is not a finite number"),
        (["--pue", "inf"], "argument --pue: 'inf' is not a finite number"),
        (["--pue", "nan"], "argument --pue: 'nan' is not a finite number"),
        (["--interval", "nan"], "argument --interval: 'nan' is not a finite number"),
        (["--interval", "1e400"], "argument --interval: '1e400' is not a finite number"),
    ],
)
def test_non_finite_numbers_stop_the_command(
    cw: Any, tmp_path: Path, args: list[str], message: str
) -> None:
    cfg = write(tmp_path, "[energy]\npue = inf\n")
    marker = tmp_path / "ran"
    argv = [str(cfg) if a == "CFG" else a for a in args]
    r = cw("run", *argv, "--", sys.executable, "-c", f"open({str(marker)!r}, 'w')")
    assert r.returncode == 2, r.stderr
    assert message in r.stderr
    assert "Traceback" not in r.stderr
    assert not marker.exists()
