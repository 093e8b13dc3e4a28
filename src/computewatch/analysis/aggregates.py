"""The figures a run's summary is made of, kept as its samples and steps are stored.

The sampler feeds each batch it has written (:meth:`RunAggregates.add_batch`), so the end of a
run reads none of its samples back; :func:`aggregates_from_store` feeds the same object from the
store instead (``show`` of an old run, a run whose monitor crashed). Both see the same values in
the same order per series, so both give the same figures: sums, extremes, counts and counters'
first and last values exactly; within a tick, the per-GPU sums over processes use ``math.fsum``,
which does not depend on the order the readings came in.

Step times: exact (sorted, linearly interpolated percentiles) for the first
``STEP_TIMES_EXACT`` durations; beyond, a DDSketch (Masson et al., VLDB 2019) whose quantiles are
within ``STEP_TIME_RELATIVE_ACCURACY`` of the exact ones, so that a run's end costs the same
whatever its length.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from computewatch.analysis.common import percentile

if TYPE_CHECKING:
    from ddsketch import DDSketch

    from computewatch.store import RunRow, Store

__all__ = [
    "CGROUP_CPU",
    "MIN_WINDOW_SECONDS",
    "STEP_TIMES_EXACT",
    "STEP_TIME_RELATIVE_ACCURACY",
    "GpuFigures",
    "RunAggregates",
    "SeriesFigures",
    "StepFigures",
    "aggregates_from_store",
]

MIN_WINDOW_SECONDS = 1.0  # utilization_max is taken over windows at least this long
STEP_TIMES_EXACT = 50_000
"""Step durations kept exactly; beyond this many, their percentiles come from a sketch."""
STEP_TIME_RELATIVE_ACCURACY = 0.005
"""The sketch's guarantee: a percentile within 0.5 % of the exact one."""

TREE_SERIES = frozenset(
    {
        "tree_cpu_seconds_total",
        "tree_resident_memory_bytes",
        "tree_process_peak_resident_memory_bytes",
        "tree_read_bytes_total",
        "tree_written_bytes_total",
        "host_memory_used_bytes",
        "host_memory_total_bytes",
    }
)
CGROUP_CPU = "run_cgroup_cpu_seconds_total"
"""The run cgroup's CPU counter: where present, the run's CPU seconds (it counts processes
the tree loses, such as double-forked daemons reaped outside it)."""
HOST_SUMS = frozenset(
    {
        "host_disk_read_bytes_total",
        "host_disk_written_bytes_total",
        "host_network_receive_bytes_total",
        "host_network_transmit_bytes_total",
    }
)  # summed over devices and interfaces, loopback excluded
GPU_SERIES = frozenset(
    {
        "gpu_utilization_ratio",
        "gpu_power_watts",
        "gpu_sm_active_ratio",
        "gpu_tensor_active_ratio",
        "gpu_sm_occupancy_ratio",
        "gpu_dram_active_ratio",
        "gpu_memory_used_bytes",
        "gpu_memory_total_bytes",
        "gpu_energy_joules_total",
        "gpu_clock_event_reasons",
        "gpu_process_memory_used_bytes",
        "gpu_process_sm_utilization_ratio",
        "gpu_other_processes",
        "gpu_other_processes_sm_utilization_ratio",
        "gpu_other_processes_memory_used_bytes",
        "tpu_hbm_bandwidth_utilization_ratio",  # a TPU chip's, labelled gpu as its others
    }
)

# What a series is kept for, beyond its count, first, last, peak and sum.
_PLAIN, _CPU, _CLOCK, _PROC_MEM, _PROC_SM, _OTHER_MEM, _OTHER_SM = range(7)
_TICK_ROLES = (_PROC_MEM, _PROC_SM, _OTHER_MEM, _OTHER_SM)


class _Series:
    """One series the summary reads: its running figures."""

    __slots__ = (
        "by_mask",
        "first",
        "first_mono",
        "gpu",
        "idx",
        "labels",
        "last",
        "last_mono",
        "last_seq",
        "n",
        "name",
        "peak",
        "role",
        "start_t",
        "start_v",
        "total",
        "window_max",
    )

    def __init__(self, idx: int, name: str, labels: dict[str, str], role: int) -> None:
        self.idx = idx
        self.name = name
        self.labels = labels
        self.role = role
        self.gpu: str | None = labels.get("gpu") if name.startswith(("gpu_", "tpu_")) else None
        self.n = 0
        self.last_seq = -1
        self.first = self.last = self.peak = math.nan
        self.total = 0.0
        self.first_mono: float | None = None
        self.last_mono: float | None = None
        self.start_t: float | None = None  # the open window of a CPU counter ...
        self.start_v = 0.0  # ... its value there; for clock events, the last mask
        self.window_max: float | None = None
        self.by_mask: dict[float, float] = {}  # clock-event mask -> seconds it held


class _Proc:
    """One process's steps."""

    __slots__ = (
        "count", "diff_sum", "first", "have_samples", "have_tokens", "last", "samples", "tokens",
    )  # fmt: skip

    def __init__(self, mono: float) -> None:
        self.count = 0
        self.first = self.last = mono
        self.diff_sum = 0.0
        self.samples = self.tokens = 0.0
        self.have_samples = self.have_tokens = False


class _GpuTick:
    """One GPU's per-process readings within one tick."""

    __slots__ = ("mem", "other_mem", "other_mem_idx", "other_sm", "other_sm_idx", "sm")

    def __init__(self) -> None:
        self.mem: list[float] = []
        self.sm: list[float] = []
        self.other_mem: float | None = None
        self.other_mem_idx = -1
        self.other_sm: float | None = None
        self.other_sm_idx = -1


class _Gpu:
    """One GPU's figures that span series: per-tick sums over its processes."""

    __slots__ = (
        "mem_ours", "mem_theirs", "mem_ticks", "proc_mem_peak", "series", "sm_ours", "sm_theirs",
        "sm_ticks",
    )  # fmt: skip

    def __init__(self) -> None:
        self.series: list[_Series] = []
        self.proc_mem_peak: float | None = None
        self.mem_ours = self.mem_theirs = self.sm_ours = self.sm_theirs = 0.0
        self.mem_ticks = self.sm_ticks = 0


class SeriesFigures(NamedTuple):
    """One series over the run: its number of samples, first, last and highest value, mean; for
    clock-event reasons, the seconds each mask held (from its tick to the next)."""

    name: str
    labels: dict[str, str]
    samples: int
    first: float
    last: float
    peak: float
    mean: float
    seconds_by_mask: dict[float, float]


class GpuFigures(NamedTuple):
    """One GPU's series (in store order, those with samples) and its per-process figures:
    the highest per-tick sum of its processes' memory, and the run's share inputs in the shape
    ``summary._gpu_share`` reads (``{0: total}`` dicts)."""

    series: list[SeriesFigures]
    process_memory_peak_bytes: float | None
    process_sm: dict[int, float]
    process_memory: dict[int, float]
    other: dict[str, dict[int, float]]


class StepFigures(NamedTuple):
    """Step count, step times and throughput inputs, before rounding."""

    steps: int
    processes: int
    durations: int
    mean: float | None
    p50: float | None
    p90: float | None
    p99: float | None
    max: float | None
    span: float
    samples_total: float | None
    tokens_total: float | None


class RunAggregates:
    """The summary's figures over one run, fed in store order (tick by tick, steps by process
    in time order). A sample of a series never registered raises ``IndexError``: the sampler
    then drops the aggregates and the summary is rebuilt from the store."""

    def __init__(self) -> None:
        self.ticks = 0
        self.series = 0
        self.phases = 0
        self.requests = 0
        self.writers: dict[int, tuple[float, dict[str, Any]]] = {}
        self.steps_unordered = False
        """A process's steps arrived out of time order: the step figures need the store."""
        self.complete = True
        """False once a series had two samples in one tick (the store keeps the last one):
        then only the store has the figures."""
        self._by_idx: list[_Series | None] = []
        self._known: set[int] = set()
        self._named: dict[str, list[_Series]] = {}
        self._gpus: dict[str, _Gpu] = {}
        self._tick_seq: int | None = None
        self._tick_gpus: dict[str, _GpuTick] = {}
        self._procs: dict[int, _Proc] = {}
        self._steps = 0
        self._exact: list[float] | None = []
        self._sketch: DDSketch | None = None
        self._n_diffs = 0
        self._max_diff = -math.inf

    # -- feeding --------------------------------------------------------------------------------
    def add_batch(
        self,
        *,
        series: Iterable[tuple[int, str, Any, Any]] = (),
        ticks: Sequence[tuple[int, float, float]] = (),
        samples: Iterable[tuple[Any, int, int, float]] = (),
        steps: Iterable[tuple[Any, ...]] = (),
        phases: int = 0,
        requests: int = 0,
        writers: Iterable[tuple[int, float, dict[str, Any]]] = (),
    ) -> None:
        """One batch as :meth:`Store.write_batch` stored it (same rows, same order)."""
        for idx, name, lb, _kind in series:
            self.add_series(idx, name, lb)
        self.ticks += len(ticks)
        if samples:
            self.add_samples(samples, {seq: mono for seq, mono, _ in ticks})
        self.add_writers(writers)
        self.add_steps(steps)
        self.phases += phases
        self.requests += requests

    def add_series(self, idx: int, name: str, labels: Mapping[str, str] | Any) -> None:
        """Register a series (``labels``: a mapping or ``readings.Labels`` pairs)."""
        if idx in self._known:
            return
        self._known.add(idx)
        self.series += 1
        if idx >= len(self._by_idx):
            self._by_idx.extend([None] * (idx + 1 - len(self._by_idx)))
        lb = dict(labels)
        role = _role(name, lb, first_cpu=name not in self._named)
        if role is None:
            return
        s = _Series(idx, name, lb, role)
        self._by_idx[idx] = s
        if s.gpu is not None:
            self._gpus.setdefault(s.gpu, _Gpu()).series.append(s)
        else:
            self._named.setdefault(name, []).append(s)

    def wanted(self) -> list[int]:
        """The series indexes whose samples matter (the rest can be left unread)."""
        return [s.idx for s in self._by_idx if s is not None]

    def add_samples(
        self, rows: Iterable[tuple[Any, int, int, float]], monos: Mapping[int, float]
    ) -> None:
        """``(run key, seq, series idx, value)`` rows of registered series, in tick order;
        ``monos``: seq → monotonic time of the ticks they belong to."""
        by_idx = self._by_idx
        for _, seq, idx, v in rows:
            s = by_idx[idx]  # every registered series has a slot: most rows stop here
            if s is None:
                continue
            if seq == s.last_seq:
                self.complete = False
                continue
            s.last_seq = seq
            if s.n:
                if v > s.peak:  # noqa: PLR1730 (per sample: cheaper than a call to max)
                    s.peak = v
            else:
                s.first = s.peak = v
            s.n += 1
            s.last = v
            s.total += v
            role = s.role
            if role == _PLAIN:
                continue
            if role == _CPU:
                self._cpu_point(s, v, monos.get(seq))
            elif role == _CLOCK:
                mono = monos.get(seq)
                if s.n > 1 and mono is not None and s.last_mono is not None:
                    s.by_mask[s.start_v] = s.by_mask.get(s.start_v, 0.0) + (mono - s.last_mono)
                s.last_mono, s.start_v = mono, v
            else:
                if seq != self._tick_seq:
                    self._end_tick()
                    self._tick_seq = seq
                t = self._tick_gpus.get(s.gpu or "")
                if t is None:
                    t = self._tick_gpus[s.gpu or ""] = _GpuTick()
                if role == _PROC_MEM:
                    t.mem.append(v)
                elif role == _PROC_SM:
                    t.sm.append(v)
                elif role == _OTHER_MEM:
                    if idx > t.other_mem_idx:
                        t.other_mem, t.other_mem_idx = v, idx
                elif idx > t.other_sm_idx:
                    t.other_sm, t.other_sm_idx = v, idx
        self._end_tick()

    def _cpu_point(self, s: _Series, v: float, mono: float | None) -> None:
        """Highest rate of a counter over consecutive windows of at least MIN_WINDOW_SECONDS
        (shorter windows would mostly show the kernel's 10 ms accounting granularity)."""
        if s.n == 1:
            s.start_t, s.start_v, s.first_mono = mono, v, mono
        elif mono is not None and s.start_t is not None and mono - s.start_t >= MIN_WINDOW_SECONDS:
            r = (v - s.start_v) / (mono - s.start_t)
            if s.window_max is None or r > s.window_max:
                s.window_max = r
            s.start_t, s.start_v = mono, v
        s.last_mono = mono

    def _end_tick(self) -> None:
        if not self._tick_gpus:
            return
        for uuid, t in self._tick_gpus.items():
            g = self._gpus[uuid]
            if t.mem:
                m = math.fsum(t.mem)
                g.mem_ticks += 1
                if g.proc_mem_peak is None or m > g.proc_mem_peak:
                    g.proc_mem_peak = m
                g.mem_ours += m
                g.mem_theirs += t.other_mem if t.other_mem is not None else 0.0
            if t.sm:
                g.sm_ticks += 1
                g.sm_ours += math.fsum(t.sm)
                g.sm_theirs += t.other_sm if t.other_sm is not None else 0.0
        self._tick_gpus = {}
        self._tick_seq = None

    def add_writers(self, rows: Iterable[tuple[int, float, dict[str, Any]]]) -> None:
        """``(pid, monotonic start, metadata)``; a later row for a pid replaces it."""
        for pid, started, meta in rows:
            self.writers[pid] = (started, meta)

    def add_steps(self, rows: Iterable[Sequence[Any]]) -> None:
        """``(pid, mono, wall, samples, tokens[, flops])`` rows, each process's in time order."""
        procs = self._procs
        for r in rows:
            pid, mono, samples, tokens = r[0], r[1], r[3], r[4]
            p = procs.get(pid)
            if p is None:
                p = procs[pid] = _Proc(mono)
            else:
                d = mono - p.last
                if d < 0:
                    self.steps_unordered = True
                p.diff_sum += d
                p.last = mono
                self._duration(d)
            p.count += 1
            self._steps += 1
            if samples is not None:
                p.samples += samples
                p.have_samples = True
            if tokens is not None:
                p.tokens += tokens
                p.have_tokens = True

    def _duration(self, d: float) -> None:
        self._n_diffs += 1
        self._max_diff = max(self._max_diff, d)
        if self._exact is not None:
            self._exact.append(d)
            if len(self._exact) > STEP_TIMES_EXACT:
                self._sketch = _new_sketch()
                for x in self._exact:
                    self._sketch.add(x)
                self._exact = None
        else:
            assert self._sketch is not None
            self._sketch.add(d)

    # -- figures --------------------------------------------------------------------------------
    def _of(self, name: str) -> list[_Series]:
        return [s for s in self._named.get(name, ()) if s.n]

    def last(self, name: str) -> float | None:
        """The sum over the series of ``name`` of each one's last value."""
        if name not in self._named:
            return None
        return sum(s.last for s in self._of(name))

    def delta(self, name: str) -> float | None:
        """The sum over the series of ``name`` of last minus first."""
        if name not in self._named:
            return None
        return sum(s.last - s.first for s in self._of(name))

    def peak(self, name: str) -> float | None:
        """The highest value of the first series of ``name``."""
        first = self._named.get(name)
        if not first or not first[0].n:
            return None
        return first[0].peak

    def cpu_seconds(self) -> float | None:
        """The last value of the run's CPU counter: the cgroup's, else the tree's."""
        s = self._cpu()
        return s.last if s is not None and s.n else None

    def cpu_window_max(self) -> float | None:
        """The highest rate of :meth:`cpu_seconds`'s counter over windows of at least
        MIN_WINDOW_SECONDS; the whole run's when shorter than one window."""
        s = self._cpu()
        if s is None or s.n < 2:
            return None
        if s.window_max is not None:
            return s.window_max
        t0, t1 = s.first_mono, s.last_mono
        if t0 is not None and t1 is not None and t1 > t0:
            return (s.last - s.first) / (t1 - t0)
        return None

    def cpu_method(self) -> str | None:
        """Which counter :meth:`cpu_seconds` reads: ``"cgroup"`` (the run's own cgroup), the
        cgroup series' ``method`` label (``"systemd scope"``) or ``"process tree"``."""
        s = self._cpu()
        if s is None or not s.n:
            return None
        return s.labels.get("method", "cgroup") if s.name == CGROUP_CPU else "process tree"

    def _cpu(self) -> _Series | None:
        for name in (CGROUP_CPU, "tree_cpu_seconds_total"):
            for s in self._named.get(name, ()):
                if s.role == _CPU and s.n:
                    return s
        return None

    def gpu(self, uuid: str) -> GpuFigures | None:
        """One GPU's figures; None when it has no series the summary reads."""
        g = self._gpus.get(uuid)
        if g is None:
            return None
        series = [
            SeriesFigures(s.name, s.labels, s.n, s.first, s.last, s.peak, s.total / s.n, s.by_mask)
            for s in sorted(g.series, key=lambda x: x.idx)
            if s.n
        ]
        other: dict[str, dict[int, float]] = {}
        for f in series:
            if f.name == "gpu_other_processes":
                other[f.name] = {0: f.peak}  # a later series of the name replaces it
        if g.sm_ticks:
            other["gpu_other_processes_sm_utilization_ratio"] = {0: g.sm_theirs}
        if g.mem_ticks:
            other["gpu_other_processes_memory_used_bytes"] = {0: g.mem_theirs}
        return GpuFigures(
            series=series,
            process_memory_peak_bytes=g.proc_mem_peak,
            process_sm={0: g.sm_ours} if g.sm_ticks else {},
            process_memory={0: g.mem_ours} if g.mem_ticks else {},
            other=other,
        )

    def has_steps_sections(self) -> bool:
        """Whether the summary's phases, ranks or requests sections have anything to show
        (phases within steps, two ranks or more, served requests)."""
        ranks = {m["rank"] for _, m in self.writers.values() if isinstance(m.get("rank"), int)}
        return bool(self._steps and self.phases) or len(ranks) >= 2 or bool(self.requests)

    def step_figures(self) -> StepFigures | None:
        """Step count, step times and span; each process's first step timed from its
        ``track()`` start when known (and not after it). None without steps."""
        if not self._steps:
            return None
        firsts: list[float] = []
        total = 0.0
        first: float | None = None
        last_t: float | None = None
        samples = tokens = 0.0
        have_samples = have_tokens = False
        for pid in sorted(self._procs):
            p = self._procs[pid]
            start = self.writers.get(pid, (None, {}))[0]
            if start is not None and start <= p.first:
                firsts.append(p.first - start)
                total += p.first - start
                t0 = start
            else:
                t0 = p.first
            first = t0 if first is None or t0 < first else first
            last_t = p.last if last_t is None or p.last > last_t else last_t
            total += p.diff_sum
            if p.have_samples:
                samples += p.samples
                have_samples = True
            if p.have_tokens:
                tokens += p.tokens
                have_tokens = True
        assert first is not None
        n = self._n_diffs + len(firsts)
        quantiles: Sequence[float | None] = (None, None, None, None)
        if n:
            quantiles = self._quantiles(firsts)
        return StepFigures(
            steps=self._steps,
            processes=len(self._procs),
            durations=n,
            mean=total / n if n else None,
            p50=quantiles[0],
            p90=quantiles[1],
            p99=quantiles[2],
            max=quantiles[3],
            span=(last_t or first) - first,
            samples_total=samples if have_samples else None,
            tokens_total=tokens if have_tokens else None,
        )

    def _quantiles(self, extra: list[float]) -> Sequence[float | None]:
        """p50, p90, p99 and max of the durations plus ``extra``."""
        if self._exact is not None:
            d = sorted(self._exact + extra)
            return [percentile(d, 0.5), percentile(d, 0.9), percentile(d, 0.99), d[-1]]
        assert self._sketch is not None
        sk = _new_sketch()
        sk.merge(self._sketch)
        for x in extra:
            sk.add(x)
        top = max([self._max_diff, *extra])
        return [_sketch_percentile(sk, q) for q in (0.5, 0.9, 0.99)] + [top]


_ROLE_OF = {
    "gpu_clock_event_reasons": _CLOCK,
    "gpu_process_memory_used_bytes": _PROC_MEM,
    "gpu_process_sm_utilization_ratio": _PROC_SM,
    "gpu_other_processes_memory_used_bytes": _OTHER_MEM,
    "gpu_other_processes_sm_utilization_ratio": _OTHER_SM,
}


def _role(name: str, labels: Mapping[str, str], *, first_cpu: bool) -> int | None:
    if name in TREE_SERIES:
        return _CPU if name == "tree_cpu_seconds_total" and first_cpu else _PLAIN
    if name == CGROUP_CPU:
        return _CPU if first_cpu else _PLAIN
    if name in HOST_SUMS:
        return None if labels.get("interface") == "lo" else _PLAIN
    if name in GPU_SERIES and labels.get("gpu") is not None:
        return _ROLE_OF.get(name, _PLAIN)
    return None


def _new_sketch() -> DDSketch:
    # only a run past 50,000 steps needs it: not in every `run`'s start-up (about 1.6 ms here)
    from ddsketch import DDSketch

    return DDSketch(relative_accuracy=STEP_TIME_RELATIVE_ACCURACY)


def _sketch_percentile(sk: DDSketch, q: float) -> float:
    """Linear interpolation between the sketch's values at the two ranks around ``q``, as
    :func:`percentile` does between exact values: each is within the relative accuracy of the
    exact value at its rank, so their blend is within it of the exact percentile."""
    n = int(sk.count)
    pos = (n - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, n - 1)
    a = _at_rank(sk, lo, n)
    if pos == lo:
        return a
    return a + (_at_rank(sk, hi, n) - a) * (pos - lo)


def _at_rank(sk: DDSketch, rank: int, n: int) -> float:
    value = sk.get_quantile_value(rank / (n - 1) if n > 1 else 0.0)
    return float(value) if value is not None else math.nan


def aggregates_from_store(store: Store, run: RunRow) -> RunAggregates:
    """The aggregates of a stored run, rebuilt from its samples, ticks and steps: one pass
    over the samples of the series the summary reads."""
    agg = RunAggregates()
    for s in store.series(run.key):
        agg.add_series(s.idx, s.name, s.labels)
    ticks = store.ticks(run.key)
    agg.ticks = len(ticks)
    monos = {seq: mono for seq, mono, _ in ticks}
    agg.add_samples(store.iter_points(run.key, agg.wanted()), monos)
    agg.add_writers((pid, t, meta) for pid, (t, meta) in store.writers(run.key).items())
    agg.add_steps((s.pid, s.mono, s.wall, s.samples, s.tokens) for s in store.steps(run.key))
    agg.phases, agg.requests = store.counts(run.key, ("phases", "requests"))
    return agg
