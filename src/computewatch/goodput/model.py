"""Goodput across restarts: the runs of one training (a model's, or a job's) in time order,
their time split into productive step time and badput by cause, and the checkpoint interval
that the measured failure rate and checkpoint cost call for (Young 1974, Daly 2006).

Pure functions over :class:`RunTime` records, so that the local store (``goodput.local``) and
the server (from the summaries it holds) compute the same figures."""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Sequence
from typing import Literal, TypedDict

import msgspec

__all__ = [
    "BADPUT",
    "Breakdown",
    "GoodputReport",
    "RunGoodput",
    "RunTime",
    "RunTimeJson",
    "goodput",
    "run_time_from_json",
]

Category = Literal[
    "initialization", "data_wait", "checkpoint_save", "lost_progress", "restart_gap", "idle"
]
BADPUT: tuple[Category, ...] = (
    "initialization",
    "data_wait",
    "checkpoint_save",
    "lost_progress",
    "restart_gap",
    "idle",
)
"""Badput categories, in the order they are printed."""

MAX_PROGRESS_POINTS = 256
"""Points kept of a run's progress curve (global step -> productive seconds so far)."""


class RunTimeJson(TypedDict):
    """A run's time as goodput sees it (:class:`RunTime`), stored in its summary's diagnosis
    (``diagnosis.goodput``) so that the server can rebuild a lineage from what it holds."""

    run_id: str
    name: str | None
    status: str
    started_at: float
    ended_at: float
    gpu_count: int
    kwh: float | None
    usd: float | None
    initialization_seconds: float
    step_seconds: float
    data_wait_seconds: float
    checkpoint_seconds: float
    checkpoints: int
    steps: int
    start_step: int | None
    last_step: int | None
    last_checkpoint_step: int | None
    progress: list[list[float]]


class RunTime(msgspec.Struct, frozen=True):
    """One run's time: wall-clock start and end (epoch seconds), the GPUs it held and what it
    used (kWh, USD; None when unknown); its initialization (start to its first step's start),
    its step time (the lead process's steps, summed), the data waits and checkpoint saves in
    it, its steps and the global step it resumed from (``start_step``), reached
    (``last_step``) and last checkpointed (``last_checkpoint_step``), and ``progress``:
    (global step, productive seconds up to it) points, to price work redone after a restart."""

    run_id: str
    name: str | None
    status: str
    started_at: float
    ended_at: float
    gpu_count: int = 0
    kwh: float | None = None
    usd: float | None = None
    initialization_seconds: float = 0.0
    step_seconds: float = 0.0
    data_wait_seconds: float = 0.0
    checkpoint_seconds: float = 0.0
    checkpoints: int = 0
    steps: int = 0
    start_step: int | None = None
    last_step: int | None = None
    last_checkpoint_step: int | None = None
    progress: tuple[tuple[float, float], ...] = ()

    @property
    def seconds(self) -> float:
        return max(self.ended_at - self.started_at, 0.0)

    @property
    def productive_seconds(self) -> float:
        """Step time less the data waits and checkpoint saves within it."""
        return max(self.step_seconds - self.data_wait_seconds - self.checkpoint_seconds, 0.0)

    def productive_after(self, step: float) -> float:
        """Productive seconds of this run's steps after global step ``step`` (0 past its end)."""
        pts = self.progress
        if not pts or self.last_step is None:
            return 0.0
        total = pts[-1][1]
        return max(total - _interpolate(pts, step), 0.0)

    def as_json(self) -> RunTimeJson:
        return {
            "run_id": self.run_id,
            "name": self.name,
            "status": self.status,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "gpu_count": self.gpu_count,
            "kwh": self.kwh,
            "usd": self.usd,
            "initialization_seconds": round(self.initialization_seconds, 6),
            "step_seconds": round(self.step_seconds, 6),
            "data_wait_seconds": round(self.data_wait_seconds, 6),
            "checkpoint_seconds": round(self.checkpoint_seconds, 6),
            "checkpoints": self.checkpoints,
            "steps": self.steps,
            "start_step": self.start_step,
            "last_step": self.last_step,
            "last_checkpoint_step": self.last_checkpoint_step,
            "progress": [[s, round(t, 6)] for s, t in self.progress],
        }


def run_time_from_json(raw: object) -> RunTime | None:
    """A stored :class:`RunTimeJson` back as the record; None when it is not one."""
    if not isinstance(raw, dict):
        return None
    try:
        raw_progress = raw.get("progress") or []
        if not isinstance(raw_progress, list):
            return None
        progress = tuple((float(p[0]), float(p[1])) for p in raw_progress if len(p) == 2)
        if not all(math.isfinite(a) and math.isfinite(b) for a, b in progress):
            return None

        def opt_int(key: str) -> int | None:
            v = raw.get(key)
            return int(v) if isinstance(v, int | float) and not isinstance(v, bool) else None

        def opt_float(key: str) -> float | None:
            v = raw.get(key)
            return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None

        started, ended = float(raw["started_at"]), float(raw["ended_at"])
        if not (math.isfinite(started) and math.isfinite(ended)):
            return None
        return RunTime(
            run_id=str(raw["run_id"]),
            name=raw.get("name") if isinstance(raw.get("name"), str) else None,
            status=str(raw.get("status") or "unknown"),
            started_at=started,
            ended_at=ended,
            gpu_count=int(raw.get("gpu_count") or 0),
            kwh=opt_float("kwh"),
            usd=opt_float("usd"),
            initialization_seconds=float(raw.get("initialization_seconds") or 0.0),
            step_seconds=float(raw.get("step_seconds") or 0.0),
            data_wait_seconds=float(raw.get("data_wait_seconds") or 0.0),
            checkpoint_seconds=float(raw.get("checkpoint_seconds") or 0.0),
            checkpoints=int(raw.get("checkpoints") or 0),
            steps=int(raw.get("steps") or 0),
            start_step=opt_int("start_step"),
            last_step=opt_int("last_step"),
            last_checkpoint_step=opt_int("last_checkpoint_step"),
            progress=progress,
        )
    except (KeyError, TypeError, ValueError):
        return None


def _interpolate(pts: Sequence[tuple[float, float]], step: float) -> float:
    """Productive seconds at ``step`` along a run's progress curve (linear between points)."""
    steps = [p[0] for p in pts]
    i = bisect.bisect_left(steps, step)
    if i <= 0:
        return pts[0][1] if step >= pts[0][0] else 0.0
    if i >= len(pts):
        return pts[-1][1]
    (s0, t0), (s1, t1) = pts[i - 1], pts[i]
    return t0 + (t1 - t0) * (step - s0) / (s1 - s0) if s1 > s0 else t1


def progress_points(
    steps: Sequence[tuple[int, float]], limit: int = MAX_PROGRESS_POINTS
) -> tuple[tuple[float, float], ...]:
    """(global step, cumulative productive seconds) thinned to at most ``limit`` points, the
    first and the last kept."""
    if len(steps) <= limit:
        return tuple((float(s), t) for s, t in steps)
    stride = -(-len(steps) // (limit - 1))
    kept = list(steps[::stride])
    if kept[-1] != steps[-1]:
        kept.append(steps[-1])
    return tuple((float(s), t) for s, t in kept)


class Breakdown(msgspec.Struct, frozen=True):
    """Seconds by category (goodput and badput); GPU-hours, kWh and USD where known."""

    seconds: float
    fraction: float | None
    gpu_hours: float | None
    kwh: float | None
    usd: float | None


class RunGoodput(msgspec.Struct, frozen=True):
    """One run of a lineage: its productive time and badput by category."""

    run: RunTime
    productive_seconds: float
    badput: dict[str, float]
    redone_from_step: int | None = None  # the global step its successor resumed from

    @property
    def total_seconds(self) -> float:
        return self.productive_seconds + sum(self.badput.values())


class CheckpointAdvice(msgspec.Struct, frozen=True):
    """Young/Daly's interval ``sqrt(2 x checkpoint time x MTBF)`` against the one in use, and
    what it would save over the lineage (None where a figure is missing, with ``why``)."""

    checkpoint_seconds: float | None
    mtbf_seconds: float | None
    failures: int
    interval_seconds: float | None
    current_interval_seconds: float | None
    saving_seconds: float | None
    saving_fraction: float | None
    why: str


class GoodputReport(msgspec.Struct, frozen=True):
    """A training's goodput: from the first run's start to the last run's end."""

    key: str
    runs: list[RunGoodput]
    total_seconds: float
    goodput: Breakdown
    badput: dict[str, Breakdown]
    checkpoint: CheckpointAdvice
    notes: list[str] = msgspec.field(default_factory=list)


def _per_run(runs: Sequence[RunTime]) -> list[RunGoodput]:
    """Each run's productive time and badput. The steps a run did past the global step its
    successor resumed from were redone: lost progress, not goodput. A successor without a
    start step resumes from its predecessor's last checkpoint when one is known, else from
    where the predecessor stopped (nothing lost)."""
    out = []
    for i, r in enumerate(runs):
        nxt = runs[i + 1] if i + 1 < len(runs) else None
        resumed: int | None = None
        if nxt is not None and r.last_step is not None:
            resumed = nxt.start_step
            if resumed is None:
                resumed = r.last_checkpoint_step
            if resumed is not None and resumed >= r.last_step:
                resumed = None
        lost = r.productive_after(resumed) if resumed is not None else 0.0
        lost = min(lost, r.productive_seconds)
        productive = r.productive_seconds - lost
        init = min(r.initialization_seconds, r.seconds)
        accounted = init + r.step_seconds
        badput = {
            "initialization": init,
            "data_wait": r.data_wait_seconds,
            "checkpoint_save": r.checkpoint_seconds,
            "lost_progress": lost,
            "restart_gap": 0.0,
            "idle": max(r.seconds - accounted, 0.0),
        }
        # Checkpoints saved outside the steps are not in the step time: take them from idle.
        outside = max(r.checkpoint_seconds - (r.step_seconds - r.productive_seconds), 0.0)
        if outside > 0:
            badput["idle"] = max(badput["idle"] - outside, 0.0)
        out.append(RunGoodput(r, productive, badput, resumed))
    return out


def _breakdown(seconds: float, total: float, gpu_h: float | None, kwh: float | None,
               usd: float | None) -> Breakdown:  # fmt: skip
    return Breakdown(seconds, seconds / total if total > 0 else None, gpu_h, kwh, usd)


def goodput(key: str, runs: Sequence[RunTime]) -> GoodputReport:
    """The goodput of the runs of one training, taken in time order: productive step time over
    the total time from the first run's start to the last run's end, and badput by category
    (:data:`BADPUT`); gaps between runs are ``restart_gap``. GPU-hours, energy and cost of a
    category are its seconds at the run's own GPUs, kWh and USD per second (a gap has none)."""
    ordered = sorted(runs, key=lambda r: (r.started_at, r.run_id))
    per = _per_run(ordered)
    notes: list[str] = []
    gaps = []
    for a, b in itertools.pairwise(ordered):
        gap = b.started_at - a.ended_at
        if gap < 0:
            notes.append(f"runs {a.run_id} and {b.run_id} overlap by {-gap:.1f} s")
        gaps.append(max(gap, 0.0))
    for i, g in enumerate(gaps):
        per[i + 1].badput["restart_gap"] = g
    total = (ordered[-1].ended_at - ordered[0].started_at) if ordered else 0.0
    total = max(total, sum(p.total_seconds for p in per))

    def figures(pick: dict[int, float] | None) -> tuple[float, float | None, float | None,
                                                        float | None]:  # fmt: skip
        sec = 0.0
        gpu_h: float | None = 0.0
        kwh: float | None = 0.0
        usd: float | None = 0.0
        for p in per:
            s = p.productive_seconds if pick is None else pick.get(id(p), 0.0)
            sec += s
            r = p.run
            rate = r.seconds if r.seconds > 0 else None
            gpu_h = None if gpu_h is None else gpu_h + s * r.gpu_count / 3600
            kwh = None if kwh is None or (r.kwh is None and s) else kwh + (
                s * (r.kwh or 0.0) / rate if rate else 0.0)  # fmt: skip
            usd = None if usd is None or (r.usd is None and s) else usd + (
                s * (r.usd or 0.0) / rate if rate else 0.0)  # fmt: skip
        return sec, gpu_h, kwh, usd

    sec, gpu_h, kwh, usd = figures(None)
    good = _breakdown(sec, total, gpu_h, kwh, usd)
    bad: dict[str, Breakdown] = {}
    for cat in BADPUT:
        if cat == "restart_gap":
            g = sum(p.badput[cat] for p in per)
            bad[cat] = _breakdown(g, total, None, None, None)
            continue
        sec, gpu_h, kwh, usd = figures({id(p): p.badput[cat] for p in per})
        bad[cat] = _breakdown(sec, total, gpu_h, kwh, usd)
    return GoodputReport(key, per, total, good, bad, _advice(per, total), notes)


def _advice(per: Sequence[RunGoodput], total: float) -> CheckpointAdvice:
    """Young/Daly: with checkpoints costing ``d`` seconds and a failure every ``M`` seconds,
    the expected overhead of an interval ``t`` is ``d/t`` (saving) plus ``t / 2M`` (work lost to
    a failure, half an interval on average), least at ``t = sqrt(2 d M)`` (Young 1974; Daly
    2006 adds higher-order terms that matter only when ``d`` nears ``M``)."""
    saves = sum(p.run.checkpoints for p in per)
    ck = sum(p.run.checkpoint_seconds for p in per) / saves if saves else None
    failures = sum(1 for p in per[:-1] if p.run.status != "completed") + (
        1 if per and per[-1].run.status in ("failed", "interrupted", "killed") else 0
    )
    busy = sum(p.run.seconds for p in per)
    mtbf = busy / failures if failures else None
    current = None
    if saves:
        current = sum(p.run.step_seconds for p in per) / saves
    if ck is None:
        why = "no checkpoint marked (run.checkpoint(step))"
        return CheckpointAdvice(None, mtbf, failures, None, current, None, None, why)
    if mtbf is None:
        why = "no failure among the runs: the failure rate is unknown"
        return CheckpointAdvice(ck, None, failures, None, current, None, None, why)
    best = math.sqrt(2 * ck * mtbf)

    def overhead(t: float) -> float:
        return ck / t + t / (2 * mtbf)

    saving = None
    if current is not None and current > 0:
        saving = max(overhead(current) - overhead(best), 0.0) * busy
    return CheckpointAdvice(
        ck,
        mtbf,
        failures,
        best,
        current,
        saving,
        saving / total if saving is not None and total > 0 else None,
        "Young/Daly: sqrt(2 x checkpoint time x MTBF); MTBF = the runs' time / their failures",
    )
