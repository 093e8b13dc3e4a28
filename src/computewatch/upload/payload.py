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
import socket
from collections.abc import Iterable, Mapping
from typing import Any, cast

from computewatch.analysis.downsample import bucket_size, counter_rate
from computewatch.analysis.summary import current_summary
from computewatch.readings import Kind
from computewatch.redact import (
    MARKER,
    configured_names,
    is_secret_name,
    redact_argv,
    redact_mapping,
    redact_text,
)
from computewatch.store import RUNNING, RunRow, Store
from computewatch.upload.protocol import MAX_POINTS, RunUpload, SeriesUpload

__all__ = ["build_upload", "current_user", "downsample_series", "scrub"]

_DIGITS = 6
"""Significant digits kept per uploaded value: a chart or a sum needs no more, and the
payload is about a third smaller than with all 17."""


def current_user() -> str:
    """The user running this process: ``getpass.getuser()`` (``LOGNAME``, ``USER``, ...), else
    the password database's name for our uid, else the uid itself."""
    try:
        return getpass.getuser()
    except (OSError, KeyError):
        pass
    try:
        import pwd  # POSIX only; getpass already tried the variables

        return pwd.getpwuid(os.getuid()).pw_name
    except (ImportError, KeyError):
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


def downsample_series(
    store: Store, run: RunRow, max_points: int = MAX_POINTS, extra: tuple[str, ...] = ()
) -> list[SeriesUpload]:
    """Every series of a run in at most ``max_points`` buckets of consecutive ticks, each
    ``[t, min, mean, max]`` (``t``: the wall time of the bucket's first tick); a bucket
    without a point is left out. Counters become per-second rates between consecutive points
    (a reset counts from zero), before bucketing. One pass over the run's samples, in tick
    order: memory holds one bucket, not the run."""
    ticks = store.ticks(run.key)
    series = store.series(run.key)
    n = len(ticks)
    if n == 0 or not series:
        return []
    k = bucket_size(n, max_points)
    pos = {seq: i for i, (seq, _, _) in enumerate(ticks)}
    mono = [m for _, m, _ in ticks]
    wall = [w for _, _, w in ticks]
    counters = {s.idx for s in series if s.kind is Kind.COUNTER}
    points: dict[int, list[list[float]]] = {s.idx: [] for s in series}
    prev: dict[int, tuple[float, float]] = {}  # counter idx -> its last (mono, value)
    bucket: dict[int, list[float]] = {}
    current = -1

    def flush() -> None:
        t = round(wall[current * k], 3)
        for sid, vals in bucket.items():
            target = points.get(sid)
            if target is not None and vals:
                mean = math.fsum(vals) / len(vals)
                target.append([t, _num(min(vals)), _num(mean), _num(max(vals))])
        bucket.clear()

    for seq, sid, raw in store.iter_samples(run.key):
        p = pos.get(seq)
        if p is None or not math.isfinite(raw):
            continue
        b = p // k
        if b != current:
            if current >= 0:
                flush()
            current = b
        value = raw
        if sid in counters:
            last = prev.get(sid)
            prev[sid] = (mono[p], raw)
            rate = None if last is None else counter_rate(last[0], last[1], mono[p], raw)
            if rate is None:
                continue
            value = rate
        vals = bucket.get(sid)
        if vals is None:
            bucket[sid] = [value]
        else:
            vals.append(value)
    if current >= 0:
        flush()
    width = float(k * run.interval_seconds) if k > 1 else 0.0
    return [
        {
            "name": s.name,
            "labels": redact_mapping(s.labels, extra),
            "bucket_seconds": width,
            "points": points[s.idx],
            "kind": "rate" if s.kind is Kind.COUNTER else "gauge",
        }
        for s in series
        if points[s.idx]
    ]


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
) -> RunUpload:
    """The run's whole current state as one upload, numbered ``seq``. ``project``: the
    configuration's ``[server] project``, used when the run has no ``project`` tag;
    ``extra_names``: more secret names (default: the configured ``[privacy] redact``)."""
    extra = tuple(configured_names() if extra_names is None else extra_names)
    tags = redact_mapping(run.tags, extra)
    summary = scrub(dict(current_summary(store, run)), extra)
    summary["command"] = redact_argv(run.command, extra)
    summary["tags"] = tags
    tagged = tags.get("project")
    return {
        "id": run.id,
        "seq": seq,
        "final": run.status != RUNNING,
        "name": redact_text(run.name, extra) if run.name is not None else None,
        "status": run.status,
        "exit_code": run.exit_code,
        "started_at": run.started_at,
        "ended_at": run.ended_at,
        "host": _host_of(run),
        "user": user if user is not None else current_user(),
        "project": tagged if tagged and tagged != MARKER else project,
        "tags": tags,
        "command": redact_argv(run.command, extra),
        "summary": cast(dict[str, Any], summary),
        "meta": cast(dict[str, Any], scrub(store.meta(run.key), extra)),
        "series": downsample_series(store, run, max_points, extra),
    }
