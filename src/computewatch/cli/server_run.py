"""``computewatch server``, ``server token ...`` and ``server node-key ...``: the command (flags in
:mod:`computewatch.cli.server`)."""

from __future__ import annotations

import argparse
import datetime
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from computewatch import jsonout
from computewatch.server.serve import serve
from computewatch.serverdb.engine import display_url, open_database, parse_url, upgrade
from computewatch.serverdb.errors import ServerDbError
from computewatch.serverdb.node_keys import (
    NodeKeyInfo,
    add_node_key,
    list_node_keys,
    revoke_node_key,
)
from computewatch.serverdb.tokens import TokenInfo, create_token, list_tokens, revoke_token

__all__ = ["cmd_server"]


def _when(t: float | None) -> str:
    if t is None:
        return "-"
    return datetime.datetime.fromtimestamp(t, datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")


def _token_doc(t: TokenInfo) -> dict[str, object]:
    return {
        "id": t.id,
        "name": t.name,
        "team": t.team,
        "scope": t.scope,
        "created_at": t.created_at,
        "last_used_at": t.last_used_at,
        "revoked_at": t.revoked_at,
    }


@contextmanager
def _admin_session(args: argparse.Namespace) -> Iterator[Session]:
    """A session on ``--db`` (migrated first) for the admin subcommands; a database that
    cannot be used is one ServerDbError naming it (without its password)."""
    url = parse_url(getattr(args, "db", None))
    db = open_database(url)
    try:
        upgrade(db)
        with db.session() as session:
            yield session
    except DBAPIError as e:
        raise ServerDbError(
            f"database {display_url(url)} cannot be used: {type(e.orig).__name__}"
        ) from None
    finally:
        db.dispose()


def _tokens(args: argparse.Namespace) -> int:
    with _admin_session(args) as session:
        if args.token_cmd == "create":
            token, _ = create_token(session, team=args.team, scope=args.scope, name=args.name)
            print(token)
            return 0
        if args.token_cmd == "list":
            tokens = list_tokens(session, team=args.team)
            if args.json:
                print(jsonout.dumps([_token_doc(t) for t in tokens], indent=2))
                return 0
            if not tokens:
                print("no tokens", file=sys.stderr)
                return 0
            print(f"{'ID':>4}  {'TEAM':<16} {'SCOPE':<7} {'CREATED':<20} {'LAST USED':<20} "
                  "REVOKED  NAME")  # fmt: skip
            for t in tokens:
                print(
                    f"{t.id:>4}  {t.team:<16} {t.scope:<7} {_when(t.created_at):<20} "
                    f"{_when(t.last_used_at):<20} {'yes' if t.revoked_at else 'no':<8} "
                    f"{t.name or ''}"
                )
            return 0
        info = revoke_token(session, args.token_id)
        if info is None:
            raise ServerDbError(f"no token {args.token_id} (see 'server token list')")
        print(f"token {info.id} ({info.team}, {info.scope}) revoked", file=sys.stderr)
        return 0


def _node_keys(args: argparse.Namespace) -> int:
    with _admin_session(args) as session:
        if args.node_key_cmd == "add":
            info = add_node_key(session, args.public_key, team=args.team, name=args.name)
            print(
                f"node key {info.key_id} registered for team {info.team} ({info.name})",
                file=sys.stderr,
            )
            print(info.key_id)
            return 0
        if args.node_key_cmd == "list":
            keys = list_node_keys(session, team=args.team)
            if args.json:
                print(jsonout.dumps([k.as_dict() for k in keys], indent=2))
                return 0
            if not keys:
                print("no node keys", file=sys.stderr)
                return 0
            print(f"{'KEY ID':<16}  {'TEAM':<16} {'REGISTERED':<20} {'REVOKED':<20} NAME")
            for k in keys:
                print(_node_key_line(k))
            return 0
        info = revoke_node_key(session, args.key_id)
        print(f"node key {info.key_id} ({info.team}, {info.name}) revoked", file=sys.stderr)
        return 0


def _node_key_line(k: NodeKeyInfo) -> str:
    return (
        f"{k.key_id:<16}  {k.team:<16} {_when(k.registered_at):<20} "
        f"{_when(k.revoked_at):<20} {k.name}"
    )


def cmd_server(args: argparse.Namespace) -> int:
    if args.server_cmd == "token":
        return _tokens(args)
    if args.server_cmd == "node-key":
        return _node_keys(args)
    return serve(
        db=args.db,
        listen=args.listen,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        allow_insecure_listen=args.allow_insecure_listen,
        log_level=args.log_level,
        require_signed=args.require_signed,
        forwarded_allow_ips=args.forwarded_allow_ips,
        body_timeout=args.body_timeout,
        allowed_origins=args.allowed_origin,
        max_queued_uploads=args.max_queued_uploads,
    )
