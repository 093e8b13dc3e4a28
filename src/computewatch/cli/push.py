"""``computewatch push [RUN ...] [--all]``: upload runs to a team's ``computewatch server``;
``computewatch push --trackers [RUN ...]``: deliver what the experiment trackers did not
receive during the runs (docs/trackers.md)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from computewatch import jsonout
from computewatch.errors import PROG, ComputewatchError, UsageError
from computewatch.escape import clean_text


def add_push_parser(sub: Any) -> argparse.ArgumentParser:
    """Add ``push`` to the CLI's subcommands."""
    p: argparse.ArgumentParser = sub.add_parser(
        "push",
        help="upload runs to a computewatch server (those it does not hold yet)",
        description="Upload stored runs to a computewatch server: with no RUN, every finished "
        "run the server does not hold yet. A run pushed twice is stored once. The server and "
        "token: --server/--token, else COMPUTEWATCH_SERVER/COMPUTEWATCH_TOKEN, else the "
        "configuration's [server] section (docs/upload.md).",
    )
    p.add_argument(
        "runs",
        nargs="*",
        type=clean_text,
        metavar="RUN",
        help="id, unique id prefix, name, or 'last' (sent whatever their state)",
    )
    p.add_argument(
        "--all",
        action="store_true",
        help="every run, running ones as they are now and those already sent again (the "
        "server keeps one copy of each)",
    )
    p.add_argument(
        "--trackers",
        action="store_true",
        help="instead: deliver to the experiment trackers (MLflow, W&B, TensorBoard, Neptune) "
        "what they did not receive during the runs (kept when one was down or given up at "
        "the run's end; with no RUN, every run with something kept); exit 1 when a tracker "
        "still could not take it (it stays kept)",
    )
    p.add_argument("--server", metavar="URL", help="the server's base URL")
    p.add_argument(
        "--token",
        metavar="T",
        help="an ingest token (prefer COMPUTEWATCH_TOKEN or [server] token_file: a flag is "
        "visible to other users in the process list)",
    )
    p.add_argument("--json", action="store_true", help="JSON output")
    p.add_argument(
        "--config",
        metavar="FILE",
        help="configuration file (default: $COMPUTEWATCH_CONFIG or "
        "~/.config/computewatch/config.toml)",
    )
    p.add_argument(
        "--db",
        metavar="PATH",
        help="database file (default: $COMPUTEWATCH_HOME/computewatch.db, else "
        "~/.local/share/computewatch/computewatch.db)",
    )
    return p


def cmd_push(args: argparse.Namespace) -> int:
    """Push; exit 0 when everything chosen went (or was already there), 1 when the server
    could not be reached or refused (the runs stay local), 2 for bad settings."""
    # this command's modules load when it runs, not when `computewatch` starts (start-up time)
    from computewatch.config import ConfigError, load_config
    from computewatch.paths import resolve_db_path
    from computewatch.redact import use_names
    from computewatch.store.spooled import open_store
    from computewatch.upload.client import Client
    from computewatch.upload.push import plan_push, push_runs
    from computewatch.upload.settings import server_settings
    from computewatch.upload.signing import ReportSigner

    if args.all and args.runs:
        raise UsageError("give RUN ... or --all, not both")
    if args.trackers:
        return _push_trackers(args)
    try:
        config = load_config(args.config)
    except ConfigError as e:
        raise UsageError(str(e)) from None
    use_names(config.redact_names)
    settings = server_settings(config, url=args.server, token=args.token)
    if settings is None:
        raise UsageError(
            "no server to push to: give --server URL, set COMPUTEWATCH_SERVER, or add "
            "[server] url to the configuration (docs/upload.md)"
        )
    path = resolve_db_path(args.db)
    if not path.exists():
        raise ComputewatchError(
            f"no database at {path}" if args.db else f"no runs recorded yet ({path})"
        )
    client = Client(settings.url, settings.token)
    with open_store(path) as store:
        chosen = [store.find_run(ref) for ref in args.runs] if args.runs else None
        plan, skipped = plan_push(store, settings.url, chosen, everything=args.all)
        signer = ReportSigner(enabled=settings.sign)
        report = push_runs(
            store, client, plan, server=settings.url, project=settings.project, signer=signer
        )
        report.skipped[:0] = skipped
        notices = list(store.notices)
    if args.json:
        jsonout.dump(report.as_dict(), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        _print_report(report.stored, report.already, report.skipped, args.runs or args.all)
    for line in [*notices, *report.notes]:
        print(f"{PROG}: {line}", file=sys.stderr)
    if report.error is not None:
        left = len(plan) - len(report.stored) - len(report.already)
        raise type(report.error)(
            f"{report.error}; {left} run(s) not sent stay in the local store for the next push"
        )
    return 0


def _print_report(
    stored: list[str], already: list[str], skipped: list[tuple[str, str]], verbose: bool
) -> None:
    out = sys.stdout
    for run_id in stored:
        print(f"sent     {run_id}", file=out)
    for run_id in already:
        print(f"held     {run_id} (the server had it already)", file=out)
    quiet_skips = 0
    for run_id, why in skipped:
        if why == "already uploaded" and not verbose:
            quiet_skips += 1
            continue
        print(f"skipped  {run_id} ({why})", file=out)
    parts = [f"{len(stored)} sent"]
    if already:
        parts.append(f"{len(already)} already on the server")
    if skipped:
        parts.append(
            f"{len(skipped)} skipped" + (f" ({quiet_skips} sent before)" if quiet_skips else "")
        )
    print(", ".join(parts), file=out)


def _push_trackers(args: argparse.Namespace) -> int:
    """``push --trackers``: one line per tracker of each run; exit 1 when one is left."""
    # this option's modules load when it runs (the command line's start-up time)
    from computewatch.paths import resolve_db_path
    from computewatch.store import Store, StoreError
    from computewatch.trackers.backlog import runs_with_backlog
    from computewatch.trackers.replay import deliver_kept

    for flag, given in (("--all", args.all), ("--server", args.server), ("--token", args.token)):
        if given:
            raise UsageError(f"--trackers delivers to the trackers, not to a server: drop {flag}")
    path = resolve_db_path(args.db)
    if not path.exists():
        raise ComputewatchError(
            f"no database at {path}" if args.db else f"no runs recorded yet ({path})"
        )
    with Store.open_readonly(path) as store:
        if args.runs:
            rows = [store.find_run(ref) for ref in args.runs]
        else:
            rows = []
            for run_id in runs_with_backlog(path):
                try:
                    rows.append(store.find_run(run_id))
                except StoreError:  # a backlog of a run this store does not hold: left alone
                    continue
    done = deliver_kept(path, rows)
    if args.json:
        jsonout.dump([d.as_dict() for d in done], sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        if not done:
            print("nothing kept for the trackers: every tracker received its runs")
        for d in done:
            print(d.line())
    left = [d for d in done if not d.delivered]
    if left:
        raise ComputewatchError(
            f"{len(left)} tracker delivery(ies) not done; what they did not take stays kept for "
            "the next `computewatch push --trackers`"
        )
    return 0
