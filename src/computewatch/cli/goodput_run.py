"""``computewatch goodput``: a training's goodput from the local store or from a server. Loaded
only when the command runs (cli/main.py's COMMANDS), so it imports the library at the top."""

from __future__ import annotations

import argparse
import sys
import urllib.parse
from typing import Any

from computewatch import jsonout
from computewatch.config import ConfigError, load_config
from computewatch.errors import ComputewatchError, UsageError
from computewatch.goodput.json import GoodputJson, report_json
from computewatch.goodput.local import local_goodput
from computewatch.governance.remote import Remote
from computewatch.paths import resolve_db_path
from computewatch.store.spooled import open_store
from computewatch.upload.settings import SettingsError, server_settings
from computewatch.views.goodput import print_goodput


class GoodputRemote(Remote):
    """The server's ``GET /api/v1/goodput``, with the governance client's errors."""

    def goodput(self, query: str) -> Any:
        return self._json(f"/api/v1/goodput?{query}")


def cmd_goodput(args: argparse.Namespace) -> int:
    """Print the goodput of ``--model`` or ``--job``'s runs; exit 1 when there are none."""
    if args.server and args.db:
        raise UsageError("give --server or --db, not both")
    if args.token and not args.server:
        raise UsageError("--token goes with --server")
    result: GoodputJson
    if args.server:
        result = _from_server(args)
    else:
        path = resolve_db_path(args.db)
        if not path.exists():
            raise ComputewatchError(f"no database at {path}")
        store = open_store(path)
        try:
            result = report_json(local_goodput(store, model=args.model, job=args.job))
        finally:
            store.close()
    if not result["runs"]:
        what = f"model {args.model}" if args.model else f"job {args.job}"
        raise ComputewatchError(
            f"no runs of {what}"
            + (" (declare it with run --model)" if args.model else " (tag runs with job=KEY)")
        )
    if args.json:
        jsonout.dump(result, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print_goodput(result, sys.stdout)
    return 0


def _from_server(args: argparse.Namespace) -> Any:
    try:
        settings = server_settings(load_config(args.config), url=args.server, token=args.token)
    except (ConfigError, SettingsError) as e:
        raise UsageError(str(e)) from None
    if settings is None:  # pragma: no cover - --server is given
        raise UsageError("--server: no server given")
    query = urllib.parse.urlencode({"model": args.model} if args.model else {"job": args.job})
    return GoodputRemote(settings.url, settings.token).goodput(query)
