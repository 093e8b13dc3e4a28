"""Running the server: the listen-address policy, TLS, logging without secrets, Uvicorn.

A loopback address (127.0.0.0/8, ::1, localhost) is served as asked. Any other address is
refused unless the server has TLS (``tls_cert`` and ``tls_key``) or the caller says it is
deliberate (``allow_insecure``: a reverse proxy on another host terminates TLS, or a trusted
network). Uvicorn's access log prints the method, path and status, never headers; no route
takes a token in its query string, and a log filter masks anything that looks like a token or
an ``Authorization`` value anyway.

Behind a reverse proxy the client's address and scheme come from ``X-Forwarded-For`` and
``X-Forwarded-Proto``, believed only from the addresses in ``forwarded_allow_ips`` (default
loopback: a proxy on the same host); from anywhere else they are ignored.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import re
import signal
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from computewatch.errors import UsageError
from computewatch.paths import check_private_file
from computewatch.serverdb.engine import display_url, parse_url

__all__ = [
    "DEFAULT_FORWARDED_ALLOW_IPS",
    "DEFAULT_LISTEN",
    "Listen",
    "RedactingFilter",
    "check_listen",
    "parse_forwarded_allow_ips",
    "parse_listen",
    "serve",
]

DEFAULT_LISTEN: Final = "127.0.0.1:8765"
DEFAULT_FORWARDED_ALLOW_IPS: Final = "127.0.0.1,::1"

_TOKENISH = re.compile(r"(cw_[A-Za-z0-9_-]{16,}|(?i:bearer)\s+\S+)")


class RedactingFilter(logging.Filter):
    """Masks tokens (``cw_...``) and ``Bearer ...`` values in every log record it sees."""

    def filter(self, record: logging.LogRecord) -> bool:
        # Masked in place, message and each argument: formatters (Uvicorn's access log) read
        # the arguments themselves.
        if isinstance(record.msg, str):
            record.msg = _TOKENISH.sub("***", record.msg)
        if isinstance(record.args, tuple):
            record.args = tuple(
                _TOKENISH.sub("***", a) if isinstance(a, str) else a for a in record.args
            )
        return True


@dataclass(frozen=True)
class Listen:
    host: str
    port: int

    @property
    def loopback(self) -> bool:
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False


def parse_listen(text: str) -> Listen:
    """``HOST:PORT`` (``[::1]:8765`` for IPv6)."""
    m = re.fullmatch(r"\[([0-9A-Fa-f:.]+)\]:(\d+)|([^:\[\]]+):(\d+)", text.strip())
    if not m:
        raise UsageError(f"--listen: expected HOST:PORT (or [IPv6]:PORT), not {text!r}")
    host = m.group(1) or m.group(3)
    port = int(m.group(2) or m.group(4))
    if not 0 < port < 65536:
        raise UsageError(f"--listen: port {port} out of range")
    return Listen(host, port)


def check_listen(listen: Listen, *, tls: bool, allow_insecure: bool) -> None:
    """Refuse a non-loopback address without TLS unless ``allow_insecure``."""
    if listen.loopback or tls or allow_insecure:
        return
    raise UsageError(
        f"--listen {listen.host}:{listen.port}: not a loopback address, and tokens would cross "
        "the network in clear: give --tls-cert and --tls-key, put a TLS reverse proxy in front "
        "on 127.0.0.1 (docs/server.md), or pass --allow-insecure-listen"
    )


def parse_forwarded_allow_ips(text: str) -> list[str]:
    """``--forwarded-allow-ips``: comma-separated addresses and networks (``10.0.0.5``,
    ``10.0.0.0/24``, ``::1``); empty: believe no forwarded header."""
    out: list[str] = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        try:
            # Written out as ipaddress does: Uvicorn reads a network with host bits set
            # (10.0.0.1/24) as a name that never matches.
            if "/" in item:
                out.append(str(ipaddress.ip_network(item, strict=False)))
            else:
                out.append(str(ipaddress.ip_address(item)))
        except ValueError:
            raise UsageError(
                f"--forwarded-allow-ips: {item!r} is not an IP address or network "
                "(for example 127.0.0.1,10.0.0.0/24)"
            ) from None
    return out


def _check_file(path: str, flag: str) -> None:
    if not os.path.isfile(path) or not os.access(path, os.R_OK):
        raise UsageError(f"{flag}: cannot read {path}")


def serve(
    *,
    db: str | None,
    listen: str = DEFAULT_LISTEN,
    tls_cert: str | None = None,
    tls_key: str | None = None,
    allow_insecure_listen: bool = False,
    log_level: str = "info",
    require_signed: bool = False,
    forwarded_allow_ips: str = DEFAULT_FORWARDED_ALLOW_IPS,
    body_timeout: float = 30.0,
    allowed_origins: Sequence[str] = (),
    max_queued_uploads: int = 32,
) -> int:
    """Run the server until SIGTERM or SIGINT; the exit status."""
    where = parse_listen(listen)
    trusted_proxies = parse_forwarded_allow_ips(forwarded_allow_ips)
    if bool(tls_cert) != bool(tls_key):
        raise UsageError("--tls-cert and --tls-key go together")
    if tls_cert and tls_key:
        _check_file(tls_cert, "--tls-cert")
        _check_file(tls_key, "--tls-key")
        check_private_file(tls_key, "TLS key (--tls-key)", UsageError)
    tls = bool(tls_cert)
    check_listen(where, tls=tls, allow_insecure=allow_insecure_listen)
    url = parse_url(db)
    # The server's third-party stack is imported when it runs, not by the CLI's parser.
    import uvicorn
    from sqlalchemy.exc import DBAPIError

    # The app and its database layer load the same stack (FastAPI, SQLAlchemy): at run time too.
    from computewatch.server import heap
    from computewatch.server.app import create_app
    from computewatch.serverdb.errors import ServerDbError

    try:
        app = create_app(
            url.render_as_string(hide_password=False),
            secure_cookies=tls,
            require_signed=require_signed,
            body_timeout=body_timeout,
            allowed_origins=allowed_origins,
            max_queued_uploads=max_queued_uploads,
        )
    except DBAPIError as e:
        raise ServerDbError(
            f"database {display_url(url)} cannot be used: {type(e.orig).__name__}: "
            f"{str(e.orig).strip().splitlines()[0] if str(e.orig).strip() else ''}"
        ) from None
    redact = RedactingFilter()
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access", "computewatch.server"):
        logging.getLogger(name).addFilter(redact)
    _log_like_uvicorn(logging.getLogger("computewatch.server"), log_level)
    scheme = "https" if tls else "http"
    host = f"[{where.host}]" if ":" in where.host else where.host
    print(
        f"computewatch server: {scheme}://{host}:{where.port} on {display_url(url)}",
        file=sys.stderr,
        flush=True,
    )
    config = uvicorn.Config(
        app,
        host=where.host,
        port=where.port,
        log_level=log_level,
        access_log=True,
        ssl_certfile=tls_cert,
        ssl_keyfile=tls_key,
        proxy_headers=True,
        # Given always, so Uvicorn's FORWARDED_ALLOW_IPS variable cannot widen it unseen.
        forwarded_allow_ips=trusted_proxies,
        server_header=False,
        timeout_graceful_shutdown=3,
    )
    server = uvicorn.Server(config)
    heap.tune_for_serving()  # the app and its imports are made: out of the collector's way
    # Uvicorn stops gracefully on SIGTERM/SIGINT and then raises the signal again with the
    # handler that was there before it: a no-op one here, so that a requested stop exits 0.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _stopped)
    server.run()
    return 0 if server.started else 1


def _log_like_uvicorn(logger: logging.Logger, level: str) -> None:
    """The server's own lines (a client gone mid-upload, a busy pool, a lost database) on
    standard error at ``--log-level``, shaped as Uvicorn's (``INFO:     ...``)."""
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(levelname)s:%(padding)s%(message)s"))
        handler.addFilter(_pad)
        logger.addHandler(handler)
    logger.setLevel(level.upper())
    logger.propagate = False


def _pad(record: logging.LogRecord) -> bool:
    record.padding = " " * max(1, 9 - len(record.levelname))
    return True


def _stopped(signum: int, frame: object) -> None:
    return None
