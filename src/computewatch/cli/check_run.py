"""``computewatch check``: the command (flags: cli/check.py)."""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict
from pathlib import Path

from computewatch import jsonout
from computewatch.analysis.summary import current_summary
from computewatch.bench.gate import (
    DEFAULT_LIMITS,
    BaselineError,
    Measurements,
    baseline_document,
    check,
    dumps_baseline,
    measurements_from_summary,
    parse_baseline,
    parse_limit,
    step_times,
)
from computewatch.errors import ComputewatchError, UsageError
from computewatch.paths import resolve_db_path
from computewatch.store import Store
from computewatch.store.spooled import open_store
from computewatch.views.bench import print_check

__all__ = ["cmd_check"]


def _open(args: argparse.Namespace) -> Store:
    path = resolve_db_path(args.db)
    if not path.exists():
        raise UsageError(f"no runs recorded yet ({path} does not exist)")
    return open_store(path)


def _of_run(store: Store, ref: str, what: str = "run") -> Measurements:
    try:
        row = store.find_run(ref)
    except ComputewatchError as e:  # no such run: the command was asked wrong (exit 2)
        raise UsageError(f"{what} {ref!r}: {e}") from None
    summary = current_summary(store, row)
    bench = store.meta(row.key).get("bench")
    return measurements_from_summary(
        summary,
        step_times(store.steps(row.key)),
        bench if isinstance(bench, dict) else None,
        source=f"run {row.id}" + (f" ({row.name})" if row.name else ""),
    )


def _looks_like_file(ref: str) -> bool:
    return ref.endswith(".json") or "/" in ref or ref.startswith(".")


def cmd_check(args: argparse.Namespace) -> int:
    """Run ``computewatch check``: 0 within limits, 1 on a regression (or a missing figure),
    2 for a usage error: a run or baseline that does not exist, a baseline file that cannot be
    read, a bad limit."""
    limits = [parse_limit(t, "max") for t in args.max] + [parse_limit(t, "min") for t in args.min]
    with _open(args) as store:
        current = _of_run(store, args.run)
        if args.write_baseline:
            Path(args.write_baseline).write_text(
                dumps_baseline(baseline_document(current)), "utf-8"
            )
            print(f"baseline of {current.source} written to {args.write_baseline}")
            return 0
        if not args.baseline:
            raise UsageError("give --baseline RUN|FILE (or --write-baseline FILE)")
        path = Path(args.baseline)
        if path.is_file():
            try:
                text = path.read_text("utf-8")
            except (OSError, UnicodeDecodeError) as e:
                raise BaselineError(f"cannot read baseline {path}: {e}") from None
            base, _tests = parse_baseline(text, str(path))
            if base is None:
                raise BaselineError(f"{path}: holds only tests' figures (the pytest plugin's)")
        elif _looks_like_file(args.baseline) and not path.exists():
            raise UsageError(f"baseline file {path} does not exist")
        else:
            base = _of_run(store, args.baseline, "baseline run")
    result = check(
        current,
        base,
        limits or DEFAULT_LIMITS,
        noise_aware=not args.values_only,
        alpha=args.alpha,
    )
    if args.json:
        print(jsonout.dumps(asdict(result), indent=2))
    else:
        print_check(result, sys.stdout)
    return 1 if result.regressed or result.missing else 0
