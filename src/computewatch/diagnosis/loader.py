"""Everything the rules read, loaded from the store once per diagnosis."""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from computewatch.analysis.summary import build_summary
from computewatch.errors import ComputewatchError
from computewatch.store import PhaseRow, RequestRow, RunRow, StepRow, Store

# The series the rules look at; everything else in the run is left unread.
WANTED_SERIES = frozenset(
    {
        "gpu_utilization_ratio", "gpu_memory_used_bytes", "gpu_memory_total_bytes",
        "gpu_process_memory_used_bytes", "gpu_clock_event_reasons", "gpu_sm_clock_hertz",
        "gpu_temperature_celsius", "gpu_power_watts", "gpu_power_limit_watts",
        "host_cpu_seconds_total", "host_load1", "host_memory_total_bytes",
        "host_memory_available_bytes", "host_swap_used_bytes", "host_disk_read_bytes_total",
        "cgroup_memory_current_bytes", "cgroup_memory_max_bytes", "tree_cpu_seconds_total",
        "tree_read_bytes_total",
    }
)  # fmt: skip


class NotApplicable(ComputewatchError):
    """A rule cannot look at this run (no steps, no GPU series ...): the message says why."""


MAX_POINTS = 20_000
"""Points per series the rules read; longer runs are thinned (every Nth tick) to this."""
MAX_LOADED_POINTS = 300_000
"""Points the rules read in all, over every series: a run with many series (8 GPUs) is thinned
further. The kept ticks are read by seeking to each, so loading a run costs the same for a day
as for a few hours (a few tenths of a second for this many points)."""


class Series(msgspec.Struct, frozen=True):
    """One stored series: its labels and (monotonic time, value) points in tick order."""

    name: str
    labels: dict[str, str]
    points: list[tuple[float, float]]


class StepTime(msgspec.Struct, frozen=True):
    """One timed step of one process: its 1-based index among that process's steps, and its
    start and end in monotonic seconds."""

    pid: int
    index: int
    start: float
    end: float

    @property
    def seconds(self) -> float:
        return self.end - self.start


# A dataclass, not a msgspec.Struct: its step-time cache is a field left out of __init__,
# equality and repr (init=False), which a Struct cannot declare.
@dataclass
class RunData:
    """One run as the rules see it. Times are monotonic seconds; :meth:`rel` turns them into
    seconds from the run's start for evidence."""

    run: RunRow
    summary: Mapping[str, Any]  # a RunSummary, or a stored one
    steps: list[StepRow] = field(default_factory=list)
    phases: list[PhaseRow] = field(default_factory=list)
    requests: list[RequestRow] = field(default_factory=list)
    writers: dict[int, tuple[float, dict[str, Any]]] = field(default_factory=dict)
    ticks: list[float] = field(default_factory=list)
    """Monotonic time of each tick read: every tick, or of a long run every Nth (as the series)
    and the last."""
    series: dict[str, list[Series]] = field(default_factory=dict)
    start_mono: float | None = None  # the run's start on the monotonic clock
    _step_times: dict[int, list[StepTime]] | None = field(
        default=None, init=False, repr=False, compare=False
    )

    @classmethod
    def load(
        cls,
        store: Store,
        run: RunRow,
        summary: Mapping[str, Any] | None = None,
        steps: Sequence[StepRow] | None = None,
    ) -> RunData:
        """Read the run's steps (unless given: already read), phases, requests, writers, ticks
        and the wanted series."""
        if summary is None:
            summary = run.summary if run.summary is not None else build_summary(store, run)
        # A long run is read thinned to about MAX_POINTS per series: the rules look at
        # stretches of minutes and at rates of cumulative counters, which thinning keeps.
        wanted = [s for s in store.series(run.key) if s.name in WANTED_SERIES]
        bounds = store.tick_bounds(run.key)  # ticks are numbered from 0 without gaps
        stride = 1
        if bounds is not None:
            n = bounds[1][0] + 1
            stride = max(1, -(-n // MAX_POINTS), -(-n * len(wanted) // MAX_LOADED_POINTS))
        ticks = store.ticks(run.key, stride=stride)
        if bounds is not None and (not ticks or ticks[-1][0] != bounds[1][0]):
            ticks.append(bounds[1])
        seq_mono = {seq: mono for seq, mono, _ in ticks}
        pts = store.points_of(run.key, [s.idx for s in wanted], stride=stride)
        series: dict[str, list[Series]] = {}
        for s in wanted:
            points = [(seq_mono[q], v) for q, v in pts[s.idx] if q in seq_mono]
            series.setdefault(s.name, []).append(Series(s.name, dict(s.labels), points))
        steps = store.steps(run.key) if steps is None else list(steps)
        data = cls(
            run=run,
            summary=summary,
            steps=steps,
            phases=store.phases(run.key),
            requests=store.requests(run.key),
            writers=store.writers(run.key),
            ticks=[mono for _, mono, _ in ticks],
            series=series,
        )
        # Wall and monotonic times of one moment give the offset between the two clocks.
        pair = (bounds[0][1], bounds[0][2]) if bounds is not None else None
        if pair is None and steps:
            pair = (steps[0].mono, steps[0].wall)
        if pair is not None:
            data.start_mono = pair[0] - (pair[1] - run.started_at)
        elif data.writers:
            data.start_mono = min(t for t, _ in data.writers.values())
        return data

    # -- time ---------------------------------------------------------------------------------
    def rel(self, mono: float) -> float:
        """Seconds from the run's start."""
        return mono - (self.start_mono if self.start_mono is not None else 0.0)

    @property
    def duration(self) -> float:
        d = self.summary.get("duration_seconds")
        if isinstance(d, int | float) and d > 0:
            return float(d)
        if len(self.ticks) >= 2:
            return self.ticks[-1] - self.ticks[0]
        return 0.0

    # -- money --------------------------------------------------------------------------------
    @property
    def usd_per_second(self) -> float | None:
        """The run's price per second of wall time (its total cost / its duration)."""
        cost = self.summary.get("cost")
        total = cost.get("total") if isinstance(cost, dict) else None
        usd = total.get("value") if isinstance(total, dict) else None
        if not isinstance(usd, int | float) or self.duration <= 0:
            return None
        return float(usd) / self.duration

    @property
    def kwh_per_second(self) -> float | None:
        """The run's energy per second of wall time (facility kWh, else device kWh, / its
        duration)."""
        energy = self.summary.get("energy")
        for key in ("facility", "device"):
            part = energy.get(key) if isinstance(energy, dict) else None
            kwh = part.get("value") if isinstance(part, dict) else None
            if isinstance(kwh, int | float) and self.duration > 0:
                return float(kwh) / self.duration
        return None

    @property
    def allowed_cores(self) -> float:
        """The cores the run was allowed (cgroup quota and affinity), 1 when unknown."""
        cpu = self.summary.get("cpu")
        cores = cpu.get("allowed_cores") if isinstance(cpu, dict) else None
        return float(cores) if isinstance(cores, int | float) and cores > 0 else 1.0

    def usd(self, seconds: float | None) -> float | None:
        rate = self.usd_per_second
        return None if rate is None or seconds is None else seconds * rate

    # -- steps and phases ---------------------------------------------------------------------
    def step_times(self) -> dict[int, list[StepTime]]:
        """Each process's timed steps: from the previous step (the first from its
        ``track()`` start, when known). Computed once; the rules only read it."""
        if self._step_times is not None:
            return self._step_times
        out: dict[int, list[StepTime]] = {}
        by_pid: dict[int, list[StepRow]] = {}
        for s in self.steps:
            by_pid.setdefault(s.pid, []).append(s)
        for pid, rows in by_pid.items():
            rows.sort(key=lambda r: r.mono)
            start = self.writers.get(pid, (None, {}))[0]
            prev = start if start is not None and start <= rows[0].mono else None
            times = []
            for i, r in enumerate(rows, 1):
                if prev is not None:
                    times.append(StepTime(pid, i, prev, r.mono))
                prev = r.mono
            out[pid] = times
        self._step_times = out
        return out

    def step_noise(self) -> float:
        """How much the steps' total could differ in a rerun, from the run's own variation:
        half the interquartile range of the step times over their median (robust to the
        outliers a finding may be about), times the steps' time per process; 0 with fewer
        than 8 steps in every process."""
        out = []
        for ts in self.step_times().values():
            d = sorted(t.seconds for t in ts[1:])  # the first step is warm-up
            if len(d) < 8:
                continue
            n = len(d)
            q1, q3 = d[(n - 1) // 4], d[(3 * (n - 1)) // 4]
            mid = d[n // 2] if n % 2 else (d[n // 2 - 1] + d[n // 2]) / 2
            if mid > 0:
                out.append((q3 - q1) / (2 * mid) * sum(d))
        return sum(out) / len(out) if out else 0.0

    def phase_seconds_by_step(
        self, names: Iterable[str] | Callable[[str], bool]
    ) -> dict[int, list[float]]:
        """Per process, the time in the named phases (or those a predicate of the name
        accepts, such as ``is_comm_phase``) within each timed step (same order as
        :meth:`step_times`). A phase counts in the first step ending at or after its end,
        clipped to that step; overlapping phases (a collective timed inside a DDP bucket's
        all-reduce, async buckets in flight together) count their union once."""
        if callable(names):
            accept = names
        else:
            wanted = set(names)

            def accept(name: str) -> bool:
                return phase_matches(name, wanted)

        by_pid: dict[int, list[PhaseRow]] = {}
        for ph in self.phases:
            if accept(ph.name):
                by_pid.setdefault(ph.pid, []).append(ph)
        out: dict[int, list[float]] = {}
        for pid, times in self.step_times().items():
            if pid not in by_pid:  # no such phase in this process
                out[pid] = [0.0] * len(times)
                continue
            ends = [t.end for t in times]
            spans: list[list[tuple[float, float]]] = [[] for _ in times]
            for ph in by_pid.get(pid, []):
                i = bisect.bisect_left(ends, ph.end)
                if i < len(times):
                    a, b = max(ph.start, times[i].start), min(ph.end, times[i].end)
                    if b > a:
                        spans[i].append((a, b))
            out[pid] = [_union_seconds(sp) for sp in spans]
        return out

    def rank_of(self, pid: int) -> int | None:
        meta = self.writers.get(pid, (0.0, {}))[1]
        r = meta.get("rank") if isinstance(meta, dict) else None
        return r if isinstance(r, int) else None

    # -- series -------------------------------------------------------------------------------
    def of(self, name: str, **labels: str) -> list[Series]:
        """The stored series of ``name`` whose labels include ``labels``."""
        return [
            s
            for s in self.series.get(name, [])
            if all(s.labels.get(k) == v for k, v in labels.items())
        ]

    def gpus(self) -> list[dict[str, Any]]:
        """The summary's GPUs (those the run used), as dicts."""
        return [g for g in self.summary.get("gpus") or [] if isinstance(g, dict) and g.get("uuid")]

    def used_gpus(self) -> list[dict[str, Any]]:
        """:meth:`gpus`; NotApplicable where the run used none (for the rules about GPUs)."""
        gpus = self.gpus()
        if not gpus:
            raise NotApplicable("the run used no GPU")
        return gpus


def phase_matches(name: str, wanted: set[str]) -> bool:
    """A phase matches ``comm`` as ``comm`` or ``comm/allreduce``, ``comm.broadcast``..."""
    return name in wanted or any(name.startswith(w + c) for w in wanted for c in "/.:")


def rates(points: Sequence[tuple[float, float]]) -> list[tuple[float, float, float]]:
    """A counter's (start, end, rate per second) over each interval between points."""
    out = []
    for (t0, v0), (t1, v1) in itertools.pairwise(points):
        if t1 > t0:
            out.append((t0, t1, max(v1 - v0, 0.0) / (t1 - t0)))
    return out


def stretches(
    flags: Sequence[tuple[float, float, bool]], *, min_seconds: float = 0.0
) -> list[tuple[float, float]]:
    """Merge consecutive flagged intervals into (start, end) stretches of at least
    ``min_seconds``."""
    out: list[tuple[float, float]] = []
    cur: list[float] | None = None
    for t0, t1, on in flags:
        if on:
            if cur is not None and t0 <= cur[1] + 1e-9:
                cur[1] = t1
            else:
                if cur is not None:
                    out.append((cur[0], cur[1]))
                cur = [t0, t1]
        elif cur is not None:
            out.append((cur[0], cur[1]))
            cur = None
    if cur is not None:
        out.append((cur[0], cur[1]))
    return [(a, b) for a, b in out if b - a >= min_seconds]


def overlap(a0: float, a1: float, b0: float, b1: float) -> float:
    return max(min(a1, b1) - max(a0, b0), 0.0)


def _union_seconds(spans: list[tuple[float, float]]) -> float:
    """The length of the union of ``(start, end)`` intervals."""
    total = 0.0
    cur_a = cur_b = None
    for a, b in sorted(spans):
        if cur_b is None or a > cur_b:
            if cur_b is not None and cur_a is not None:
                total += cur_b - cur_a
            cur_a, cur_b = a, b
        elif b > cur_b:
            cur_b = b
    if cur_a is not None and cur_b is not None:
        total += cur_b - cur_a
    return total
