"""Build the training-run detector's feature table from real, labelled GPU telemetry, one
reader per source (``--source NAME=PATH``, repeatable):

- ``migprofiler=PATH``: MIGProfiler's public DCGM traces (below), read from a git snapshot;
- ``labelled=PATH``: a folder of telemetry files any :mod:`computewatch.traces` reader takes
  (nvidia-smi CSV logs, the long CSV/Parquet format) with a ``labels.csv`` beside them:
  ``file,job,label,setup,source,licence`` (``job`` empty: every job of the file; ``label``
  training, inference or other; ``setup`` the hardware and sampling, e.g. ``H100-1s``). The
  place for traces recorded on a GPU machine and for any further public source converted to
  one of those formats.

Every row of the table carries its ``source`` and ``setup`` so that the evaluation can leave
one of each out.

Source: https://github.com/HuaizhengZhang/MIGProfiler, commit
5462a7c1bf586a8121fa695a80d4cedb935d4425 (2022-09-22), folder ``data/`` (removed from the
repository in a later commit), MIT licence (the repository's LICENSE file; it names "Scott
Chacon and others" as copyright holders, a copied header). Real A100 (40 GB and 80 GB)
telemetry recorded by ``dcgmi dmon -e 1001,252`` at 1 Hz while the authors ran training,
fine-tuning and inference benchmarks (ResNet-50, ViT, MoCo, BERT, sentence-transformers), with
each benchmark's start and end times in the CSV beside the trace.

Conversion, per benchmark row (one job): the trace rows whose ``TimeStamp`` falls in
[start_timestamp, end_timestamp] (rows with start 0 were not run and are skipped); ``GRACT``
(DCGM_FI_PROF_GR_ENGINE_ACTIVE, 0-1) becomes ``gpu_utilization_ratio`` and ``FBUSD``
(DCGM_FI_DEV_FB_USED, MiB) ``gpu_memory_used_bytes``; the label is the folder's kind (``train``
and ``finetune``: training; ``infer``: inference). A job is identified by its trace file and
window, so the summary files that repeat a benchmark do not count it twice. Each job is also
subsampled to one sample every 5 s and every 15 s (the detector must work at nvidia-smi's usual
intervals); the split into train and test is by job (seeded), so no job has windows on both
sides. Features: :func:`computewatch.detect.job_features`.

Reads the snapshot with ``git show`` (no checkout needed); writes the feature table (CSV, a
``#`` header with source and licence) and a few held-out jobs' raw series in the long CSV
format for the tests.

    python scripts/build_detection_dataset.py --repo /path/to/MIGProfiler/.git \
        [--source labelled=/path/to/folder]
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import io
import math
import random
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from computewatch.detect.features import TABLE_FEATURES, GpuTelemetry
from computewatch.detect.features import job_features as features_of
from computewatch.traces import read_trace as read_telemetry_file

COMMIT = "5462a7c1bf586a8121fa695a80d4cedb935d4425"
SOURCE = "https://github.com/HuaizhengZhang/MIGProfiler"
SOURCE_NAME = "migprofiler"
LICENCE = "MIT (the repository's LICENSE file)"
INTERVALS = (1, 5, 15)
TEST_FRACTION = 0.25
SEED = 20261130
MIN_SAMPLES = 30
ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "src/computewatch/detect/models/training_features.csv"
HELDOUT = ROOT / "tests/detect/data/migprofiler_heldout.csv"
HELDOUT_JOBS = 3  # per class
GPU_NAMES = {  # NVML names; the repository says "A100" only: SXM4 assumed (same catalog peaks)
    "A100-40g": "NVIDIA A100-SXM4-40GB",
    "A100-80g": "NVIDIA A100-SXM4-80GB",
}


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "--git-dir", str(repo), *args], check=True, capture_output=True, text=True
    ).stdout


def label_of(path: str) -> str | None:
    parts = path.lower().split("/")
    if any("infer" in p for p in parts):
        return "inference"
    if any(p.startswith(("train", "finetune", "pretrain")) for p in parts):
        return "training"
    return None


def read_trace(repo: Path, commit: str, path: str) -> dict[int, tuple[float, float]]:
    """TimeStamp -> (GRACT, FBUSD MiB), entity 0 (every trace of the snapshot has only it)."""
    out: dict[int, tuple[float, float]] = {}
    for row in csv.DictReader(io.StringIO(git(repo, "show", f"{commit}:{path}"))):
        if row["EntityId"].strip() != "0":
            continue
        try:
            out[int(row["TimeStamp"])] = (float(row["GRACT"]), float(row["FBUSD"]))
        except ValueError:
            continue
    return out


def jobs(repo: Path, commit: str) -> list[dict[str, object]]:
    files = git(repo, "ls-tree", "-r", "--name-only", commit).splitlines()
    traces = {
        f.rsplit("/", 1)[0]: f for f in files if f.startswith("data/") and f.endswith("/dcgm.csv")
    }
    found: dict[tuple[str, int, int], dict[str, object]] = {}
    for f in sorted(files):
        if not f.startswith("data/") or not f.endswith(".csv") or f.endswith("dcgm.csv"):
            continue
        folder = f.rsplit("/", 1)[0]
        trace_path = traces.get(folder) or traces.get(folder.rsplit("/", 1)[0])
        label = label_of(f)
        if trace_path is None or label is None:
            continue
        text = git(repo, "show", f"{commit}:{f}")
        for row in csv.DictReader(io.StringIO(text)):
            try:
                start, end = int(float(row["start_timestamp"])), int(float(row["end_timestamp"]))
            except (KeyError, ValueError):
                continue
            if start <= 0 or end <= start:
                continue
            key = (trace_path, start, end)
            if key in found:
                continue
            found[key] = {
                "trace": trace_path,
                "start": start,
                "end": end,
                "label": label,
                "model": row.get("model_name", ""),
                "batch_size": row.get("batch_size", ""),
                "setup": trace_path.split("/")[1],
            }
    return list(found.values())


def job_id(j: dict[str, object]) -> str:
    raw = f"{j['trace']}:{j['start']}:{j['end']}"
    return hashlib.sha256(raw.encode()).hexdigest()[:12]


def split(all_jobs: list[dict[str, object]]) -> dict[str, str]:
    """Per class, a seeded TEST_FRACTION of the jobs to "test", the rest to "train"."""
    rng = random.Random(SEED)
    out: dict[str, str] = {}
    for label in ("training", "inference"):
        ids = sorted(job_id(j) for j in all_jobs if j["label"] == label)
        rng.shuffle(ids)
        n_test = round(len(ids) * TEST_FRACTION)
        for i, jid in enumerate(ids):
            out[jid] = "test" if i < n_test else "train"
    return out


def feature_row(gpus: Sequence[GpuTelemetry]) -> dict[str, object]:
    """The model features of one job (empty where not known) and its duration, interval and
    peak memory, as the table stores them."""
    f = features_of(list(gpus))
    keep = (*TABLE_FEATURES, "duration_seconds", "interval_seconds", "mem_used_gib_max")
    return {n: ("" if math.isnan(f[n]) else round(f[n], 6)) for n in keep}


def read_labelled(folder: Path) -> tuple[list[dict[str, object]], list[str]]:
    """The jobs of a labelled folder (``labels.csv``: file, job, label, setup, source,
    licence), each at its own interval; seeded by-job split like MIGProfiler's. Returns the
    table rows and the header lines naming each source and its licence."""
    rows: list[dict[str, object]] = []
    notes: set[str] = set()
    with (folder / "labels.csv").open(newline="") as fh:
        entries = list(csv.DictReader(fh))
    for e in entries:
        if e["label"] not in ("training", "inference", "other"):
            raise SystemExit(f"{folder}/labels.csv: {e['file']}: label {e['label']!r}")
        trace = read_telemetry_file(folder / e["file"])
        for j in trace.jobs:
            if e.get("job") and j.job != e["job"]:
                continue
            gpus = [GpuTelemetry(g.times, g.metrics) for g in j.gpus]
            jid = hashlib.sha256(f"{e['source']}:{e['file']}:{j.job}".encode()).hexdigest()[:12]
            side = "test" if random.Random(f"{SEED}:{jid}").random() < TEST_FRACTION else "train"
            rows.append(
                {
                    "job_id": jid,
                    "source": e["source"],
                    "label": e["label"],
                    "split": side,
                    "setup": e["setup"],
                    "workload": j.job,
                    "subsample_seconds": 1,
                    **feature_row(gpus),
                }
            )
        notes.add(f"# source: {e['source']}: {folder.name}/labels.csv; licence: {e['licence']}")
    return rows, sorted(notes)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repo", type=Path, required=True, help="the snapshot's git directory")
    ap.add_argument("--commit", default=COMMIT)
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--heldout", type=Path, default=HELDOUT)
    ap.add_argument(
        "--source",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="a further labelled source: labelled=FOLDER (a labels.csv beside the files)",
    )
    a = ap.parse_args(argv)
    all_jobs = jobs(a.repo, a.commit)
    sides = split(all_jobs)
    cache: dict[str, dict[int, tuple[float, float]]] = {}
    rows: list[dict[str, object]] = []
    raw_heldout: list[tuple[str, str, list[tuple[int, float, float]]]] = []
    picked = {"training": 0, "inference": 0}
    for j in sorted(all_jobs, key=job_id):
        trace = cache.get(str(j["trace"]))
        if trace is None:
            trace = cache[str(j["trace"])] = read_trace(a.repo, a.commit, str(j["trace"]))
        pts = [
            (t, *trace[t])
            for t in range(int(str(j["start"])), int(str(j["end"])) + 1)
            if t in trace
        ]
        if len(pts) < MIN_SAMPLES:
            continue
        jid = job_id(j)
        label = str(j["label"])
        if sides[jid] == "test" and picked[label] < HELDOUT_JOBS:
            picked[label] += 1
            raw_heldout.append((f"{label}-{jid}", str(j["setup"]), pts))
        for k in INTERVALS:
            sub = pts[::k]
            if len(sub) < 4:
                continue
            g = GpuTelemetry(
                [float(t) for t, _, _ in sub],
                {
                    "gpu_utilization_ratio": [u for _, u, _ in sub],
                    "gpu_memory_used_bytes": [m * 2**20 for _, _, m in sub],
                },
            )
            rows.append(
                {
                    "job_id": jid,
                    "source": SOURCE_NAME,
                    "label": label,
                    "split": sides[jid],
                    "setup": j["setup"],
                    "workload": j["model"],
                    "subsample_seconds": k,
                    **feature_row([g]),
                }
            )
    headers = [
        f"# source: {SOURCE_NAME}: {SOURCE} commit {a.commit}, folder data/ (DCGM dmon, 1 Hz, "
        "A100)",
        f"# licence: {SOURCE_NAME}: {LICENCE}; derived by scripts/build_detection_dataset.py",
        f"# label: {SOURCE_NAME}: training (train/, finetune_*) or inference (infer*/), from "
        "the folder",
    ]
    for spec in a.source:
        name, _, path = spec.partition("=")
        if name != "labelled" or not path:
            ap.error(f"--source {spec}: expected labelled=FOLDER")
        more, notes = read_labelled(Path(path))
        rows += more
        headers += notes
    a.out.parent.mkdir(parents=True, exist_ok=True)
    with a.out.open("w", newline="") as fh:
        for h in headers:
            fh.write(h + "\n")
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    a.heldout.parent.mkdir(parents=True, exist_ok=True)
    with a.heldout.open("w", newline="") as fh:
        w2 = csv.writer(fh)
        w2.writerow(
            ["job", "timestamp", "gpu", "name", "gpu_utilization_ratio", "gpu_memory_used_bytes"]
        )
        for name, setup, pts in raw_heldout:
            for t, u, m in pts:
                w2.writerow([name, t, 0, GPU_NAMES[setup], u, int(m * 2**20)])
    n = {s: sum(1 for j in all_jobs if sides[job_id(j)] == s) for s in ("train", "test")}
    print(
        f"{len(all_jobs)} jobs ({n['train']} train, {n['test']} test), {len(rows)} feature rows "
        f"-> {a.out}; {len(raw_heldout)} held-out jobs' series -> {a.heldout}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
