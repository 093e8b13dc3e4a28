"""What ``computewatch detect`` does once its flags are parsed (:mod:`.detect`)."""

from __future__ import annotations

import argparse
import sys
from typing import TypedDict

from computewatch import jsonout
from computewatch.detect import DetectError, Verdict, classify_series, classify_trace, load_model
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
    importance: float
    training_median: float | None
    inference_median: float | None


class VerdictJson(TypedDict):
    source: str
    job: str
    label: str
    p_training: float
    rule: str | None
    evidence: list[EvidenceJson]
    missing_features: list[str]
    features: dict[str, float | None]
    gpu_count: int
    duration_seconds: float
    flops: FlopsJson | None
    model_version: str
    simulated: bool


def verdict_json(source: str, v: Verdict, *, simulated: bool = False) -> VerdictJson:
    """One job of ``detect --json``."""
    return {
        "source": source,
        "job": v.job,
        "label": v.label,
        "p_training": v.p_training,
        "rule": v.rule,
        "evidence": [
            {
                "feature": e.feature,
                "value": e.value,
                "importance": e.importance,
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
    }


def _num(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.3g}"


def cmd_detect(args: argparse.Namespace) -> int:
    runs = list(args.run) + [f[4:] for f in args.files if f.startswith("run:")]
    files = [f for f in args.files if not f.startswith("run:")]
    if not runs and not files:
        raise UsageError("give telemetry files, or stored runs with --run RUN")
    model = load_model(args.model)
    out: list[VerdictJson] = []
    for f in files:
        trace = read_trace(
            f,
            args.format,
            columns=args.columns,
            job=args.name,
            utc=args.utc,
            allow_gaps=args.allow_gaps,
        )
        out += [
            verdict_json(f, v) for v in classify_trace(trace, model=model, precision=args.precision)
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
                )
                out.append(verdict_json(f"run:{run.id}", v, simulated=simulated))
    if args.json:
        doc = {
            "model": {
                "version": model.version,
                "held_out": model.evaluation.get("held_out"),
                "trained_on": model.training.get("data"),
            },
            "jobs": out,
        }
        sys.stdout.write(jsonout.dumps(doc, indent=2) + "\n")
        return 0
    for j in out:
        why = j["rule"] or "; ".join(
            f"{e['feature']} {_num(e['value'])} (training {_num(e['training_median'])}, "
            f"inference {_num(e['inference_median'])})"
            for e in j["evidence"][:3]
        )
        sim = " [simulated GPUs]" if j["simulated"] else ""
        line = (
            f"{j['source']} {j['job']}{sim}: {j['label']} (p_training {j['p_training']:.2f}; "
            f"{j['gpu_count']} GPU(s), {format_duration(j['duration_seconds'])}) - {why}"
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
