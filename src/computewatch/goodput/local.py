"""Goodput from the local store: each run's time (:func:`run_time`) from its steps, phases and
writers, and the runs of one model (its ``--model`` declaration) or one job (the ``job`` tag)."""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Mapping
from typing import Any

from computewatch.goodput.model import GoodputReport, RunTime, goodput, progress_points
from computewatch.store import RunRow, Store

__all__ = ["CHECKPOINT_PHASE", "DATA_PHASE", "lineage_runs", "local_goodput", "run_time"]

DATA_PHASE = "data"
CHECKPOINT_PHASE = "checkpoint"
RESUME_META = "resume"
"""The run document that ``computewatch run --start-step N`` records: ``{"start_step": N}``."""


def _number(v: object) -> float | None:
    if isinstance(v, dict):
        v = v.get("value")
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def _setting(meta: Mapping[str, Any], key: str) -> int | None:
    """A writer's declared integer (``start_step``) or setting (``global_step``...)."""
    v = meta.get(key)
    if v is None and isinstance(meta.get("settings"), dict):
        v = meta["settings"].get(key)
    return int(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def run_time(store: Store, run: RunRow, summary: Mapping[str, Any] | None = None) -> RunTime:
    """One run's time from the store: the lead process's steps (the one with most), the
    ``data`` and ``checkpoint`` phases, and the steps it resumed from, reached and saved."""
    summary = summary if summary is not None else (run.summary or {})
    steps = store.steps(run.key)
    writers = store.writers(run.key)
    by_pid: dict[int, list[tuple[float, float]]] = {}
    for s in steps:
        by_pid.setdefault(s.pid, []).append((s.mono, s.wall))
    lead = max(by_pid, key=lambda p: len(by_pid[p])) if by_pid else None
    meta = writers.get(lead, (0.0, {}))[1] if lead is not None else {}
    if not isinstance(meta, dict):
        meta = {}
    resume = store.meta(run.key).get(RESUME_META)
    start_step = _setting(meta, "start_step")
    if start_step is None and isinstance(resume, dict):
        start_step = _setting(resume, "start_step")
    ended = run.ended_at or run.data_until or run.heartbeat_at
    gpus = [g for g in summary.get("gpus") or [] if isinstance(g, dict)]
    energy = summary.get("energy")
    cost = summary.get("cost")
    kwh = _number(energy.get("facility")) if isinstance(energy, dict) else None
    usd = _number(cost.get("total")) if isinstance(cost, dict) else None
    base = {
        "run_id": run.id,
        "name": run.name,
        "status": run.status,
        "started_at": run.started_at,
        "gpu_count": len(gpus),
        "kwh": kwh,
        "usd": usd,
        "start_step": start_step,
    }
    if lead is None:
        end = ended if ended is not None else run.started_at
        return RunTime(ended_at=max(end, run.started_at), **base)  # type: ignore[arg-type]
    rows = sorted(by_pid[lead])
    monos = [m for m, _ in rows]
    durations = [b - a for a, b in itertools.pairwise(monos)]
    typical = sorted(durations)[len(durations) // 2] if durations else 0.0
    first_start = monos[0] - typical  # the first step's own work, taken as a typical step's
    phases = [p for p in store.phases(run.key) if p.pid == lead]

    def spans(name: str) -> list[tuple[float, float]]:
        return sorted(
            (p.start, p.end)
            for p in phases
            if p.name == name or p.name.startswith(name + "/") or p.name.startswith(name + ".")
        )

    data = [(a, b) for a, b in spans(DATA_PHASE) if b > first_start and a < monos[-1]]
    ckpt = _checkpoints(spans(CHECKPOINT_PHASE))
    in_steps = [(a, b) for a, b in ckpt if b > first_start and a < monos[-1]]
    # Productive seconds up to each step: its time less the data waits and saves ended by then.
    bad_ends = sorted((b, b - a) for a, b in data + in_steps)
    ends = [e for e, _ in bad_ends]
    cum_bad = [0.0]
    for _, d in bad_ends:
        cum_bad.append(cum_bad[-1] + d)
    n = len(rows)
    last_step = _setting(meta, "global_step")
    if last_step is None:
        last_step = (start_step or 0) + n
    first_global = last_step - n + 1
    curve = []
    for i, m in enumerate(monos):
        done = m - first_start
        bad = cum_bad[bisect.bisect_right(ends, m)]
        curve.append((first_global + i, max(done - bad, 0.0)))
    last_mono, last_wall = rows[-1]
    to_wall = last_wall - last_mono  # wall = mono + this, at the run's last step
    end = ended if ended is not None else last_wall
    return RunTime(
        ended_at=max(end, last_wall),
        initialization_seconds=max(first_start + to_wall - run.started_at, 0.0),
        step_seconds=monos[-1] - first_start,
        data_wait_seconds=sum(b - a for a, b in data),
        checkpoint_seconds=sum(b - a for a, b in ckpt),
        checkpoints=len(ckpt),
        steps=n,
        last_step=last_step,
        last_checkpoint_step=_setting(meta, "checkpoint_step"),
        progress=progress_points(curve),
        **base,  # type: ignore[arg-type]
    )


def _checkpoints(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Checkpoint saves: ``run.checkpoint(step)`` marks the call (no time) and, entered around
    the save, times it; a mark followed within a millisecond by a timed save is that save."""
    timed_starts = sorted(a for a, b in spans if b > a)
    out = []
    for a, b in spans:
        if b <= a:
            i = bisect.bisect_left(timed_starts, a)
            if i < len(timed_starts) and timed_starts[i] - a <= 1e-3:
                continue
        out.append((a, b))
    return out


def lineage_runs(store: Store, *, model: str | None = None, job: str | None = None) -> list[RunRow]:
    """The runs of one training, oldest first: those declaring ``model`` (``run --model``,
    ``track(model=...)``), or tagged ``job=JOB``."""
    out = []
    for run in store.list_runs():
        if job is not None and run.tags.get("job") != job:
            continue
        if model is not None:
            declared = store.meta(run.key).get("governance")
            if not isinstance(declared, dict) or declared.get("model") != model:
                continue
        out.append(run)
    out.sort(key=lambda r: (r.started_at, r.key))
    return out


def local_goodput(
    store: Store, *, model: str | None = None, job: str | None = None
) -> GoodputReport:
    """The goodput of a model's (or a job's) runs in the local store."""
    runs = lineage_runs(store, model=model, job=job)
    key = f"model {model}" if model is not None else f"job {job}"
    return goodput(key, [run_time(store, r) for r in runs])
