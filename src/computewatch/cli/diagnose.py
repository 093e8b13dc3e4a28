"""``computewatch diagnose RUN``: the run's bottlenecks, with evidence and suggestions."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from computewatch import jsonout
from computewatch.errors import ComputewatchError, UsageError
from computewatch.escape import clean_text


def add_diagnose_parser(sub: Any) -> argparse.ArgumentParser:
    """Add ``diagnose`` to the CLI's subcommands."""
    p: argparse.ArgumentParser = sub.add_parser(
        "diagnose",
        help="why a run was slow or wasteful: findings with evidence and suggestions",
        description="Apply the diagnosis rules to a stored run (data-loader starvation, low "
        "GPU utilization or MFU, CPU-bound, memory pressure, I/O, throttling, step-time "
        "regressions and outliers, idle GPUs, stragglers, communication) and list what they "
        "find, the most time or money at stake first. Thresholds: docs/diagnosis.md, "
        "overridable in the configuration file's [diagnosis] section.",
    )
    p.add_argument(
        "run", type=clean_text, metavar="RUN", help="id, unique id prefix, name, or 'last'"
    )
    p.add_argument("--json", action="store_true", help="JSON output")
    p.add_argument(
        "--config",
        metavar="FILE",
        help="configuration file for [diagnosis] thresholds (default: $COMPUTEWATCH_CONFIG or "
        "~/.config/computewatch/config.toml)",
    )
    p.add_argument(
        "--db",
        metavar="PATH",
        help="database file (default: $COMPUTEWATCH_HOME/computewatch.db, else "
        "~/.local/share/computewatch/computewatch.db)",
    )
    return p


def cmd_diagnose(args: argparse.Namespace) -> int:
    """Diagnose one run; exit 0 whether or not anything was found."""
    # this command's modules load when it runs, not when `computewatch` starts (start-up time)
    from computewatch.analysis.summary_types import (
        DiagnosisReport,
        DiagnosisSection,
        stored_diagnosis,
    )
    from computewatch.config import ConfigError, load_config
    from computewatch.diagnosis.engine import as_thresholds, diagnose_run
    from computewatch.paths import resolve_db_path
    from computewatch.store.spooled import open_store
    from computewatch.views.text import print_diagnosis

    try:
        thresholds = as_thresholds(load_config(args.config).diagnosis)
    except ConfigError as e:
        raise UsageError(str(e)) from None
    path = resolve_db_path(args.db)
    if not path.exists():
        raise ComputewatchError(
            f"no database at {path}" if args.db else f"no runs recorded yet ({path})"
        )
    # read-only when it cannot be written (a read-only mount), as `runs`, `show` and `report`
    with open_store(path) as store:
        run = store.find_run(args.run)
        if run.samples_deleted_at is not None:
            stored = stored_diagnosis((run.summary or {}).get("diagnosis"))
            if stored is None:
                raise ComputewatchError(
                    f"the samples of run {run.id} were deleted by gc and it has no stored diagnosis"
                )
            note = "samples deleted by gc: the diagnosis stored when the run ended"
            section: DiagnosisSection = {**stored, "note": note}
        else:
            section = diagnose_run(store, run, thresholds=thresholds).as_dict()
    summary = run.summary or {}
    result: DiagnosisReport = {
        "run": {
            "id": run.id,
            "name": run.name,
            "status": run.status,
            "duration_seconds": summary.get("duration_seconds")
            or (run.ended_at - run.started_at if run.ended_at else None),
        },
        **section,
        "thresholds": thresholds.as_dict(),
    }
    if args.json:
        jsonout.dump(result, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print_diagnosis(result, sys.stdout)
    return 0
