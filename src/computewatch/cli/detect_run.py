"""What ``computewatch detect`` does once its flags are parsed (:mod:`.detect`)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import TypedDict

from computewatch import jsonout
from computewatch.config import ConfigError, load_config
from computewatch.detect import (
    REVIEW_FLOP_DEFAULT,
    DetectError,
    Verdict,
    classify_series,
    classify_trace,
    load_model,
)
from computewatch.detect.model import CALIBRATED_FILE
from computewatch.detect.stored import run_telemetry
from computewatch.errors import ComputewatchError, UsageError
from computewatch.paths import resolve_db_path
from computewatch.store.spooled import open_store
from computewatch.traces import read_trace
from computewatch.units import format_duration, format_flop

__all__ = ["cmd_detect", "verdict_json"]


class FlopsJson(TypedDict):
    flop: float | None
    low: float | None
    high: float | None
    method: str
    assumptions: list[str]


class EvidenceJson(TypedDict):
    feature: str
    value: float | None
    contribution: float
    training_median: float | None
    inference_median: float | None


class CeilingJson(TypedDict):
    flop: float
    devices: int
    seconds: float
    method: str
    assumptions: list[str]


class VerdictJson(TypedDict):
    source: str
    job: str
    label: str
    p_training: float
    p_forest: float
    rule: str | None
    flag: bool
    flag_reason: str | None
    ceiling: CeilingJson
    samples: int
    evidence_base: float
    evidence: list[EvidenceJson]
    missing_features: list[str]
    features: dict[str, float | None]
    gpu_count: int
    duration_seconds: float
    flops: FlopsJson | None
    model_version: str
    simulated: bool
    notes: list[str]


def verdict_json(
    source: str, v: Verdict, *, simulated: bool = False, notes: Sequence[str] = ()
) -> VerdictJson:
    """One job of ``detect --json``; ``notes``: the trace reader's on the job's file."""
    return {
        "source": source,
        "job": v.job,
        "label": v.label,
        "p_training": v.p_training,
        "p_forest": v.p_forest,
        "rule": v.rule,
        "flag": v.flag,
        "flag_reason": v.flag_reason,
        "ceiling": {
            "flop": v.ceiling.flop,
            "devices": v.ceiling.devices,
            "seconds": v.ceiling.seconds,
            "method": v.ceiling.method,
            "assumptions": list(v.ceiling.assumptions),
        },
        "samples": v.samples,
        "evidence_base": round(v.evidence_base, 4),
        "evidence": [
            {
                "feature": e.feature,
                "value": e.value,
                "contribution": e.contribution,
                "training_median": e.training_median,
                "inference_median": e.inference_median,
            }
            for e in v.evidence
        ],
        "missing_features": v.missing,
        "features": v.features,
        "gpu_count": v.gpu_count,
        "duration_seconds": v.duration_seconds,
        "flops": None
        if v.flops is None
        else {
            "flop": v.flops.flop,
            "low": v.flops.low,
            "high": v.flops.high,
            "method": v.flops.method,
            "assumptions": v.flops.assumptions,
        },
        "model_version": v.model_version,
        "simulated": simulated,
        "notes": list(notes),
    }


def _num(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.3g}"


def cmd_detect(args: argparse.Namespace) -> int:
    runs = list(args.run) + [f[4:] for f in args.files if f.startswith("run:")]
    files = [f for f in args.files if not f.startswith("run:")]
    if not runs and not files:
        raise UsageError("give telemetry files, or stored runs with --run RUN")
    try:
        cfg = load_config(args.config)
    except ConfigError as e:
        raise UsageError(str(e)) from None
    review = cfg.governance_detect_review_flop
    model = load_model(args.model, shipped=CALIBRATED_FILE)
    out: list[VerdictJson] = []
    notes: list[str] = []  # the readers' notes, one line each, for the text output
    for f in files:
        trace = read_trace(
            f,
            args.format,
            columns=args.columns,
            job=args.name,
            utc=args.utc,
            allow_gaps=args.allow_gaps,
        )
        notes += [f"{f}: note: {n}" for n in trace.notes]
        out += [
            verdict_json(f, v, notes=trace.notes)
            for v in classify_trace(
                trace, model=model, precision=args.precision, review_flop=review
            )
        ]
    if runs:
        path = resolve_db_path(args.db)
        if not path.exists():
            raise ComputewatchError(f"no database at {path}")
        with open_store(path) as store:
            for ref in runs:
                run = store.find_run(ref)
                gpus, names, simulated = run_telemetry(store, run)
                if not gpus:
                    raise DetectError(f"run {run.id}: no GPU telemetry stored")
                v = classify_series(
                    gpus,
                    job=run.name or run.id,
                    gpu_names=names,
                    model=model,
                    precision=args.precision,
                    review_flop=review,
                )
                out.append(verdict_json(f"run:{run.id}", v, simulated=simulated))
    out.sort(key=lambda j: not j["flag"])  # flagged jobs first, otherwise in input order
    if args.json:
        doc = {
            "model": {
                "version": model.version,
                "held_out": model.evaluation.get("held_out"),
                "trained_on": model.training.get("data"),
                "calibration": model.calibration.method,
                "bounds": None
                if model.bounds is None
                else {
                    "not_training": model.bounds.not_training,
                    "training": model.bounds.training,
                },
                "review_flop": REVIEW_FLOP_DEFAULT if review is None else review,
            },
            "jobs": out,
        }
        sys.stdout.write(jsonout.dumps(doc, indent=2) + "\n")
        return 0
    for n in notes:
        print(n, file=sys.stderr)
    for j in out:
        why = j["rule"] or "; ".join(
            f"{e['feature']} {_num(e['value'])} ({e['contribution']:+.2f})"
            for e in j["evidence"][:3]
        )
        sim = " [simulated GPUs]" if j["simulated"] else ""
        review_mark = "REVIEW " if j["flag"] else ""
        line = (
            f"{j['source']} {j['job']}{sim}: {review_mark}{j['label']} (p_training "
            f"{j['p_training']:.2f}; {j['gpu_count']} GPU(s), "
            f"{format_duration(j['duration_seconds'])}; ceiling "
            f"{format_flop(j['ceiling']['flop'])}) - {why}"
        )
        fl = j["flops"]
        if fl is not None:
            line += (
                f"; about {format_flop(fl['flop'])} ({format_flop(fl['low'])}-"
                f"{format_flop(fl['high'])}, hardware estimate)"
                if fl["flop"] is not None
                else "; FLOPs not estimated (GPU not in the catalog)"
            )
        if j["missing_features"]:
            line += f" [not in the telemetry: {', '.join(j['missing_features'])}]"
        print(line)
    return 0
