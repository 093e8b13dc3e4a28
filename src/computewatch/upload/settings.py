"""Where runs are uploaded and with which token: ``--server``/``--token`` flags, else
``COMPUTEWATCH_SERVER``/``COMPUTEWATCH_TOKEN``, else the configuration's ``[server]`` section.

The token is kept out of every ``repr`` and message: a :class:`ServerSettings` printed in a log
shows the URL, never the token.
"""

from __future__ import annotations

import os
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from computewatch.config import Config
from computewatch.errors import UsageError
from computewatch.paths import check_private_file
from computewatch.redact import redact_urls

__all__ = [
    "DEFAULT_STREAM_INTERVAL",
    "ENV_SERVER",
    "ENV_TOKEN",
    "ServerSettings",
    "SettingsError",
    "server_settings",
]

ENV_SERVER = "COMPUTEWATCH_SERVER"
ENV_TOKEN = "COMPUTEWATCH_TOKEN"
DEFAULT_STREAM_INTERVAL = 10.0
"""Seconds between live uploads of a running run (``[server] stream_interval``)."""


class SettingsError(UsageError):
    """A server URL or token that cannot be used (exit status 2); never shows the token."""


@dataclass(frozen=True, slots=True)
class ServerSettings:
    url: str
    """The server's base URL, without a trailing slash: also the key of the local uploads
    table, so one run uploaded to two servers is remembered for each."""
    token: str | None = field(default=None, repr=False)
    project: str | None = None
    """The project of runs without a ``project`` tag."""
    stream_interval: float = DEFAULT_STREAM_INTERVAL
    sign: bool = True
    """``[server] sign``: sign each upload with the node key (computewatch.upload.signing)."""

    @property
    def shown_url(self) -> str:
        """The URL as messages show it: a password in it replaced."""
        return redact_urls(self.url)


def _check_url(url: str, where: str) -> str:
    url = url.strip().rstrip("/")
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise SettingsError(f"{where}: {redact_urls(url)!r} is not an http or https URL")
    return url


def _token_file_error(message: str) -> SettingsError:
    return SettingsError(f"[server] token_file: {message}")


def _read_token_file(path: Path) -> str:
    check_private_file(path, "token file", _token_file_error)
    try:
        token = path.read_text().strip()
    except (OSError, UnicodeDecodeError) as e:
        why = e.strerror if isinstance(e, OSError) and e.strerror else type(e).__name__
        raise SettingsError(f"[server] token_file: cannot read {path}: {why}") from None
    if not token:
        raise SettingsError(f"[server] token_file: {path} is empty")
    return token


def server_settings(
    config: Config,
    *,
    url: str | None = None,
    token: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> ServerSettings | None:
    """The server to upload to, or None when none is configured anywhere. ``url`` and
    ``token`` are the command line's flags; each wins over its variable, which wins over the
    file. :class:`SettingsError` for a URL that is not http(s), or a token file not readable or
    that other users could read or change (``chmod 600`` is the fix)."""
    env = os.environ if environ is None else environ
    if url:
        chosen, where = url, "--server"
    elif env.get(ENV_SERVER):
        chosen, where = env[ENV_SERVER], ENV_SERVER
    elif config.server_url:
        chosen, where = config.server_url, "[server] url"
    else:
        return None
    if token:
        tok: str | None = token.strip()
    elif env.get(ENV_TOKEN):
        tok = env[ENV_TOKEN].strip()
    elif config.server_token:
        tok = config.server_token
    elif config.server_token_file is not None:
        tok = _read_token_file(config.server_token_file)
    else:
        tok = None
    return ServerSettings(
        url=_check_url(chosen, where),
        token=tok or None,
        project=config.server_project,
        stream_interval=config.server_stream_interval or DEFAULT_STREAM_INTERVAL,
        sign=config.server_sign,
    )
