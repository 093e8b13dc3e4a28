"""Export a run's samples: one row per sample and series, in CSV, JSON Lines or Parquet.

Columns: ``run_id``, ``time_unix_seconds``, ``elapsed_seconds``, ``metric`` (its name ends in
its unit), ``labels``, ``kind`` (gauge / counter), ``unit``, ``value`` (SI base unit; counters
cumulative) and ``rate_per_second`` (counters only: change since the previous sample).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Generator, Iterator
from typing import IO, Any

from computewatch import jsonout
from computewatch.readings import Kind, unit_of
from computewatch.store import RunRow, Store, StoreError

FORMATS = ("csv", "jsonl", "parquet", "chrome-trace")  # chrome-trace: analysis.chrome_trace
COLUMNS = (
    "run_id",
    "time_unix_seconds",
    "elapsed_seconds",
    "metric",
    "labels",
    "kind",
    "unit",
    "value",
    "rate_per_second",
)
_BATCH = 100_000


def iter_rows(store: Store, run: RunRow) -> Generator[tuple[Any, ...], None, None]:
    """Rows in tick order; ``labels`` is a dict."""
    if run.samples_deleted_at is not None:
        raise StoreError(
            f"the samples of run {run.id} were deleted by gc; only its summary remains"
        )
    ticks = {seq: (wall, mono) for seq, mono, wall in store.ticks(run.key)}
    first_mono = min((m for _, m in ticks.values()), default=0.0)
    meta = {
        s.idx: (s.name, s.labels, "counter" if s.kind == Kind.COUNTER else "gauge", unit_of(s.name))
        for s in store.series(run.key)
    }
    prev: dict[int, tuple[float, float]] = {}
    rid = run.id
    for seq, sid, value in store.iter_samples(run.key):
        wall, mono = ticks.get(seq, (None, None))
        if wall is None or mono is None:
            continue
        name, lbl, kind, unit = meta[sid]
        rate = None
        if kind == "counter":
            p = prev.get(sid)
            if p is not None and mono > p[0]:
                rate = (value - p[1]) / (mono - p[0])
            prev[sid] = (mono, value)
        yield (rid, wall, round(mono - first_mono, 6), name, lbl, kind, unit, value, rate)


class _LabelText:
    """Labels as compact JSON text, computed once per series (rows share their labels dict)."""

    def __init__(self) -> None:
        self._cache: dict[int, tuple[dict[str, str], str]] = {}

    def __call__(self, lbl: dict[str, str]) -> str:
        hit = self._cache.get(id(lbl))
        if hit is None or hit[0] is not lbl:
            hit = (lbl, json.dumps(lbl, sort_keys=True, separators=(",", ":")) if lbl else "")
            self._cache[id(lbl)] = hit
        return hit[1]


def write_csv(rows: Iterator[tuple[Any, ...]], out: IO[str]) -> int:
    w = csv.writer(out, lineterminator="\n")
    w.writerow(COLUMNS)
    n = 0
    text = _LabelText()
    for r in rows:
        w.writerow((*r[:4], text(r[4]), *r[5:8], "" if r[8] is None else r[8]))
        n += 1
    return n


def write_jsonl(rows: Iterator[tuple[Any, ...]], out: IO[str]) -> int:
    n = 0
    dumps = jsonout.dumps
    for r in rows:
        out.write(dumps(dict(zip(COLUMNS, r, strict=True)), separators=(",", ":")))
        out.write("\n")
        n += 1
    return n


def write_parquet(rows: Iterator[tuple[Any, ...]], out: IO[bytes]) -> int:
    """Parquet through pyarrow (the ``parquet`` extra); labels as a JSON string column."""
    try:  # the optional `parquet` extra, heavy: loaded only for --format parquet
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise StoreError(
            "parquet export needs pyarrow: pip install 'computewatch[parquet]'"
        ) from None
    schema = pa.schema(
        [
            ("run_id", pa.string()),
            ("time_unix_seconds", pa.float64()),
            ("elapsed_seconds", pa.float64()),
            ("metric", pa.string()),
            ("labels", pa.string()),
            ("kind", pa.string()),
            ("unit", pa.string()),
            ("value", pa.float64()),
            ("rate_per_second", pa.float64()),
        ]
    )
    n = 0
    with pq.ParquetWriter(out, schema) as writer:
        cols: list[list[Any]] = [[] for _ in COLUMNS]
        text = _LabelText()
        for r in rows:
            for i, v in enumerate(r):
                cols[i].append(v)
            cols[4][-1] = text(r[4])
            n += 1
            if len(cols[0]) >= _BATCH:
                writer.write_table(pa.Table.from_arrays(cols, schema=schema))
                cols = [[] for _ in COLUMNS]
        if cols[0] or n == 0:
            writer.write_table(pa.Table.from_arrays(cols, schema=schema))
    return n
