"""``computewatch server``: the parser (the command is :mod:`computewatch.cli.server_run`; the
library side is computewatch.server and computewatch.serverdb).

``server`` runs the server; ``server token create|list|revoke`` manages its tokens and
``server node-key add|list|revoke`` the node keys that sign usage reports, on the same
``--db``. Problems found before the server starts are one line on standard error and exit status
2 (a bad flag or URL) or 1 (a database that cannot be used).
"""

from __future__ import annotations

import argparse
from typing import Any
from urllib.parse import urlsplit

__all__ = ["DEFAULT_SERVER_LISTEN", "add_server_parser"]

DEFAULT_SERVER_LISTEN = "127.0.0.1:8765"  # computewatch.server.serve.DEFAULT_LISTEN
DEFAULT_FORWARDED_ALLOW_IPS = "127.0.0.1,::1"  # computewatch.server.serve's, likewise
SCOPES = ("ingest", "read", "admin")  # computewatch.serverdb.tokens.SCOPES
LOG_LEVELS = ("critical", "error", "warning", "info", "debug")
DEFAULT_BODY_TIMEOUT_SECONDS = 30.0  # computewatch.server.bodies's
DEFAULT_MAX_QUEUED_UPLOADS = 32  # computewatch.server.admission's

_DB_HELP = (
    "database URL: sqlite:///PATH or postgresql+psycopg://USER:PASSWORD@HOST:PORT/NAME "
    "(default sqlite:///$COMPUTEWATCH_HOME/server.db)"
)


def _token_id(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a token id (see 'token list'), not {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"a token id (see 'token list'), not {text!r}")
    return v


def _positive_seconds(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a number of seconds, not {text!r}") from None
    if not 0 < v <= 3600:
        raise argparse.ArgumentTypeError(f"between 0 and 3600 seconds, not {text!r}")
    return v


def _queue_length(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a number of uploads, not {text!r}") from None
    if not 0 <= v <= 100_000:
        raise argparse.ArgumentTypeError(f"between 0 and 100000, not {text!r}")
    return v


def _origin(text: str) -> str:
    t = text.strip().rstrip("/")
    try:
        parts = urlsplit(t)
        ok = parts.scheme in ("http", "https") and bool(parts.hostname) and parts.port != 0
    except ValueError:  # a port that is not a number
        ok = False
    if not ok or parts.path or parts.query or parts.fragment or parts.username:
        raise argparse.ArgumentTypeError(
            f"an origin such as https://cw.example.org or http://host:8765, not {text!r}"
        )
    return t


def add_server_parser(sub: Any) -> None:
    """Add ``server`` to the CLI's subcommands (``sub``: argparse's subparsers action)."""
    s = sub.add_parser(
        "server",
        help="the organisation's server: runs uploaded from every machine, API and dashboard",
        description="Serve the runs pushed by every machine (computewatch push) over HTTP: "
        "the REST API under /api/v1, live events and the dashboard, on SQLite (one machine) "
        "or PostgreSQL (several server processes may share one). Stops on SIGTERM or SIGINT. "
        "'server token ...' manages its tokens.",
    )
    s.add_argument("--db", metavar="URL", help=_DB_HELP)
    s.add_argument(
        "--listen",
        metavar="HOST:PORT",
        default=DEFAULT_SERVER_LISTEN,
        help=f"address to serve on (default {DEFAULT_SERVER_LISTEN}; a non-loopback address "
        "needs --tls-cert/--tls-key or --allow-insecure-listen)",
    )
    s.add_argument("--tls-cert", metavar="FILE", help="serve HTTPS with this certificate (PEM)")
    s.add_argument("--tls-key", metavar="FILE", help="... and this private key (PEM)")
    s.add_argument(
        "--allow-insecure-listen",
        action="store_true",
        help="serve plain HTTP on a non-loopback address (behind a TLS proxy on another "
        "host, or a network you trust): tokens then cross it in clear",
    )
    s.add_argument(
        "--log-level", choices=LOG_LEVELS, default="info", help="default info (access log)"
    )
    s.add_argument(
        "--forwarded-allow-ips",
        metavar="LIST",
        default=DEFAULT_FORWARDED_ALLOW_IPS,
        help="addresses and networks (comma-separated) whose X-Forwarded-For and "
        "X-Forwarded-Proto are believed: your reverse proxy's (default "
        f"{DEFAULT_FORWARDED_ALLOW_IPS}, a proxy on this host; '' believes none)",
    )
    s.add_argument(
        "--require-signed",
        action="store_true",
        help="refuse uploads whose usage report is unsigned or signed by a key not registered "
        "for the team ('server node-key add'); without it they are stored and marked so",
    )
    s.add_argument(
        "--body-timeout",
        metavar="SECONDS",
        type=_positive_seconds,
        default=DEFAULT_BODY_TIMEOUT_SECONDS,
        help="seconds a request's body has to arrive in full; a slower one is answered 408 "
        f"(default {DEFAULT_BODY_TIMEOUT_SECONDS:g})",
    )
    s.add_argument(
        "--allowed-origin",
        metavar="URL",
        action="append",
        default=[],
        type=_origin,
        help="the dashboard's public origin (https://cw.example.org) when a reverse proxy "
        "rewrites the Host header; browser requests from any other origin that change "
        "state are refused (repeatable)",
    )
    s.add_argument(
        "--max-queued-uploads",
        metavar="N",
        type=_queue_length,
        default=DEFAULT_MAX_QUEUED_UPLOADS,
        help="uploads that may wait for their turn to be stored; the next is answered 429 "
        f"with Retry-After at once (default {DEFAULT_MAX_QUEUED_UPLOADS})",
    )
    ssub = s.add_subparsers(dest="server_cmd", metavar="SUBCOMMAND")
    t = ssub.add_parser("token", help="create, list or revoke API tokens")
    tsub = t.add_subparsers(dest="token_cmd", metavar="ACTION", required=True)

    def with_db(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
        # SUPPRESS: 'server --db URL token ...' keeps its URL when this one is not given.
        p.add_argument("--db", metavar="URL", default=argparse.SUPPRESS, help=_DB_HELP)
        return p

    c = with_db(
        tsub.add_parser(
            "create",
            help="make a token and print it (only the token, on standard output)",
            description="Make a token for TEAM with SCOPE: ingest (upload and read the "
            "team's runs), read (read the team's runs) or admin (every team). Only its hash is "
            "kept: the token is printed once.",
        )
    )
    c.add_argument("--team", required=True, metavar="TEAM")
    c.add_argument("--scope", required=True, choices=SCOPES)
    c.add_argument("--name", metavar="N", help="a note: whose or what for")
    ls = with_db(tsub.add_parser("list", help="list tokens (never the tokens themselves)"))
    ls.add_argument("--json", action="store_true", help="JSON output")
    ls.add_argument("--team", metavar="TEAM", help="only this team's")
    rv = with_db(tsub.add_parser("revoke", help="revoke a token (and its browser sessions)"))
    rv.add_argument("token_id", type=_token_id, metavar="ID", help="the id 'token list' shows")

    nk = ssub.add_parser(
        "node-key",
        help="register, list or revoke the node keys that sign usage reports",
        description="Node keys sign the usage reports their machines upload "
        "(computewatch node-key prints a machine's). A report signed by a registered, "
        "unrevoked key of the uploading team is 'valid'. Registering and revoking append "
        "node_key entries to the ledger (docs/ledger.md).",
    )
    nsub = nk.add_subparsers(dest="node_key_cmd", metavar="ACTION", required=True)
    na = with_db(nsub.add_parser("add", help="register a node's public key for a team"))
    na.add_argument(
        "public_key",
        metavar="PUBLIC_KEY",
        help="the base64 public key 'computewatch node-key' prints on the node",
    )
    na.add_argument("--team", required=True, metavar="TEAM")
    na.add_argument("--name", required=True, metavar="N", help="the node or client it is for")
    nl = with_db(nsub.add_parser("list", help="list registered node keys"))
    nl.add_argument("--json", action="store_true", help="JSON output")
    nl.add_argument("--team", metavar="TEAM", help="only this team's")
    nr = with_db(nsub.add_parser("revoke", help="revoke a node key (later reports: unknown_key)"))
    nr.add_argument("key_id", metavar="KEY_ID", help="the key id 'node-key list' shows")
