"""``computewatch node-key``: this machine's node key, which signs the usage reports it uploads
(docs/upload.md, "Signed usage reports"). Prints its key id and public key (created on first
use at ``$COMPUTEWATCH_HOME/node-key.pem``, mode 0600): what an operator gives the server's admin
to register (``computewatch server node-key add``)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from computewatch import jsonout

__all__ = ["add_nodekey_parser", "cmd_node_key"]


def add_nodekey_parser(sub: Any) -> argparse.ArgumentParser:
    """Add ``node-key`` to the CLI's subcommands."""
    p: argparse.ArgumentParser = sub.add_parser(
        "node-key",
        help="this machine's key that signs the usage reports it uploads (created if missing)",
        description="Print this machine's node key id and public key (base64 of its 32 raw "
        "bytes), creating the key at $COMPUTEWATCH_HOME/node-key.pem (mode 0600) when it is "
        "missing. Give the public key to the server's admin, who registers it: computewatch "
        "server node-key add PUBLIC_KEY --team TEAM --name NAME.",
    )
    p.add_argument("--json", action="store_true", help="JSON: {key_id, public_key, path}")
    return p


def cmd_node_key(args: argparse.Namespace) -> int:
    # this command's modules load when it runs, not when `computewatch` starts (start-up time)
    from computewatch.ledger.keys import encode_public, key_id, load_or_create_private_key
    from computewatch.upload.signing import node_key_path

    path = node_key_path()
    existed = path.exists()
    public = load_or_create_private_key(path).public_key()
    doc = {"key_id": key_id(public), "public_key": encode_public(public), "path": str(path)}
    if not existed:
        print(f"computewatch: created the node key {path}", file=sys.stderr)
    if args.json:
        jsonout.dump(doc, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    print(f"key id:     {doc['key_id']}")
    print(f"public key: {doc['public_key']}")
    print(f"file:       {doc['path']}")
    return 0
