"""A run's series, stored as parts: one per upload that carried series.

A full upload replaces every part of its run with one part holding all of its series. A live
upload that names, in ``series_base``, the upload its points continue appends one part holding
only each series' points from its first new bucket on (the bucket the last upload left open
included): a long run's live uploads then cost their new points, not the run's history. Reading
merges the parts in order: a later part's series replaces an earlier one's points from its own
first point's time on. Once a run holds more than :data:`COMPACT_AFTER` parts, the ingest that
adds one merges them into one, so reading a run stays one short query and a bounded merge.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, cast

from sqlalchemy import Connection, Table, bindparam, delete, func, insert, select
from sqlalchemy.orm import Session

from computewatch.serverdb import prepared
from computewatch.serverdb.models import RunSeriesPart
from computewatch.upload.protocol import SeriesUpload

__all__ = [
    "COMPACT_AFTER",
    "append_series",
    "last_points",
    "merge_parts",
    "parts_held",
    "read_series",
    "replace_series",
]

COMPACT_AFTER: Final = 32
"""Parts a run may hold before the next append merges them into one."""

_PARTS = cast(Table, RunSeriesPart.__table__)
# made once with bound parameters (computewatch.serverdb.ingest says why)
_DELETE_PARTS = delete(_PARTS).where(_PARTS.c.run_id == bindparam("b_run_id"))
_INSERT_PART = insert(_PARTS)
_COUNT_PARTS = (
    select(func.count()).select_from(_PARTS).where(_PARTS.c.run_id == bindparam("b_run_id"))
)


def _key(s: Mapping[str, Any]) -> tuple[str, tuple[tuple[str, str], ...]]:
    labels = s.get("labels") or {}
    return str(s.get("name")), tuple(sorted((str(k), str(v)) for k, v in labels.items()))


def merge_parts(parts: Iterable[Sequence[Mapping[str, Any]]]) -> list[SeriesUpload]:
    """The series that ``parts`` (in the order they were stored) add up to, in the order each
    series first appeared: a later part's points replace the earlier ones from its first
    point's time on, and its ``bucket_seconds`` and ``kind`` stand."""
    merged: dict[tuple[str, tuple[tuple[str, str], ...]], SeriesUpload] = {}
    for part in parts:
        for s in part:
            key = _key(s)
            points = [list(p) for p in s.get("points") or []]
            have = merged.get(key)
            if have is None:
                new: SeriesUpload = {
                    "name": str(s.get("name")),
                    "labels": dict(s.get("labels") or {}),
                    "bucket_seconds": float(s.get("bucket_seconds") or 0.0),
                    "points": points,
                }
                if "kind" in s:
                    new["kind"] = s["kind"]
                merged[key] = new
                continue
            old = have["points"]
            if points:
                cut = bisect.bisect_left(old, points[0][0], key=lambda p: p[0])
                del old[cut:]
                old.extend(points)
            have["bucket_seconds"] = float(s.get("bucket_seconds") or 0.0)
            if "kind" in s:
                have["kind"] = s["kind"]
    return list(merged.values())


def _rows(series: Sequence[SeriesUpload]) -> list[dict[str, Any]]:
    """The series as a part stores them (the protocol's fields only)."""
    out: list[dict[str, Any]] = []
    for s in series:
        row: dict[str, Any] = {
            "name": s["name"],
            "labels": dict(s["labels"]),
            "bucket_seconds": s["bucket_seconds"],
            "points": s["points"],
        }
        if "kind" in s:
            row["kind"] = s["kind"]
        out.append(row)
    return out


def replace_series(conn: Connection, run_id: str, seq: int, series: Sequence[SeriesUpload]) -> None:
    """A full upload's series: every earlier part of the run goes, one part holds them all."""
    prepared.execute(conn, _DELETE_PARTS, {"b_run_id": run_id})
    if series:
        prepared.execute(
            conn, _INSERT_PART, {"run_id": run_id, "seq": seq, "series": _rows(series)}
        )


def parts_held(conn: Connection, run_id: str) -> int:
    """How many parts the run's series are in now."""
    return int(prepared.scalar(conn, _COUNT_PARTS, {"b_run_id": run_id}))


def append_series(
    conn: Connection,
    run_id: str,
    seq: int,
    series: Sequence[SeriesUpload],
    held: int | None = None,
) -> None:
    """A live upload's new points (``series_base``): one more part; past
    :data:`COMPACT_AFTER` parts (``held``: :func:`parts_held`, read here when not given), the
    run's parts are merged into one first."""
    if not series:
        return
    if held is None:
        held = parts_held(conn, run_id)
    if held >= COMPACT_AFTER:
        parts = conn.execute(
            select(_PARTS.c.series).where(_PARTS.c.run_id == run_id).order_by(_PARTS.c.id)
        ).scalars()
        merged = merge_parts([*parts, series])
        replace_series(conn, run_id, seq, merged)
        return
    prepared.execute(conn, _INSERT_PART, {"run_id": run_id, "seq": seq, "series": _rows(series)})


def read_series(session: Session, run_ids: Sequence[str]) -> dict[str, list[SeriesUpload]]:
    """Each of ``run_ids``' series, merged from its parts (a run without any: an empty list)."""
    out: dict[str, list[list[Mapping[str, Any]]]] = {r: [] for r in run_ids}
    if not run_ids:
        return {}
    q = (
        select(_PARTS.c.run_id, _PARTS.c.series)
        .where(_PARTS.c.run_id.in_(list(run_ids)))
        .order_by(_PARTS.c.run_id, _PARTS.c.id)
    )
    for run_id, series in session.execute(q):
        out[run_id].append(series)
    return {r: merge_parts(parts) for r, parts in out.items()}


def last_points(
    session: Session, run_ids: Sequence[str], names: Iterable[str]
) -> dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], list[float]]]:
    """Each run's last point of each series named in ``names``, by (name, sorted labels).
    A run's newest part answers for every series it holds (its points are the latest); the
    run's other parts are read, merged, only when it has several and its newest lacks one of
    ``names`` (a series without new points in the last upload, or a run without it)."""
    wanted = set(names)
    out: dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], list[float]]] = {}
    if not run_ids:
        return out
    counts = session.execute(
        select(_PARTS.c.run_id, func.count(), func.max(_PARTS.c.id))
        .where(_PARTS.c.run_id.in_(list(run_ids)))
        .group_by(_PARTS.c.run_id)
    ).all()
    several = {run_id for run_id, n, _ in counts if n > 1}
    newest = [last for _, _, last in counts]
    again: list[str] = []
    for start in range(0, len(newest), 500):
        q = select(_PARTS.c.run_id, _PARTS.c.series).where(
            _PARTS.c.id.in_(newest[start : start + 500])
        )
        for run_id, series in session.execute(q):
            found = {
                _key(x): list(x["points"][-1])
                for x in series
                if x.get("name") in wanted and x.get("points")
            }
            out[run_id] = found
            if run_id in several and not wanted <= {k[0] for k in found}:
                again.append(run_id)
    for run_id, series in read_series(session, again).items():
        out[run_id] = {
            _key(x): list(x["points"][-1]) for x in series if x["name"] in wanted and x["points"]
        }
    return out
