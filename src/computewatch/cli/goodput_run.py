"""``computewatch goodput``: a training's goodput from the local store or from a server."""

from __future__ import annotations

import argparse
import sys
import urllib.parse
from typing import Any

from computewatch import jsonout
from computewatch.errors import ComputewatchError, UsageError


def cmd_goodput(args: argparse.Namespace) -> int:
    """Print the goodput of ``--model`` or ``--job``'s runs; exit 1 when there are none."""
    # on use: the command's modules load when it runs (start-up time)
    from computewatch.goodput import report_json
    from computewatch.views.goodput import print_goodput

    if args.server and args.db:
        raise UsageError("give --server or --db, not both")
    if args.token and not args.server:
        raise UsageError("--token goes with --server")
    if args.server:
        result = _from_server(args)
    else:
        from computewatch.goodput import local_goodput
        from computewatch.paths import resolve_db_path
        from computewatch.store.spooled import open_store

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
    from computewatch.config import ConfigError, load_config
    from computewatch.governance.remote import Remote
    from computewatch.upload.settings import SettingsError, server_settings

    try:
        settings = server_settings(load_config(args.config), url=args.server, token=args.token)
    except (ConfigError, SettingsError) as e:
        raise UsageError(str(e)) from None
    if settings is None:  # pragma: no cover - --server is given
        raise UsageError("--server: no server given")

    class GoodputRemote(Remote):
        def goodput(self, query: str) -> Any:
            return self._json(f"/api/v1/goodput?{query}")

    query = urllib.parse.urlencode({"model": args.model} if args.model else {"job": args.job})
    return GoodputRemote(settings.url, settings.token).goodput(query)
