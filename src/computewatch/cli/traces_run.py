"""What ``computewatch import`` does once its flags are parsed (:mod:`.traces`)."""

from __future__ import annotations

import argparse
import sys
from typing import TypedDict

from computewatch import jsonout
from computewatch.accounting.engine import AccountingOptions, accounted, with_accounting
from computewatch.accounting.region import RegionError, resolve_location
from computewatch.analysis.summary import build_summary
from computewatch.config import ConfigError, load_config
from computewatch.diagnosis.engine import diagnosed
from computewatch.errors import UsageError
from computewatch.paths import resolve_db_path
from computewatch.store import Store
from computewatch.traces import read_trace
from computewatch.traces.importer import (
    DIGEST_TAG,
    already_imported,
    file_digest,
    import_trace,
    imported_runs,
    remove_imported,
)
from computewatch.units import format_duration, format_energy

__all__ = ["ImportedJson", "cmd_import"]

ENERGY_METHOD = "polled power, trapezoid integral"


class ImportedJson(TypedDict):
    """One run in ``import --json``'s ``runs``."""

    id: str
    name: str | None
    job: str
    samples: int
    gpus: int
    duration_seconds: float | None
    gpu_energy_joules: float | None
    energy_method: str | None


def cmd_import(args: argparse.Namespace) -> int:
    try:
        cfg = load_config(args.config)
    except ConfigError as e:
        raise UsageError(str(e)) from None
    try:
        resolve_location(args.region, config_region=cfg.region)
    except RegionError as e:
        raise UsageError(f"--region: {e}" if args.region else str(e)) from None
    trace = read_trace(
        args.file, args.format, columns=args.columns, utc=args.utc, allow_gaps=args.allow_gaps
    )
    digest = file_digest(args.file)
    opts = AccountingOptions(config=cfg, region=args.region)
    out: list[ImportedJson] = []
    with Store.open(resolve_db_path(args.db), create=True) as store:
        before = imported_runs(store, digest)
        if before and not args.replace:
            raise already_imported(args.file, before)
        for r in import_trace(store, trace, name=args.name, tags={DIGEST_TAG: digest}):
            run = store.run_by_key(r.key)
            summary = build_summary(store, run)
            summary = with_accounting(summary, accounted(store, run, summary, opts))
            summary["diagnosis"] = diagnosed(store, run, summary, opts)
            store.update_run(r.key, summary=summary)
            given = [g["energy_joules"] for g in summary["gpus"] if g["energy_joules"] is not None]
            energy = sum(given) if given else None
            out.append(
                {
                    "id": r.id,
                    "name": run.name,
                    "job": r.job,
                    "samples": r.ticks,
                    "gpus": r.gpus,
                    "duration_seconds": summary["duration_seconds"],
                    "gpu_energy_joules": energy,
                    "energy_method": None if energy is None else ENERGY_METHOD,
                }
            )
        remove_imported(store, before)  # --replace: once the new runs are stored
    if args.json:
        doc = {
            "file": args.file,
            "format": trace.format,
            "rows": trace.rows,
            "notes": trace.notes,
            "runs": out,
            "replaced": [r.id for r in before],
        }
        sys.stdout.write(jsonout.dumps(doc, indent=2) + "\n")
        return 0
    for o in out:
        joules = o["gpu_energy_joules"]
        how = "" if joules is None else " (integrated from polled power)"
        print(
            f"imported {o['id']} ({o['name']}): {o['samples']} samples of {o['gpus']} GPU(s) "
            f"over {format_duration(o['duration_seconds'])}; GPU energy "
            f"{format_energy(joules)}{how}"
        )
    for n in trace.notes:
        print(f"  note: {n}")
    for b in before:
        print(f"replaced run {b.id}{f' ({b.name})' if b.name else ''}, imported before")
    return 0
