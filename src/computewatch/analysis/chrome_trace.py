"""``export --format chrome-trace``: every rank's steps and phases on one timeline.

The Chrome trace event format ("Trace Event Format", the JSON Perfetto and chrome://tracing
open), the way Horovod's timeline shows a distributed job: one track group (``pid``) per rank,
or per process when the run has no ranks, with two tracks (``tid``): its steps and its phases
(``data``, ``forward``, ``comm`` ...). Each step and phase is a complete event (``ph: "X"``)
with ``ts`` and ``dur`` in microseconds from the run's start; communication phases carry the
category ``comm``, so the overhead of collectives is visible side by side on every rank.

Times are each process's monotonic clock. Processes on other machines (multi-node runs) have
their own monotonic clocks: each is placed on the wall clock through its steps' (wall,
monotonic) pairs (the median offset), so ranks line up to within the machines' clock agreement
(NTP: typically a millisecond or better).
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping
from typing import IO, Any, Literal, NotRequired, TypedDict

from computewatch.analysis.steps import is_comm_phase
from computewatch.store import RunRow, Store

__all__ = ["ChromeTrace", "TraceEvent", "chrome_trace", "write_chrome_trace"]

STEPS_TID = 1
PHASES_TID = 2


class TraceEvent(TypedDict):
    name: str
    ph: Literal["X", "M", "B", "E", "i"]
    pid: int
    tid: int
    ts: float
    dur: NotRequired[float]
    cat: NotRequired[str]
    args: NotRequired[dict[str, Any]]


class ChromeTrace(TypedDict):
    traceEvents: list[TraceEvent]
    displayTimeUnit: str
    otherData: dict[str, Any]


def _offsets(store: Store, run: RunRow, pids: set[int]) -> tuple[dict[int, float], float]:
    """Per process, wall minus monotonic (from its steps, else the sampler's ticks); and the
    run's start on the wall clock."""
    by_pid: dict[int, list[float]] = {}
    for s in store.steps(run.key):
        by_pid.setdefault(s.pid, []).append(s.wall - s.mono)
    ticks = store.ticks(run.key)
    default = statistics.median([w - m for _, m, w in ticks]) if ticks else 0.0
    out = {pid: statistics.median(by_pid[pid]) if pid in by_pid else default for pid in pids}
    return out, run.started_at


def chrome_trace(store: Store, run: RunRow) -> ChromeTrace:
    """The run's timeline: a process-name event per rank or process, a complete event per step
    and per phase."""
    writers = store.writers(run.key)
    steps = store.steps(run.key)
    phases = store.phases(run.key)
    pids = set(writers) | {s.pid for s in steps} | {p.pid for p in phases}
    offsets, start_wall = _offsets(store, run, pids)

    def rank(pid: int) -> int | None:
        meta: Mapping[str, Any] = writers.get(pid, (0.0, {}))[1]
        r = meta.get("rank")
        return r if isinstance(r, int) and not isinstance(r, bool) else None

    ranks = {pid: rank(pid) for pid in pids}
    has_ranks = any(r is not None for r in ranks.values())
    track: dict[int, int] = {}
    for pid in sorted(pids, key=lambda p: (ranks[p] is None, ranks[p] or 0, p)):
        r = ranks[pid]
        track[pid] = r if (has_ranks and r is not None) else pid

    def us(pid: int, mono: float) -> float:
        return round((mono + offsets[pid] - start_wall) * 1e6, 3)

    events: list[TraceEvent] = []
    for i, pid in enumerate(sorted(pids, key=lambda p: track[p])):
        r = ranks[pid]
        label = f"rank {r} (pid {pid})" if r is not None else f"pid {pid}"
        t = track[pid]
        events.append({"name": "process_name", "ph": "M", "pid": t, "tid": 0, "ts": 0,
                       "args": {"name": label}})  # fmt: skip
        events.append({"name": "process_sort_index", "ph": "M", "pid": t, "tid": 0, "ts": 0,
                       "args": {"sort_index": i}})  # fmt: skip
        for tid, what in ((STEPS_TID, "steps"), (PHASES_TID, "phases")):
            events.append({"name": "thread_name", "ph": "M", "pid": t, "tid": tid, "ts": 0,
                           "args": {"name": what}})  # fmt: skip
    last: dict[int, float] = {pid: w[0] for pid, w in writers.items()}
    count: dict[int, int] = {}
    for s in steps:
        begin = last.get(s.pid)
        last[s.pid] = s.mono
        n = count[s.pid] = count.get(s.pid, 0) + 1
        if begin is None or s.mono < begin:
            continue  # the first step of a process without a start: no interval
        args: dict[str, Any] = {"step": n}
        for key, v in (("samples", s.samples), ("tokens", s.tokens), ("flops", s.flops)):
            if v is not None:
                args[key] = v
        events.append({"name": f"step {n}", "cat": "step", "ph": "X", "pid": track[s.pid],
                       "tid": STEPS_TID, "ts": us(s.pid, begin),
                       "dur": round((s.mono - begin) * 1e6, 3), "args": args})  # fmt: skip
    for p in phases:
        ev: TraceEvent = {
            "name": p.name,
            "cat": "comm" if is_comm_phase(p.name) else "phase",
            "ph": "X",
            "pid": track[p.pid],
            "tid": PHASES_TID,
            "ts": us(p.pid, p.start),
            "dur": round(max(p.end - p.start, 0.0) * 1e6, 3),
        }
        if p.accel_seconds is not None:
            ev["args"] = {"accelerator_seconds": p.accel_seconds}
        events.append(ev)
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {
            "run_id": run.id,
            "name": run.name or "",
            "started_at_unix_seconds": start_wall,
            "clock": "each process's monotonic clock, placed on the wall clock",
            "producer": "computewatch",
        },
    }


def write_chrome_trace(doc: ChromeTrace, out: IO[str]) -> int:
    """Write the trace as JSON; returns the number of events."""
    json.dump(doc, out, separators=(",", ":"))
    out.write("\n")
    return len(doc["traceEvents"])
