"""Evaluate the shipped training-run detector on labelled nvidia-smi logs of another source,
fetched by the user: evaluation only, nothing is written into the repository.

The detector is run as ``computewatch detect`` runs it: the shipped nvidia-smi reader
(:func:`computewatch.traces.read_trace`), the calibrated model (``detector-calibrated.json``),
:func:`computewatch.detect.classify_series` on each job's whole telemetry at the log's own
interval (``--every S`` keeps one sample every S seconds instead, as ``nvidia-smi -l S`` would
have logged). It prints, per source and per setup: the jobs, the recall of training (a job the
detector calls ``uncertain`` counts as not found, and is counted), the non-training jobs called
training, the ``uncertain`` counts, the distribution of ``p_training`` and, for comparison, the
forest's raw vote at 0.5; then a table with one row per job (verdict, rule, the features that
moved it). ``--json`` prints every job's verdict and features instead.

Labels come from the command line (``--job SOURCE,SETUP,LABEL,FILE[,GPUS]``, repeatable) or
from an index built from a known repository's layout:

- ``--training-profile DIR``: a copy of https://github.com/grantwilkins/training_profile (e.g.
  ``git archive``). Every CSV under ``h100-traces/`` and ``titanx-traces/`` whose header is
  nvidia-smi's (the ``aggregated_*`` and ``*_processed`` files are power sums, not logs) is a
  GPT training run: setup ``H100x8`` or ``TitanXx2`` (``TitanXx2+burn`` for the runs with a
  power-smoothing load during checkpoints), on 8 or 2 GPUs.
- ``--energy-inference DIR``: a copy of https://github.com/grantwilkins/energy-inference. Every
  non-empty ``nvidia-smi.csv`` is an LLM inference run; its setup is the ``system_name`` of the
  ``job_info.yaml`` beside it.

Files with the same content are evaluated once (the duplicates are listed).

The logs are read by the shipped reader as they are: most have no GPU index column (the
reader numbers the devices by their order in each poll, and its notes count the polls that
were stretched or cut short), several end in a line cut while written or in NUL bytes (the
reader drops them, and says so). The reader's notes go in the table's last column. A job's
``GPUS`` (``--job``), when given, is checked against the GPUs the reader found.

    python scripts/evaluate_detection_external.py --training-profile /tmp/training_profile \
        --energy-inference /tmp/energy-inference [--every 1] [--json]

No file is written.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import math
import statistics
import sys
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

from computewatch.detect import (
    CALIBRATED_FILE,
    REVIEW_FLOP_DEFAULT,
    DetectError,
    Forest,
    GpuTelemetry,
    Verdict,
    classify_series,
    load_model,
)
from computewatch.errors import ComputewatchError
from computewatch.traces import TraceError, read_trace

__all__ = [
    "JobSpec",
    "Result",
    "energy_inference_index",
    "evaluate",
    "main",
    "subsample",
    "summarise",
    "training_profile_index",
]

TRAINING = "training"
LABELS = ("training", "inference", "other")


class EvaluationError(Exception):
    """Bad input to the script: one line, exit 1."""


@dataclasses.dataclass(frozen=True, slots=True)
class JobSpec:
    """One labelled log: where it comes from, the hardware, its label, its file and, when
    known, its GPU count (checked against the GPUs the reader finds)."""

    source: str
    setup: str
    label: str
    path: Path
    gpus: int | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Result:
    """The detector's verdict on one labelled job, with the GPUs the reader found and its
    notes (how the log was read)."""

    spec: JobSpec
    verdict: Verdict | None
    error: str | None
    gpus: int | None
    notes: tuple[str, ...]
    interval_seconds: float


def subsample(g: GpuTelemetry, every: float) -> GpuTelemetry:
    """One sample every ``every`` seconds: the first sample at or after each step from the
    first (what ``nvidia-smi -l every`` would have logged)."""
    keep: list[int] = []
    nxt = -math.inf
    for i, t in enumerate(g.times):
        if t >= nxt:
            keep.append(i)
            nxt = t + every - 1e-9
    return GpuTelemetry(
        [g.times[i] for i in keep], {m: [v[i] for i in keep] for m, v in g.metrics.items()}
    )


def _is_smi_log(path: Path) -> bool:
    try:
        with path.open("rb") as fh:
            head = fh.readline(4096).decode("utf-8", "replace")
    except OSError:
        return False
    return "timestamp" in head and "utilization.gpu" in head


def training_profile_index(root: Path) -> list[JobSpec]:
    """The labelled logs of a copy of grantwilkins/training_profile (module docstring)."""
    out: list[JobSpec] = []
    for folder, setup, gpus in (("h100-traces", "H100x8", 8), ("titanx-traces", "TitanXx2", 2)):
        for p in sorted((root / folder).glob("*.csv")):
            if not _is_smi_log(p):
                continue
            s = setup + ("+burn" if "with_burn" in p.name else "")
            out.append(JobSpec("training_profile", s, TRAINING, p, gpus))
    if not out:
        raise EvaluationError(f"{root}: no nvidia-smi logs under h100-traces/ or titanx-traces/")
    return out


def _system_name(folder: Path) -> str:
    try:
        text = (folder / "job_info.yaml").read_text(errors="replace")
    except OSError:
        return "unknown"
    for ln in text.splitlines():
        key, _, value = ln.strip().partition(":")
        if key == "system_name" and value.strip():
            return value.strip()
    return "unknown"


def energy_inference_index(root: Path) -> list[JobSpec]:
    """The labelled logs of a copy of grantwilkins/energy-inference (module docstring)."""
    out = [
        JobSpec("energy-inference", _system_name(p.parent), "inference", p)
        for p in sorted(root.rglob("nvidia-smi.csv"))
        if p.stat().st_size > 0
    ]
    if not out:
        raise EvaluationError(f"{root}: no non-empty nvidia-smi.csv")
    return out


def _job_arg(text: str) -> JobSpec:
    parts = [p.strip() for p in text.split(",")]
    if len(parts) not in (4, 5) or parts[2] not in LABELS:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected SOURCE,SETUP,LABEL,FILE[,GPUS] with LABEL one of "
            f"{', '.join(LABELS)}"
        )
    gpus = None
    if len(parts) == 5:
        if not parts[4].isdigit() or int(parts[4]) < 1:
            raise argparse.ArgumentTypeError(f"{text!r}: GPUS must be a positive integer")
        gpus = int(parts[4])
    return JobSpec(parts[0], parts[1], parts[2], Path(parts[3]), gpus)


def dedupe(specs: Iterable[JobSpec]) -> tuple[list[JobSpec], list[tuple[JobSpec, JobSpec]]]:
    """The specs with distinct file contents, and each duplicate with the one it repeats."""
    seen: dict[str, JobSpec] = {}
    keep: list[JobSpec] = []
    dups: list[tuple[JobSpec, JobSpec]] = []
    for s in specs:
        try:
            digest = hashlib.sha256(s.path.read_bytes()).hexdigest()
        except OSError as e:
            raise EvaluationError(f"{s.path}: cannot read: {e.strerror or e}") from None
        if digest in seen:
            dups.append((s, seen[digest]))
        else:
            seen[digest] = s
            keep.append(s)
    return keep, dups


def evaluate(spec: JobSpec, *, every: float | None, review_flop: float, forest: Forest) -> Result:
    """Read one log as ``computewatch detect`` does and classify its job."""
    try:
        trace = read_trace(spec.path, "nvidia-smi", job=spec.path.stem, allow_gaps=True)
    except TraceError as e:
        return Result(spec, None, str(e), None, (), math.nan)
    notes = tuple(trace.notes)
    if len(trace.jobs) != 1:
        return Result(spec, None, f"{len(trace.jobs)} jobs in one log", None, notes, math.nan)
    (job,) = trace.jobs
    if spec.gpus is not None and spec.gpus != len(job.gpus):
        why = f"{len(job.gpus)} GPUs read where the label says {spec.gpus}"
        return Result(spec, None, why, len(job.gpus), notes, math.nan)
    gpus = [GpuTelemetry(g.times, g.metrics) for g in job.gpus]
    if every:
        gpus = [subsample(g, every) for g in gpus]
    try:
        verdict = classify_series(
            gpus,
            job=spec.path.stem,
            gpu_names=[g.name for g in job.gpus],
            model=forest,
            review_flop=review_flop,
        )
    except DetectError as e:
        return Result(spec, None, str(e), len(job.gpus), notes, math.nan)
    interval = verdict.features.get("interval_seconds")
    return Result(
        spec, verdict, None, len(job.gpus), notes, math.nan if interval is None else interval
    )


@dataclasses.dataclass(frozen=True, slots=True)
class Summary:
    """The scores of a group of jobs, ``uncertain`` counted as not found."""

    name: str
    training: int
    non_training: int
    found: int  # training labelled training
    training_uncertain: int
    training_other: int  # training labelled inference or other
    false_training: int  # non-training labelled training
    non_training_uncertain: int
    errors: int
    vote_found: int  # the forest's raw vote >= 0.5, training
    vote_false: int  # the forest's raw vote >= 0.5, non-training
    rules: dict[str, int]
    p_training: dict[str, list[float]]  # true label -> calibrated p_training of its jobs


def summarise(name: str, results: Sequence[Result]) -> Summary:
    """Score ``results`` as docs/detection.md does."""
    ok = [r for r in results if r.verdict is not None]
    tr = [r for r in ok if r.spec.label == TRAINING]
    nt = [r for r in ok if r.spec.label != TRAINING]

    def n(rs: Sequence[Result], label: str) -> int:
        return sum(1 for r in rs if r.verdict is not None and r.verdict.label == label)

    rules: Counter[str] = Counter()
    for r in ok:
        assert r.verdict is not None
        if r.verdict.rule:
            rules[r.verdict.rule.split(":", 1)[0]] += 1
    return Summary(
        name=name,
        training=len(tr),
        non_training=len(nt),
        found=n(tr, "training"),
        training_uncertain=n(tr, "uncertain"),
        training_other=n(tr, "inference") + n(tr, "other"),
        false_training=n(nt, "training"),
        non_training_uncertain=n(nt, "uncertain"),
        errors=len(results) - len(ok),
        vote_found=sum(1 for r in tr if r.verdict is not None and r.verdict.p_forest >= 0.5),
        vote_false=sum(1 for r in nt if r.verdict is not None and r.verdict.p_forest >= 0.5),
        rules=dict(rules),
        p_training={
            label: sorted(r.verdict.p_training for r in ok if r.spec.label == label and r.verdict)
            for label in sorted({r.spec.label for r in ok})
        },
    )


def _pct(a: int, b: int) -> str:
    return "n/a" if b == 0 else f"{100.0 * a / b:.1f}% ({a}/{b})"


def _dist(ps: Sequence[float]) -> str:
    if not ps:
        return "none"
    q = statistics.quantiles(ps, n=4, method="inclusive") if len(ps) > 1 else [ps[0]] * 3
    low = sum(1 for p in ps if p <= 0.2)
    high = sum(1 for p in ps if p >= 0.8)
    return (
        f"min {ps[0]:.2f}, quartiles {q[0]:.2f} / {q[1]:.2f} / {q[2]:.2f}, max {ps[-1]:.2f}; "
        f"<= 0.2: {low}, between: {len(ps) - low - high}, >= 0.8: {high}"
    )


def print_summary(s: Summary, out: list[str]) -> None:
    out.append(f"## {s.name}")
    out.append(
        f"jobs: {s.training} training, {s.non_training} non-training"
        + (f", {s.errors} not classified (errors below)" if s.errors else "")
    )
    if s.training:
        out.append(
            f"recall of training: {_pct(s.found, s.training)}; training called uncertain: "
            f"{s.training_uncertain}, called inference or other: {s.training_other}; "
            f"forest vote >= 0.5: {_pct(s.vote_found, s.training)}"
        )
    if s.non_training:
        out.append(
            f"non-training called training: {_pct(s.false_training, s.non_training)}; called "
            f"uncertain: {s.non_training_uncertain}; forest vote >= 0.5: "
            f"{_pct(s.vote_false, s.non_training)}"
        )
    if s.rules:
        out.append("rules: " + ", ".join(f"{k} {v}" for k, v in sorted(s.rules.items())))
    for label, ps in s.p_training.items():
        out.append(f"p_training of {label} jobs: {_dist(ps)}")
    out.append("")


def _evidence(v: Verdict) -> str:
    return "; ".join(
        f"{e.feature} {e.value if e.value is None else f'{e.value:.3g}'} ({e.contribution:+.2f})"
        for e in v.evidence[:3]
    )


_READ_NOTES = (
    "no device column",
    "polls",
    "poll cut short",
    "the last line was cut",
    "the file ends in",
)


def _about_reading(note: str) -> bool:
    """Whether a reader's note says how the log was read (devices by poll order, stretched or
    cut polls, a cut last line, NUL bytes): those go in the table, not the others (values not
    given, gaps allowed)."""
    return any(k in note for k in _READ_NOTES)


def print_table(results: Sequence[Result], out: list[str]) -> None:
    out.append(
        "| source | setup | file | label | GPUs | duration | samples | interval | verdict | "
        "p_training | vote | rule | evidence (top 3) | read |"
    )
    out.append("|" + " --- |" * 4 + " ---: |" * 4 + " --- | ---: | ---: |" + " --- |" * 3)
    for r in results:
        read = [n for n in r.notes if _about_reading(n)]
        name = "/".join(r.spec.path.parts[-4:])
        if r.verdict is None:
            out.append(
                f"| {r.spec.source} | {r.spec.setup} | {name} | {r.spec.label} | | | | | error: "
                f"{r.error} | | | | | {'; '.join(read)} |"
            )
            continue
        v = r.verdict
        rule = (v.rule or "").split(":", 1)[0]
        out.append(
            f"| {r.spec.source} | {r.spec.setup} | {name} | {r.spec.label} | {v.gpu_count} | "
            f"{v.duration_seconds:.0f} s | {v.samples} | {r.interval_seconds:.2g} s | "
            f"**{v.label}** | {v.p_training:.2f} | {v.p_forest:.2f} | {rule} | {_evidence(v)} | "
            f"{'; '.join(read)} |"
        )


def _json(r: Result) -> dict[str, object]:
    v = r.verdict
    return {
        "source": r.spec.source,
        "setup": r.spec.setup,
        "file": str(r.spec.path),
        "label": r.spec.label,
        "error": r.error,
        "gpus": r.gpus,
        "notes": list(r.notes),
        "verdict": None
        if v is None
        else {
            "label": v.label,
            "p_training": v.p_training,
            "p_forest": v.p_forest,
            "rule": v.rule,
            "flag": v.flag,
            "gpu_count": v.gpu_count,
            "samples": v.samples,
            "duration_seconds": v.duration_seconds,
            "missing": v.missing,
            "evidence": [dataclasses.asdict(e) for e in v.evidence],
            "contributions": {k: round(c, 4) for k, c in v.contributions.items()},
            "features": v.features,
        },
    }


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--training-profile", type=Path, metavar="DIR")
    ap.add_argument("--energy-inference", type=Path, metavar="DIR")
    ap.add_argument(
        "--job",
        type=_job_arg,
        action="append",
        default=[],
        metavar="SOURCE,SETUP,LABEL,FILE[,GPUS]",
        help="a labelled nvidia-smi log (repeatable); GPUS: the GPUs it should have (checked)",
    )
    ap.add_argument("--every", type=float, metavar="S", help="keep one sample every S seconds")
    ap.add_argument("--model", type=Path, help="another model file (default: the calibrated one)")
    ap.add_argument("--review-flop", type=float, default=REVIEW_FLOP_DEFAULT)
    ap.add_argument("--json", action="store_true", help="every job's verdict and features")
    a = ap.parse_args(argv)
    if a.every is not None and not (math.isfinite(a.every) and a.every > 0):
        print(f"evaluate_detection_external: --every {a.every}: a positive number", file=sys.stderr)
        return 1
    try:
        specs: list[JobSpec] = list(a.job)
        if a.training_profile:
            specs += training_profile_index(a.training_profile)
        if a.energy_inference:
            specs += energy_inference_index(a.energy_inference)
        if not specs:
            raise EvaluationError("no logs: give --training-profile, --energy-inference or --job")
        specs, dups = dedupe(specs)
        forest = load_model(a.model, shipped=CALIBRATED_FILE)
        results = [
            evaluate(s, every=a.every, review_flop=a.review_flop, forest=forest) for s in specs
        ]
    except (EvaluationError, ComputewatchError) as e:
        print(f"evaluate_detection_external: {e}", file=sys.stderr)
        return 1
    if a.json:
        print(json.dumps([_json(r) for r in results], indent=1))
        return 0
    out = [
        f"# Training-run detection on external logs (model {forest.version}; "
        f"{'each log at its own interval' if not a.every else f'one sample every {a.every:g} s'})",
        "",
    ]
    for source in sorted({r.spec.source for r in results}):
        print_summary(summarise(source, [r for r in results if r.spec.source == source]), out)
    for setup in sorted({(r.spec.source, r.spec.setup) for r in results}):
        rs = [r for r in results if (r.spec.source, r.spec.setup) == setup]
        print_summary(summarise(f"{setup[0]} / {setup[1]}", rs), out)
    if len({r.spec.source for r in results}) > 1:
        print_summary(summarise("all sources", results), out)
    if dups:
        out.append(
            "duplicates (same content, evaluated once): "
            + ", ".join(f"{d.path.name} = {o.path.name}" for d, o in dups)
        )
        out.append("")
    print_table(results, out)
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
