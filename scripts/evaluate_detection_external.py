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
  power-smoothing load during checkpoints).
- ``--energy-inference DIR``: a copy of https://github.com/grantwilkins/energy-inference. Every
  non-empty ``nvidia-smi.csv`` is an LLM inference run; its setup is the ``system_name`` of the
  ``job_info.yaml`` beside it.

Files with the same content are evaluated once (the duplicates are listed).

Two things these logs need before the reader takes them, both done on a copy in a temporary
directory and both counted in the output:

- **No GPU index column.** nvidia-smi writes, at each poll, one row per GPU in index order, each
  with its own timestamp a few milliseconds apart. The GPU count of a file is the most common
  number of rows between two gaps of at least half the poll interval (the 97th percentile of
  the intervals between rows); a row's index is its position modulo that count. A poll whose
  rows spread over more than half the poll interval (nvidia-smi stalled mid-poll) is counted as
  ``stretched``; rows past the last complete poll are dropped. Without an index, the shipped
  reader files every row under one GPU (``computewatch detect`` then says ``1 GPU(s)``).
- **A truncated last line** (a log cut while it was written, or NUL bytes where the file was
  cut): dropped. The shipped reader refuses the file ("1 fields where the header has 4",
  "binary data (a NUL byte)").

    python scripts/evaluate_detection_external.py --training-profile /tmp/training_profile \
        --energy-inference /tmp/energy-inference [--every 1] [--json]

No file is written except temporary copies in the system's temporary directory, removed at
the end.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import hashlib
import itertools
import json
import math
import statistics
import sys
import tempfile
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
    "Prepared",
    "Result",
    "energy_inference_index",
    "main",
    "prepare_log",
    "subsample",
    "summarise",
    "training_profile_index",
]

TRAINING = "training"
LABELS = ("training", "inference", "other")
_TIME_FORMATS = ("%Y/%m/%d %H:%M:%S.%f", "%Y/%m/%d %H:%M:%S")
POLL_QUANTILE = 0.97
"""The poll interval is read as this quantile of the intervals between rows: with N GPUs one
interval in N is a poll interval, the others are the milliseconds between a poll's rows."""


class EvaluationError(Exception):
    """Bad input to the script: one line, exit 1."""


@dataclasses.dataclass(frozen=True, slots=True)
class JobSpec:
    """One labelled log: where it comes from, the hardware, its label, its file and, when
    known, its GPU count (else derived from the timestamps)."""

    source: str
    setup: str
    label: str
    path: Path
    gpus: int | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Prepared:
    """A log made readable by the shipped reader: its text (an ``index`` column added when the
    file had none), the GPU count, and what was done to it."""

    text: str
    gpus: int
    rows: int
    index_derived: bool
    dropped_tail: int  # rows dropped: a truncated last line, an incomplete last poll
    stretched_polls: int  # polls whose rows spread over more than half the poll interval
    polls: int


@dataclasses.dataclass(frozen=True, slots=True)
class Result:
    """The detector's verdict on one labelled job, with how its log was read."""

    spec: JobSpec
    verdict: Verdict | None
    error: str | None
    prepared: Prepared | None
    interval_seconds: float


def _time(text: str) -> float | None:
    s = text.strip()
    for fmt in _TIME_FORMATS:
        try:
            return dt.datetime.strptime(s, fmt).timestamp()
        except ValueError:
            continue
    return None


def _quantile(values: Sequence[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))]


def gpu_count(times: Sequence[float]) -> int:
    """The number of rows nvidia-smi writes per poll: the most common run of rows between
    intervals of at least half the poll interval (:data:`POLL_QUANTILE`)."""
    if len(times) < 3:
        return 1
    gaps = [b - a for a, b in itertools.pairwise(times)]
    poll = _quantile(gaps, POLL_QUANTILE)
    if poll <= 0:
        return 1
    runs: list[int] = []
    n = 1
    for d in gaps:
        if d >= poll / 2:
            runs.append(n)
            n = 1
        else:
            n += 1
    runs.append(n)
    return Counter(runs).most_common(1)[0][0]


def prepare_log(text: str, *, gpus: int | None = None) -> Prepared:
    """Make an nvidia-smi ``--query-gpu`` CSV log readable by the shipped reader: drop a
    truncated last line; when there is no ``index`` column, add one from the rows' order (the
    GPU count from :func:`gpu_count` unless given) and drop the rows after the last complete
    poll. Raises :class:`EvaluationError` for a file that is not such a log."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        raise EvaluationError("empty file")
    header = [c.strip() for c in lines[0].split(",")]
    names = [c.split("[", 1)[0].strip() for c in header]
    if "timestamp" not in names or not any(n.startswith("utilization.") for n in names):
        raise EvaluationError(
            f"not an nvidia-smi --query-gpu log with a header (first line {lines[0][:60]!r})"
        )
    fields = len(header)
    i_t = names.index("timestamp")
    rows = lines[1:]
    dropped = 0
    if rows and (len(rows[-1].split(",")) != fields or _time(rows[-1].split(",")[i_t]) is None):
        rows = rows[:-1]  # a log cut while it was written
        dropped += 1
    if "index" in names:  # the reader files rows by it: nothing to derive
        i_x = names.index("index")
        count = len({r.split(",")[i_x].strip() for r in rows})
        return Prepared("\n".join([lines[0], *rows]) + "\n", count, len(rows), False, dropped, 0, 0)
    times: list[float] = []
    for n, r in enumerate(rows, start=2):
        t = _time(r.split(",")[i_t])
        if t is None:
            raise EvaluationError(
                f"line {n}: timestamp {r.split(',')[i_t].strip()[:30]!r} is not nvidia-smi's"
            )
        times.append(t)
    k = gpus or gpu_count(times)
    complete = len(rows) // k * k
    dropped += len(rows) - complete
    rows, times = rows[:complete], times[:complete]
    poll = (
        _quantile([b - a for a, b in itertools.pairwise(times)], POLL_QUANTILE)
        if len(times) > 2
        else 0.0
    )
    polls = complete // k
    stretched = sum(
        1 for p in range(polls) if k > 1 and times[p * k + k - 1] - times[p * k] > poll / 2
    )
    out = [
        lines[0].replace("timestamp", "timestamp, index", 1) if i_t == 0 else lines[0] + ", index"
    ]
    for n, r in enumerate(rows):
        f = r.split(",")
        out.append(
            ",".join([*f[: i_t + 1], f" {n % k}", *f[i_t + 1 :]]) if i_t == 0 else f"{r}, {n % k}"
        )
    return Prepared("\n".join(out) + "\n", k, complete, True, dropped, stretched, polls)


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
    for folder, setup in (("h100-traces", "H100x8"), ("titanx-traces", "TitanXx2")):
        for p in sorted((root / folder).glob("*.csv")):
            if not _is_smi_log(p):
                continue
            s = setup + ("+burn" if "with_burn" in p.name else "")
            out.append(JobSpec("training_profile", s, TRAINING, p))
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


def evaluate(
    spec: JobSpec, *, tmp: Path, every: float | None, review_flop: float, forest: Forest
) -> Result:
    """Read one log as ``computewatch detect`` does and classify its job."""
    try:
        prepared = prepare_log(spec.path.read_text(errors="strict"), gpus=spec.gpus)
    except (EvaluationError, UnicodeDecodeError, OSError) as e:
        return Result(spec, None, str(e), None, math.nan)
    copy = tmp / (hashlib.sha256(str(spec.path).encode()).hexdigest()[:16] + ".csv")
    copy.write_text(prepared.text)
    try:
        trace = read_trace(copy, "nvidia-smi", job=spec.path.stem, allow_gaps=True)
        (job,) = trace.jobs
        gpus = [GpuTelemetry(g.times, g.metrics) for g in job.gpus]
        if every:
            gpus = [subsample(g, every) for g in gpus]
        verdict = classify_series(
            gpus,
            job=spec.path.stem,
            gpu_names=[g.name for g in job.gpus],
            model=forest,
            review_flop=review_flop,
        )
    except (TraceError, DetectError) as e:
        return Result(spec, None, str(e).replace(str(copy), str(spec.path)), prepared, math.nan)
    finally:
        copy.unlink()
    interval = verdict.features.get("interval_seconds")
    return Result(spec, verdict, None, prepared, math.nan if interval is None else interval)


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


def print_table(results: Sequence[Result], out: list[str]) -> None:
    out.append(
        "| source | setup | file | label | GPUs | duration | samples | interval | verdict | "
        "p_training | vote | rule | evidence (top 3) | read |"
    )
    out.append("|" + " --- |" * 4 + " ---: |" * 4 + " --- | ---: | ---: |" + " --- |" * 3)
    for r in results:
        p = r.prepared
        read = []
        if p is not None and p.index_derived:
            read.append(
                f"index from row order ({p.gpus} per poll, {p.stretched_polls} of {p.polls} "
                "polls stretched)"
            )
        if p is not None and p.dropped_tail:
            read.append(f"{p.dropped_tail} rows dropped at the end")
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
        "gpus_per_poll": None if r.prepared is None else r.prepared.gpus,
        "index_derived": None if r.prepared is None else r.prepared.index_derived,
        "stretched_polls": None if r.prepared is None else r.prepared.stretched_polls,
        "dropped_tail_rows": None if r.prepared is None else r.prepared.dropped_tail,
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
        help="a labelled nvidia-smi log (repeatable); GPUS: rows per poll when it has no index",
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
        with tempfile.TemporaryDirectory(prefix="cw-detect-eval-") as tmp:
            results = [
                evaluate(s, tmp=Path(tmp), every=a.every, review_flop=a.review_flop, forest=forest)
                for s in specs
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
