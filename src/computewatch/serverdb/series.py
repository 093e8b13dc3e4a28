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

from sqlalchemy import Connection, Table, delete, func, insert, select
from sqlalchemy.orm import Session

from computewatch.serverdb.models import RunSeriesPart
from computewatch.upload.protocol import SeriesUpload

__all__ = [
    "COMPACT_AFTER",
    "append_series",
    "merge_parts",
    "read_series",
    "replace_series",
]

COMPACT_AFTER: Final = 32
"""Parts a run may hold before the next append merges them into one."""

_PARTS = cast(Table, RunSeriesPart.__table__)


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
    conn.execute(delete(_PARTS).where(_PARTS.c.run_id == run_id))
    if series:
        conn.execute(insert(_PARTS), [{"run_id": run_id, "seq": seq, "series": _rows(series)}])


def append_series(conn: Connection, run_id: str, seq: int, series: Sequence[SeriesUpload]) -> None:
    """A live upload's new points (``series_base``): one more part; past
    :data:`COMPACT_AFTER` parts, the run's parts are merged into one first."""
    if not series:
        return
    held = conn.execute(
        select(func.count()).select_from(_PARTS).where(_PARTS.c.run_id == run_id)
    ).scalar_one()
    if held >= COMPACT_AFTER:
        parts = conn.execute(
            select(_PARTS.c.series).where(_PARTS.c.run_id == run_id).order_by(_PARTS.c.id)
        ).scalars()
        merged = merge_parts([*parts, series])
        replace_series(conn, run_id, seq, merged)
        return
    conn.execute(insert(_PARTS), [{"run_id": run_id, "seq": seq, "series": _rows(series)}])


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
