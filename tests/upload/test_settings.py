"""Where to upload: flag > environment > configuration; the token never shown."""

from __future__ import annotations

from pathlib import Path

import pytest

from computewatch.config import ConfigError, load_config, parse_config
from computewatch.upload.settings import ServerSettings, SettingsError, server_settings

URL = "https://cw.example.org"


def test_nothing_configured_means_no_uploads() -> None:
    assert server_settings(parse_config({}), environ={}) is None


def test_precedence_flag_env_config(tmp_path: Path) -> None:
    cfg = parse_config(
        {"server": {"url": URL + "/", "token": "cfgtok", "project": "p", "stream_interval": 5}}
    )
    s = server_settings(cfg, environ={})
    assert s == ServerSettings(URL, "cfgtok", "p", 5.0)
    env = {"COMPUTEWATCH_SERVER": "http://env:1", "COMPUTEWATCH_TOKEN": "envtok"}
    s = server_settings(cfg, environ=env)
    assert s is not None and (s.url, s.token) == ("http://env:1", "envtok")
    s = server_settings(cfg, url="http://flag:2", token="flagtok", environ=env)
    assert s is not None and (s.url, s.token) == ("http://flag:2", "flagtok")


def test_token_file(tmp_path: Path) -> None:
    tok = tmp_path / "token"
    tok.write_text("filetok\n")
    tok.chmod(0o600)  # a token file others can read is refused (tests/security)
    cfg = tmp_path / "config.toml"
    cfg.write_text(f'[server]\nurl = "{URL}"\ntoken_file = "token"\n')
    s = server_settings(load_config(cfg), environ={})
    assert s is not None and s.token == "filetok"
    assert s.stream_interval == 10.0
    tok.unlink()
    with pytest.raises(SettingsError, match="cannot read"):
        server_settings(load_config(cfg), environ={})


def test_token_never_in_repr_nor_errors(tmp_path: Path) -> None:
    s = ServerSettings(URL, "hunter2-token")
    assert "hunter2" not in repr(s)
    assert "hunter2" not in repr(parse_config({"server": {"url": URL, "token": "hunter2"}}))
    with pytest.raises(ConfigError) as info:
        parse_config({"server": {"url": URL, "token": 12345678}})
    assert "12345678" not in str(info.value)


@pytest.mark.parametrize("bad", ["ftp://x", "cw.example.org", "http://"])
def test_bad_urls(bad: str) -> None:
    with pytest.raises(SettingsError, match="not an http or https URL"):
        server_settings(parse_config({}), url=bad, environ={})


def test_a_password_in_the_url_is_not_shown() -> None:
    with pytest.raises(SettingsError) as info:
        server_settings(parse_config({}), url="ftp://u:pw@x", environ={})
    assert ":pw@" not in str(info.value)
    s = server_settings(parse_config({}), url="https://u:pw@x", environ={})
    assert s is not None and s.shown_url == "https://u:***@x"


@pytest.mark.parametrize("value", [0, 0.5, 7200, "10"])
def test_stream_interval_range(value: object) -> None:
    with pytest.raises(ConfigError, match="stream_interval"):
        parse_config({"server": {"url": URL, "stream_interval": value}})
