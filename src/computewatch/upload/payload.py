"""A stored run as the server receives it (:class:`~computewatch.upload.protocol.RunUpload`).

What goes: the run's identity and status, who ran it where, its project and tags, its command
line, the summary exactly as ``computewatch show --json`` prints it, the documents recorded
beside it (``Store.meta``), and every series downsampled to at most ``MAX_POINTS`` buckets of
``[t, min, mean, max]``, as the report downsamples (counters as per-second rates, so a burst
shows as a burst). Full resolution stays in the local store.

Secrets: the command goes through ``redact_argv``, tags and series labels through
``redact_mapping``, and every string of the summary and the documents through ``redact_text``
(a string whose key names a secret becomes ``***``), with the configured ``[privacy] redact``
names. What the store holds is redacted already; this makes sure again for what leaves the
machine.
"""

from __future__ import annotations

import getpass
import math
import os
import pwd
import socket
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, cast

from computewatch.accounting.engine import live_accounting
from computewatch.accounting.tally import StepTally
from computewatch.analysis.aggregates import RunAggregates
from computewatch.analysis.downsample import bucket_size, counter_rate
from computewatch.analysis.summary import current_summary, summary_of
from computewatch.analysis.summary_types import RunSummary
from computewatch.readings import Kind
from computewatch.redact import (
    MARKER,
    configured_names,
    is_secret_name,
    redact_argv,
    redact_mapping,
    redact_text,
)
from computewatch.store import RUNNING, RunRow, SeriesRow, Store
from computewatch.upload.protocol import (
    FEATURE_SERIES_BASE,
    MAX_MAGNITUDE,
    MAX_POINTS,
    IngestResult,
    RunStatus,
    RunUpload,
    SeriesUpload,
)

__all__ = [
    "LiveRun",
    "SeriesBuckets",
    "build_upload",
    "current_user",
    "downsample_series",
    "scrub",
]

_DIGITS = 6
"""Significant digits kept per uploaded value: a chart or a sum needs no more, and the
payload is about a third smaller than with all 17."""
_LARGEST = MAX_MAGNITUDE / 10
"""Values from this magnitude on are left out, as non-finite ones are: the protocol refuses
MAX_MAGNITUDE and beyond, which rounding to _DIGITS digits could reach from just below."""


def current_user() -> str:
    """The user running this process: ``getpass.getuser()`` (``LOGNAME``, ``USER``, ...), else
    the password database's name for our uid, else the uid itself."""
    try:
        return getpass.getuser()
    except (OSError, KeyError):
        pass
    try:  # getpass already tried the variables
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return str(os.getuid())


def scrub(value: Any, extra: tuple[str, ...], key: str = "") -> Any:
    """``value`` (a JSON document) with every string redacted: under a key that names a
    secret it becomes ``***``, else it goes through ``redact_text``. Numbers are never
    secrets and stay (``tokens_per_second`` is a figure)."""
    if isinstance(value, str):
        if key and is_secret_name(key, extra):
            return MARKER
        return redact_text(value, extra)
    if isinstance(value, Mapping):
        return {str(k): scrub(v, extra, str(k)) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [scrub(v, extra, key) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _num(v: float) -> float:
    return float(f"{v:.{_DIGITS}g}")


class _Bucket:
    """One series' points in one bucket: time of the bucket's first tick, min, sum, count, max."""

    __slots__ = ("_point", "count", "hi", "lo", "t", "total")

    def __init__(self, t: float, lo: float, total: float, count: int, hi: float) -> None:
        self.t, self.lo, self.total, self.count, self.hi = t, lo, total, count, hi
        self._point: list[float] | None = None

    def merge(self, other: _Bucket) -> None:
        self.lo = min(self.lo, other.lo)
        self.hi = max(self.hi, other.hi)
        self.total += other.total
        self.count += other.count
        self._point = None

    def move(self, t: float) -> None:
        """The bucket now starts at ``t`` (its buckets merged: ``SeriesBuckets._double``)."""
        self.t = t
        self._point = None

    def point(self) -> list[float]:
        """``[t, min, mean, max]`` as uploaded, written once for a bucket that no longer
        changes (a whole upload of a long run re-sends closed buckets as they were)."""
        p = self._point
        if p is None:
            p = [round(self.t, 3), _num(self.lo), _num(self.total / self.count), _num(self.hi)]
            self._point = p
        return list(p)


class SeriesBuckets:
    """A run's series in at most ``max_points`` buckets of ``k`` consecutive ticks, kept up to
    date by :meth:`update`, which reads only the ticks stored since the last call: the live
    uploader pays for a long run's new samples, not its whole history, at each upload.

    Buckets hold min, sum, count and max, so when the run outgrows ``max_points * k`` ticks,
    ``k`` doubles and pairs of buckets merge exactly. A fresh build for a run of ``n`` ticks
    starts at ``k = bucket_size(n, max_points)`` (``analysis.downsample``, as the report
    cuts its buckets). Counters become per-second rates between consecutive samples
    (``analysis.downsample.counter_rate``: a reset counts from zero) before bucketing."""

    def __init__(self, max_points: int = MAX_POINTS, k: int = 1) -> None:
        if max_points < 1 or k < 1:
            raise ValueError("max_points and k must be at least 1")
        self.max_points = max_points
        self.k = k
        self.ticks = 0
        """Ticks read so far (the next tick's position)."""
        self.last_seq: int | None = None
        self.series: dict[int, SeriesRow] = {}
        self._buckets: dict[int, dict[int, _Bucket]] = {}
        self._prev: dict[int, tuple[float, float]] = {}  # counter idx -> last (mono, value)
        self._first_wall: list[float] = []  # wall time of each bucket's first tick

    def update(self, store: Store, run: RunRow) -> None:
        """Read the ticks and samples stored since the last call."""
        for row in store.series(run.key):
            self.series.setdefault(row.idx, row)
        conn = store.conn  # incremental reads by tick: no Store method reads "since"
        after = -1 if self.last_seq is None else self.last_seq
        ticks = conn.execute(
            "SELECT seq, mono, wall FROM ticks WHERE run_key=? AND seq>? ORDER BY seq",
            (run.key, after),
        ).fetchall()
        if not ticks:
            return
        # A tick and its samples are written in one transaction: once the tick is seen, all
        # of its samples are.
        last = ticks[-1][0]
        base = self.ticks
        while math.ceil((base + len(ticks)) / self.k) > self.max_points:
            self._double()
        k = self.k
        pos = {seq: base + i for i, (seq, _, _) in enumerate(ticks)}
        mono = {seq: m for seq, m, _ in ticks}
        first_wall = self._first_wall
        for seq, _, wall in ticks:
            if pos[seq] % k == 0:
                first_wall.append(wall)
        self.ticks += len(ticks)
        self.last_seq = last
        counters = {i for i, s in self.series.items() if s.kind is Kind.COUNTER}
        buckets = self._buckets
        prev = self._prev
        pending: dict[int, list[float]] = {}  # this bucket's values by series, folded at its end
        current = -1

        def fold() -> None:
            t = first_wall[current]
            for sid, vals in pending.items():
                new = _Bucket(t, min(vals), math.fsum(vals), len(vals), max(vals))
                held = buckets.setdefault(sid, {})
                have = held.get(current)
                if have is None:
                    held[current] = new
                else:  # the bucket the last update left open
                    have.merge(new)
            pending.clear()

        rows = conn.execute(
            "SELECT seq, series, value FROM samples WHERE run_key=? AND seq>? AND seq<=? "
            "ORDER BY seq, series",
            (run.key, after, last),
        )
        for seq, sid, raw in rows:
            if raw is None or not math.isfinite(raw):
                continue
            value: float = raw
            if sid in counters:
                m = mono[seq]
                before = prev.get(sid)
                prev[sid] = (m, raw)
                rate = None if before is None else counter_rate(before[0], before[1], m, raw)
                if rate is None:
                    continue
                value = rate
            if not -_LARGEST < value < _LARGEST:
                continue
            b = pos[seq] // k
            if b != current:
                if current >= 0:
                    fold()
                current = b
            vals = pending.get(sid)
            if vals is None:
                pending[sid] = [value]
            else:
                vals.append(value)
        if current >= 0:
            fold()

    def _double(self) -> None:
        """Twice the ticks per bucket: buckets 2j and 2j+1 become bucket j."""
        self.k *= 2
        self._first_wall = self._first_wall[::2]
        for sid, old in self._buckets.items():
            merged: dict[int, _Bucket] = {}
            for b, bucket in sorted(old.items()):
                j = b // 2
                have = merged.get(j)
                if have is None:
                    bucket.move(self._first_wall[j])
                    merged[j] = bucket
                else:
                    have.merge(bucket)
            self._buckets[sid] = merged

    def marks(self) -> dict[int, int]:
        """Each series' last bucket now (by series index): where the points of an upload
        that continues this state start (that bucket may still fill)."""
        return {sid: max(held) for sid, held in self._buckets.items() if held}

    def uploads(
        self,
        interval_seconds: float,
        extra: tuple[str, ...] = (),
        since: Mapping[int, int] | None = None,
    ) -> list[SeriesUpload]:
        """The series as uploaded: those with at least one point, in the store's order. With
        ``since`` (:meth:`marks` of an earlier state at the same ``k``), each series' buckets
        from its mark on only, and a series without any left out."""
        width = float(self.k * interval_seconds) if self.k > 1 else 0.0
        out: list[SeriesUpload] = []
        for sid in sorted(self.series):
            held = self._buckets.get(sid)
            if not held:
                continue
            if since is not None and sid in since:
                start = since[sid]
                held = {b: bk for b, bk in held.items() if b >= start}
                if not held:
                    continue
            s = self.series[sid]
            out.append(
                {
                    "name": s.name,
                    "labels": redact_mapping(s.labels, extra),
                    "bucket_seconds": width,
                    "points": [bk.point() for _, bk in sorted(held.items())],
                    "kind": "rate" if s.kind is Kind.COUNTER else "gauge",
                }
            )
        return out


class LiveRun:
    """What the live uploader keeps of a running run between uploads: its series in buckets
    (:class:`SeriesBuckets`) and the summary's aggregates (``analysis.aggregates``, fed as the
    sampler feeds its own), both updated with what was stored since the last upload only, so
    a live upload of a long run costs its new samples, not its history."""

    def __init__(
        self,
        max_points: int = MAX_POINTS,
        *,
        total_steps: int | None = None,
        precision: str | None = None,
    ) -> None:
        self.series = SeriesBuckets(max_points)
        self.aggregates = RunAggregates()
        self.total_steps = total_steps
        """The run's planned steps (``run --total-steps``), for the FLOPs forecast; else the
        ones ``track(total_steps=)`` declared."""
        self.precision = precision
        """``run --precision`` (else the configured one), for the hardware-time estimate."""
        self._last_seq = -1
        self._last_step = 0  # rowid of the last step read
        self.steps = StepTally()
        """The run's steps as its live FLOPs and forecast read them."""
        self.appends = False
        """Whether the server stores uploads that continue an earlier one (it lists
        FEATURE_SERIES_BASE in its answers)."""
        self._acked: tuple[int, int, dict[int, int]] | None = None
        """(seq, k, marks) of the latest upload the server stored from this state."""
        self._sent: dict[int, tuple[int, dict[int, int]]] = {}
        """(k, marks) of each upload built and not answered yet, by seq."""

    def series_upload(
        self, seq: int, interval_seconds: float, extra: tuple[str, ...] = ()
    ) -> tuple[list[SeriesUpload], int | None]:
        """The series of upload ``seq`` and the seq they continue: only the points since the
        latest upload the server stored (``series_base``), when the server takes such uploads
        and the buckets have not been widened since; else all of them and None."""
        s = self.series
        self._sent[seq] = (s.k, s.marks())
        acked = self._acked
        if self.appends and acked is not None and acked[1] == s.k and acked[0] < seq:
            return s.uploads(interval_seconds, extra, since=acked[2]), acked[0]
        return s.uploads(interval_seconds, extra), None

    def answered(self, seq: int, result: IngestResult, features: Sequence[str]) -> None:
        """What the server said of upload ``seq``: the next upload continues it when it was
        stored; it carries the whole state when the server holds another one as the latest
        (or asked for the whole state)."""
        self.appends = FEATURE_SERIES_BASE in features
        sent = self._sent.pop(seq, None)
        for older in [q for q in self._sent if q < seq]:
            del self._sent[older]
        if result["stored"] and not result.get("needs_full") and sent is not None:
            self._acked = (seq, *sent)
        else:
            self._acked = None

    def update(self, store: Store, run: RunRow) -> None:
        """Read what was stored since the last call."""
        self.series.update(store, run)
        agg = self.aggregates
        for s in store.series(run.key):
            agg.add_series(s.idx, s.name, s.labels)
        conn = store.conn  # incremental reads by tick and row: no Store method reads "since"
        ticks = conn.execute(
            "SELECT seq, mono FROM ticks WHERE run_key=? AND seq>? ORDER BY seq",
            (run.key, self._last_seq),
        ).fetchall()
        wanted = agg.wanted()
        if ticks:
            last = ticks[-1][0]
            agg.ticks += len(ticks)
            if wanted:
                marks = ",".join("?" * len(wanted))
                rows = conn.execute(
                    f"SELECT run_key, seq, series, value FROM samples WHERE run_key=? AND "
                    f"seq>? AND seq<=? AND series IN ({marks}) ORDER BY seq, series",
                    (run.key, self._last_seq, last, *wanted),
                )
                agg.add_samples(rows, dict(ticks))
            self._last_seq = last
        steps = conn.execute(
            "SELECT rowid, pid, mono, wall, samples, tokens, flops FROM steps "
            "WHERE run_key=? AND rowid>? ORDER BY rowid",
            (run.key, self._last_step),
        ).fetchall()
        if steps:
            self._last_step = steps[-1][0]
            agg.add_steps([r[1:] for r in steps])
            for r in steps:
                self.steps.add(r[1], r[2], r[6])
        agg.add_writers((pid, t, meta) for pid, (t, meta) in store.writers(run.key).items())
        agg.phases, agg.requests = store.counts(run.key, ("phases", "requests"))

    def summary(self, store: Store, run: RunRow) -> RunSummary:
        """The summary ``show --json`` would print now, from the kept aggregates (those of a
        run whose store had two samples of a series in one tick are rebuilt from the store,
        as the sampler does)."""
        if not self.aggregates.complete or self.aggregates.steps_unordered:
            return current_summary(store, run)
        return summary_of(store, run, self.aggregates)


def downsample_series(
    store: Store, run: RunRow, max_points: int = MAX_POINTS, extra: tuple[str, ...] = ()
) -> list[SeriesUpload]:
    """Every series of a run in at most ``max_points`` buckets of consecutive ticks, each
    ``[t, min, mean, max]`` (``t``: the wall time of the bucket's first tick); a bucket
    without a point is left out; counters as per-second rates (:class:`SeriesBuckets`)."""
    bounds = store.tick_bounds(run.key)
    n = 0 if bounds is None else store.counts(run.key, ["ticks"])[0]
    acc = SeriesBuckets(max_points, bucket_size(max(n, 1), max_points))
    acc.update(store, run)
    return acc.uploads(run.interval_seconds, extra)


def _with_live_flops(
    store: Store, run: RunRow, summary: RunSummary, live: LiveRun | None
) -> RunSummary:
    """A running run's summary with its FLOPs so far and their forecast at completion
    (``accounting.engine.live_accounting``): what governance judges a running run by. A
    failure leaves them out with a note; the upload goes all the same."""
    out = summary.copy()
    try:
        sections = live_accounting(
            store,
            run,
            summary,
            precision=None if live is None else live.precision,
            total_steps=None if live is None else live.total_steps,
            tally=None if live is None else live.steps,
        )
    except Exception as e:  # the run's upload matters more than its live FLOPs
        out["notes"] = [*summary.get("notes", []), f"live FLOPs failed: {type(e).__name__}: {e}"]
        return out
    out["flops"] = sections["flops"]
    if "forecast" in sections:
        out["forecast"] = sections["forecast"]
    return out


def _host_of(run: RunRow) -> str:
    name = run.host.get("hostname")
    if isinstance(name, str) and name:
        return name
    return run.supervisor_host or socket.gethostname()


def build_upload(
    store: Store,
    run: RunRow,
    *,
    seq: int,
    project: str | None = None,
    max_points: int = MAX_POINTS,
    extra_names: Iterable[str] | None = None,
    user: str | None = None,
    live: LiveRun | None = None,
) -> RunUpload:
    """The run's whole current state as one upload, numbered ``seq``. ``project``: the
    configuration's ``[server] project``, used when the run has no ``project`` tag;
    ``extra_names``: more secret names (default: the configured ``[privacy] redact``);
    ``live``: what the live uploader keeps of the run across uploads (its series and the
    summary's aggregates, read since the last upload only), instead of reading it whole."""
    extra = tuple(configured_names() if extra_names is None else extra_names)
    tags = redact_mapping(run.tags, extra)
    base: int | None = None
    if live is not None and live.series.max_points == max_points:
        live.update(store, run)
        now = live.summary(store, run) if run.status == RUNNING else current_summary(store, run)
        series, base = live.series_upload(seq, run.interval_seconds, extra)
    else:
        now = current_summary(store, run)
        series = downsample_series(store, run, max_points, extra)
    if run.status == RUNNING:
        now = _with_live_flops(store, run, now, live)
    summary = scrub(dict(now), extra)
    summary["command"] = redact_argv(run.command, extra)
    summary["tags"] = tags
    tagged = tags.get("project")
    # The wall clock can step back during a run (NTP): its end is then stamped before its
    # start, which the server refuses (upload.schema). The run lasted at least no time.
    ended = None if run.ended_at is None else max(run.ended_at, run.started_at)
    upload: RunUpload = {
        "id": run.id,
        "seq": seq,
        "final": run.status != RUNNING,
        "name": redact_text(run.name, extra) if run.name is not None else None,
        "status": cast(RunStatus, run.status),  # the store writes store.RUNNING, COMPLETED...
        "exit_code": run.exit_code,
        "started_at": run.started_at,
        "ended_at": ended,
        "host": _host_of(run),
        "user": user if user is not None else current_user(),
        "project": tagged if tagged and tagged != MARKER else project,
        "tags": tags,
        "command": redact_argv(run.command, extra),
        "summary": cast(dict[str, Any], summary),
        "meta": cast(dict[str, Any], scrub(store.meta(run.key), extra)),
        "series": series,
    }
    if base is not None:
        upload["series_base"] = base
    return upload
