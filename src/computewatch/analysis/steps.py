"""Inside the steps: where each step's time went (phases), how the ranks of a distributed run
compare, and what an inference run served (requests). Computed from the store alone.

Phases are attributed to steps as the channel defines them: a phase belongs to the step of the
same process whose end is the first at or after the phase's end, and is clipped to that step's
interval. Nesting is resolved like a profiler's *self time*: at each instant the time goes to
the innermost active phase (the one that started last), so self times never double count and,
with ``unaccounted``, add up to the step time. The fields are documented in docs/summary.md.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import math
import re
from collections.abc import Iterable, Sequence
from typing import Any, TypedDict

import msgspec

from computewatch.analysis.common import percentile
from computewatch.analysis.summary_types import (
    CostSection,
    Distribution,
    EnergySection,
    PhaseStats,
    PhaseTime,
    RankRow,
    RankStats,
    RequestStats,
)
from computewatch.records import Figure, figure
from computewatch.store import PhaseRow, RequestRow, RunRow, StepRow, Store

COMM_PHASE = "comm"
"""The phase name ``computewatch.torch.watch_collectives`` and ``watch_ddp`` record."""
COMM_WORDS = frozenset(
    {
        "comm", "comms", "communication", "collective", "collectives",
        "allreduce", "allgather", "reducescatter", "alltoall", "alltoallv",
        "broadcast", "bcast", "barrier", "sendrecv", "isend", "irecv", "p2p",
    }
)  # fmt: skip
"""Words of a phase name that make it collective communication: a word alone, or spelt
across separators (``all_gather``, ``all-reduce``, ``reduce_scatter``, ``all_to_all``; the
``torch.distributed`` function names)."""
COMM_PREFIXES = ("nccl", "rccl", "gloo")
"""A word beginning with one of these is communication too (``nccl:all_reduce``,
``ncclKernel_AllReduce_RING_LL_Sum_float``, ``gloo_allreduce``)."""
_WORD = re.compile(r"[a-z0-9]+")


@functools.lru_cache(maxsize=4096)
def is_comm_phase(name: str) -> bool:
    """Whether a phase named ``name`` is collective communication: the one rule the summary's
    ranks, the diagnosis and the traces share (docs/summary.md, "ranks"). The name is split
    into lower-case words at anything but a letter or digit; it is communication when a word,
    or two or three adjacent words run together, is in :data:`COMM_WORDS`, or a word starts
    with one of :data:`COMM_PREFIXES`. ``comm``, ``comm/allreduce``, ``allreduce``,
    ``all_gather``, ``nccl:all_reduce`` are; ``commit``, ``compute``, ``gather_batch`` are
    not."""
    words = _WORD.findall(name.lower())
    for i, w in enumerate(words):
        if w in COMM_WORDS or w.startswith(COMM_PREFIXES):
            return True
        if "".join(words[i : i + 2]) in COMM_WORDS or "".join(words[i : i + 3]) in COMM_WORDS:
            return True
    return False


NESTED_PARENT_SHARE = 0.5
"""A phase is reported ``within`` a parent when at least this share of its self time ran
inside that parent."""


class StepAnatomy(msgspec.Struct):
    """One timed step of one process: its interval and the phase time inside it."""

    pid: int
    start: float
    end: float
    union: dict[str, float] = msgspec.field(default_factory=dict)  # wall time each name was active
    self_time: dict[str, float] = msgspec.field(default_factory=dict)  # time it was the innermost
    # seconds by (name, parent)
    parents: dict[tuple[str, str], float] = msgspec.field(default_factory=dict)
    accel: dict[str, float] = msgspec.field(default_factory=dict)  # accelerator seconds by name
    covered: float = 0.0  # time inside any phase
    comm: float = 0.0  # time inside any communication phase (is_comm_phase), counted once

    @property
    def seconds(self) -> float:
        return self.end - self.start


class StepsSections(TypedDict):
    """The summary's sections computed here."""

    phases: PhaseStats | None
    ranks: RankStats | None
    requests: RequestStats | None


def steps_sections(store: Store, run: RunRow) -> StepsSections:
    """The ``phases``, ``ranks`` and ``requests`` sections of a run's summary (each null when
    the run recorded nothing for it)."""
    steps = store.steps(run.key)
    writers = store.writers(run.key)
    phases = store.phases(run.key) if steps else []
    anatomy, outside = step_anatomy(steps, phases, {p: t for p, (t, _) in writers.items()})
    return {
        "phases": phase_stats(anatomy, outside) if phases else None,
        "ranks": rank_stats(anatomy, steps, {p: m for p, (_, m) in writers.items()}),
        "requests": request_stats(store.requests(run.key)),
    }


# -- step anatomy ---------------------------------------------------------------------------


def step_anatomy(
    steps: Sequence[StepRow], phases: Sequence[PhaseRow], starts: dict[int, float]
) -> tuple[list[StepAnatomy], float]:
    """Every timed step (a process's first step is timed from its ``track()`` start, when
    known) with its phases; and the phase seconds that fell in no timed step."""
    by_pid: dict[int, list[StepRow]] = {}
    for s in steps:
        by_pid.setdefault(s.pid, []).append(s)
    ph_by_pid: dict[int, list[PhaseRow]] = {}
    for p in phases:
        ph_by_pid.setdefault(p.pid, []).append(p)
    out: list[StepAnatomy] = []
    outside = 0.0
    for pid in sorted(set(by_pid) | set(ph_by_pid)):
        rows = sorted(by_pid.get(pid, []), key=lambda s: s.mono)
        ends = [s.mono for s in rows]
        first = starts.get(pid)
        bounds: list[tuple[float, float] | None] = []
        for i, end in enumerate(ends):
            start = ends[i - 1] if i else first
            bounds.append((start, end) if start is not None and start <= end else None)
        members: list[list[PhaseRow]] = [[] for _ in ends]
        for p in ph_by_pid.get(pid, []):
            i = bisect.bisect_left(ends, p.end)
            if i == len(ends) or bounds[i] is None:
                outside += max(p.end - p.start, 0.0)
            else:
                members[i].append(p)
        for b, mine in zip(bounds, members, strict=True):
            if b is None:
                outside += sum(max(p.end - p.start, 0.0) for p in mine)
                continue
            out.append(_sweep(pid, b[0], b[1], mine))
    return out, outside


def _sweep(pid: int, start: float, end: float, phases: list[PhaseRow]) -> StepAnatomy:
    """Split one step's time among its phases (clipped to the step): at each instant the time
    is the innermost active phase's; for the nesting, the one that started last."""
    a = StepAnatomy(pid, start, end)
    ivs: list[tuple[float, float, str]] = []
    for p in phases:
        if p.accel_seconds is not None:
            a.accel[p.name] = a.accel.get(p.name, 0.0) + p.accel_seconds
        lo, hi = max(p.start, start), min(p.end, end)
        if hi > lo:
            ivs.append((lo, hi, p.name))
    if not ivs:
        return a
    ivs.sort(key=lambda iv: (iv[0], -iv[1]))  # same start: the longer (outer) one first
    union, own = a.union, a.self_time
    if all(ivs[i][0] >= ivs[i - 1][1] for i in range(1, len(ivs))):  # no overlap: the usual
        for lo, hi, name in ivs:
            union[name] = union.get(name, 0.0) + (hi - lo)
            own[name] = own.get(name, 0.0) + (hi - lo)
            a.covered += hi - lo
            if is_comm_phase(name):
                a.comm += hi - lo
        return a
    points = sorted({t for iv in ivs for t in iv[:2]})
    active: list[tuple[float, float, str]] = []
    nxt = 0
    for lo, hi in itertools.pairwise(points):
        while nxt < len(ivs) and ivs[nxt][0] <= lo:
            active.append(ivs[nxt])
            nxt += 1
        active = [iv for iv in active if iv[1] > lo]
        if not active:
            continue
        d = hi - lo
        a.covered += d
        if any(is_comm_phase(iv[2]) for iv in active):
            a.comm += d
        inner = active[-1][2]
        own[inner] = own.get(inner, 0.0) + d
        if len(active) == 1:
            union[inner] = union.get(inner, 0.0) + d
            continue
        outer = next((iv[2] for iv in reversed(active[:-1]) if iv[2] != inner), None)
        if outer is not None:
            a.parents[(inner, outer)] = a.parents.get((inner, outer), 0.0) + d
        for name in {iv[2] for iv in active}:
            union[name] = union.get(name, 0.0) + d
    return a


def _dist(values: list[float]) -> Distribution:
    """mean, p50 and p90 (linear interpolation, as the summary's step times)."""
    v = sorted(values)
    if not v:
        return {"mean": None, "p50": None, "p90": None}
    return {
        "mean": _r(sum(v) / len(v)),
        "p50": _r(percentile(v, 0.5)),
        "p90": _r(percentile(v, 0.9)),
    }


def _r(v: float | None, nd: int = 6) -> float | None:
    return None if v is None or math.isnan(v) else round(v, nd)


def phase_stats(anatomy: Sequence[StepAnatomy], outside: float = 0.0) -> PhaseStats:
    """Per phase name: inclusive and self seconds, self share of the step time, per-step
    distribution, accelerator seconds and the parent it ran within; plus the unaccounted time."""
    total = sum(a.seconds for a in anatomy)
    per_step: dict[str, list[float]] = {}
    selfs: dict[str, float] = {}
    accel: dict[str, float] = {}
    parents: dict[str, dict[str, float]] = {}
    covered = 0.0
    for a in anatomy:
        covered += a.covered
        for name, s in a.union.items():
            per_step.setdefault(name, []).append(s)
        for name, s in a.self_time.items():
            selfs[name] = selfs.get(name, 0.0) + s
        for name, s in a.accel.items():
            accel[name] = accel.get(name, 0.0) + s
        for (name, parent), s in a.parents.items():
            parents.setdefault(name, {})[parent] = parents.get(name, {}).get(parent, 0.0) + s
    names = sorted(per_step, key=lambda n: (-selfs.get(n, 0.0), n))
    by_name: dict[str, PhaseTime] = {}
    for n in names:
        own = selfs.get(n, 0.0)
        within = None
        if parents.get(n):
            parent, t = max(parents[n].items(), key=lambda kv: (kv[1], kv[0]))
            if own > 0 and t >= NESTED_PARENT_SHARE * own:
                within = parent
        by_name[n] = {
            "seconds": _r(sum(per_step[n])),
            "self_seconds": _r(own),
            "share": _r(own / total, 4) if total > 0 else None,
            "steps": len(per_step[n]),
            "per_step_seconds": _dist(per_step[n]),
            "accel_seconds": _r(accel[n]) if n in accel else None,
            "within": within,
        }
    for n in accel.keys() - by_name.keys():  # phases with accelerator time but no host interval
        by_name[n] = {
            "seconds": 0.0, "self_seconds": 0.0, "share": 0.0, "steps": 0,
            "per_step_seconds": _dist([]), "accel_seconds": _r(accel[n]), "within": None,
        }  # fmt: skip
    rest = max(total - covered, 0.0)
    return {
        "steps": len(anatomy),
        "step_seconds": _r(total),
        "by_name": by_name,
        "unaccounted": {
            "seconds": _r(rest),
            "share": _r(rest / total, 4) if total > 0 else None,
        },
        "outside_steps_seconds": _r(outside),
    }


# -- ranks ----------------------------------------------------------------------------------


def rank_stats(
    anatomy: Sequence[StepAnatomy], steps: Sequence[StepRow], metas: dict[int, dict[str, Any]]
) -> RankStats | None:
    """Per rank of a distributed run (writers whose metadata has a ``rank``; at least two
    ranks): step times, compute and ``comm`` time, the slowest rank and the load imbalance."""
    rank_of = {pid: m["rank"] for pid, m in metas.items() if isinstance(m.get("rank"), int)}
    if len(set(rank_of.values())) < 2:
        return None
    counts: dict[int, int] = {}
    for s in steps:
        if s.pid in rank_of:
            counts[rank_of[s.pid]] = counts.get(rank_of[s.pid], 0) + 1
    timed: dict[int, list[StepAnatomy]] = {}
    for a in anatomy:
        if a.pid in rank_of:
            timed.setdefault(rank_of[a.pid], []).append(a)
    rows: list[RankRow] = []
    comm_names = sorted(
        {n for a in anatomy if a.pid in rank_of for n in a.union if is_comm_phase(n)}
    )
    for rank in sorted(set(rank_of.values())):
        mine = timed.get(rank, [])
        step_s = sum(a.seconds for a in mine)
        comm = sum(a.comm for a in mine)
        compute = max(step_s - comm, 0.0)
        rows.append(
            {
                "rank": rank,
                "pids": sorted(p for p, r in rank_of.items() if r == rank),
                "steps": counts.get(rank, 0),
                "step_time_seconds": _dist([a.seconds for a in mine]),
                "step_seconds": _r(step_s),
                "compute_seconds": _r(compute),
                "compute_seconds_per_step": _r(compute / len(mine)) if mine else None,
                "comm_seconds": _r(comm),
                "comm_share": _r(comm / step_s, 4) if step_s > 0 else None,
            }
        )
    known = [(r, c) for r in rows if (c := r["compute_seconds_per_step"]) is not None]
    per_step = [c for _, c in known]
    slowest = max(known, key=lambda rc: rc[1], default=None)
    mean = sum(per_step) / len(per_step) if per_step else 0.0
    all_steps = sum(r["step_seconds"] or 0.0 for r in rows)
    all_comm = sum(r["comm_seconds"] or 0.0 for r in rows)
    world = [int(m["world_size"]) for m in metas.values() if m.get("world_size") is not None]
    return {
        "count": len(rows),
        "world_size": max(world) if world else None,
        "ranks": rows,
        "slowest_rank": slowest[0]["rank"] if slowest else None,
        "load_imbalance": _r(max(per_step) / mean - 1, 4) if mean > 0 else None,
        "comm_share": _r(all_comm / all_steps, 4) if all_steps > 0 else None,
        "comm_phases": comm_names,
    }


# -- requests -------------------------------------------------------------------------------


def request_stats(requests: Sequence[RequestRow]) -> RequestStats | None:
    """Served requests: count, errors, latency distribution, rates and tokens; by name when
    more than one kind was served."""
    if not requests:
        return None
    out = _requests_of(requests)
    names = sorted({r.name for r in requests})
    if len(names) > 1:
        out["by_name"] = {n: _requests_of([r for r in requests if r.name == n]) for n in names}
    return out


def _requests_of(requests: Sequence[RequestRow]) -> RequestStats:
    lat = sorted(max(r.end - r.start, 0.0) for r in requests)
    span = max(r.end for r in requests) - min(r.start for r in requests)
    t_in = _total(r.tokens_in for r in requests)
    t_out = _total(r.tokens_out for r in requests)
    n = len(requests)
    return {
        "count": n,
        "errors": sum(1 for r in requests if not r.ok),
        "latency_seconds": {
            "mean": _r(sum(lat) / n),
            "p50": _r(percentile(lat, 0.5)),
            "p90": _r(percentile(lat, 0.9)),
            "p99": _r(percentile(lat, 0.99)),
            "max": _r(lat[-1]),
        },
        "span_seconds": _r(span),
        "requests_per_second": _r(n / span, 4) if span > 0 else None,
        "concurrency_mean": _r(sum(lat) / span, 4) if span > 0 else None,
        "tokens_in_total": t_in,
        "tokens_out_total": t_out,
        "tokens_per_second": _r(t_out / span, 4) if t_out is not None and span > 0 else None,
    }


def _total(values: Iterable[float | None]) -> float | None:
    given = [v for v in values if v is not None]
    return float(sum(given)) if given else None


def request_accounting(
    requests: RequestStats, energy: EnergySection | None, cost: CostSection | None
) -> RequestStats:
    """``requests`` with energy and cost per request and per 1M tokens: the run's facility
    energy and total cost allocated evenly over its requests (and over their tokens in + out),
    each a figure with the parent's method and range."""
    n = int(requests.get("count") or 0)
    tokens = (requests.get("tokens_in_total") or 0.0) + (requests.get("tokens_out_total") or 0.0)

    def shares(fig: Figure | None, what: str) -> tuple[Figure | None, Figure | None]:
        if fig is None or fig["value"] is None:
            return None, None
        per_request = _per(fig, n, 1.0, f"the run's {what} over its {n} requests") if n else None
        per_tokens = (
            _per(fig, tokens, 1e6, f"the run's {what} over its {tokens:g} tokens (in + out)")
            if tokens > 0
            else None
        )
        return per_request, per_tokens

    e_req, e_tok = shares(energy["facility"] if energy else None, "facility energy")
    c_req, c_tok = shares(cost["total"] if cost else None, "total cost")
    out = requests.copy()
    out["energy_per_request"], out["energy_per_1m_tokens"] = e_req, e_tok
    out["cost_per_request"], out["cost_per_1m_tokens"] = c_req, c_tok
    return out


def _per(fig: Figure, count: float, scale: float, rule: str) -> Figure:
    """A figure divided among ``count`` units (times ``scale``), keeping method and range."""

    def part(v: float | None) -> float | None:
        return None if v is None else float(v) * scale / count

    return figure(
        part(fig["value"]),
        fig["unit"],
        fig["method"],
        low=part(fig["low"]),
        high=part(fig["high"]),
        assumptions=[f"allocated evenly: {rule}"],
        source=fig["source"],
    )
