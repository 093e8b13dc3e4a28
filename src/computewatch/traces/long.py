"""Read the long CSV/Parquet trace format: one row per (job, time, GPU).

Columns: ``timestamp`` (Unix seconds, ISO 8601 or nvidia-smi's format; naive times are UTC
here), ``gpu`` (any identity: index, uuid), optional ``job`` and ``name`` (the GPU model), and
any subset of the metric columns of :data:`computewatch.traces.records.METRICS`, in SI units
(ratios 0-1, bytes, watts, degrees C, hertz, bytes per second), and the job's network traffic
when known (:data:`computewatch.traces.records.NETWORK_METRICS`). Any other column is an error:
a column whose unit is unknown would be read wrong.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterator, Sequence
from pathlib import Path

from computewatch.traces._build import Builder, check_value, cut_notes, iter_lines, parse_time
from computewatch.traces.records import METRICS, NETWORK_METRICS, Trace, TraceError

__all__ = ["read_long_csv", "read_long_parquet"]

_IDS = ("job", "timestamp", "gpu", "name")


def _columns(
    path: Path, header: Sequence[str], where: str
) -> tuple[dict[str, int], dict[str, int]]:
    ids: dict[str, int] = {}
    mets: dict[str, int] = {}
    for i, raw in enumerate(header):
        h = str(raw).strip()
        if h in _IDS:
            ids[h] = i
        elif h in METRICS or h in NETWORK_METRICS:
            mets[h] = i
        else:
            raise TraceError(
                f"{where}: unknown column {h[:60]!r}: the long format has job, timestamp, gpu, "
                f"name and the metric columns {', '.join([*METRICS, *NETWORK_METRICS])} (SI units)"
            )
    for need in ("timestamp", "gpu"):
        if need not in ids:
            raise TraceError(f"{where}: missing column {need!r} (see docs/import.md)")
    if not mets:
        raise TraceError(f"{where}: no metric column ({', '.join(METRICS)})")
    return ids, mets


def _number(text: object, col: str, where: str) -> float | None:
    if text is None:
        return None
    if isinstance(text, int | float) and not isinstance(text, bool):
        v = float(text)
        if math.isnan(v):
            return None
    else:
        s = str(text).strip()
        if s.lower() in ("", "n/a", "[n/a]", "nan", "[not supported]"):
            return None
        try:
            v = float(s)
        except ValueError:
            raise TraceError(f"{where}: column {col!r}: {s[:40]!r} is not a number") from None
    if not math.isfinite(v):
        raise TraceError(f"{where}: column {col!r}: {v} is not a finite number")
    check_value(col, v, where, f"column {col!r}", f"{v:g}")
    return v


def _fill(
    b: Builder,
    rows: Iterator[tuple[int, Sequence[object]]],
    ids: dict[str, int],
    mets: dict[str, int],
    path: Path,
    fmt: str,
    width: int,
    *,
    utc: bool,
) -> None:
    for line, r in rows:
        where = f"{path}: row {line}" if fmt == "parquet" else f"{path}:{line}"
        if len(r) != width:  # fewer, or more than the header names
            raise TraceError(f"{where}: {len(r)} fields where the header has {width}")
        tv = r[ids["timestamp"]]
        if tv is None:
            raise TraceError(f"{where}: no timestamp")
        if isinstance(tv, int | float) and not isinstance(tv, bool):
            t = parse_time(repr(float(tv)), utc=True, where=where)
        elif hasattr(tv, "timestamp"):  # a datetime from Parquet
            t = float(tv.timestamp())
        else:
            t = parse_time(str(tv), utc=utc, where=where)
        gpu = str(r[ids["gpu"]]).strip()
        if not gpu or gpu == "None":
            raise TraceError(f"{where}: no gpu")
        index = int(gpu) if gpu.isdigit() and len(gpu) < 6 else None
        job = str(r[ids["job"]]).strip() if "job" in ids and r[ids["job"]] is not None else ""
        name = str(r[ids["name"]]).strip() if "name" in ids and r[ids["name"]] else None
        values = {m: _number(r[i], m, where) for m, i in mets.items()}
        b.add(job, gpu if index is None else f"index:{index}", index, name, t, values, line, where)


def read_long_csv(
    path: str | Path, *, job: str | None = None, utc: bool = True, allow_gaps: bool = False
) -> Trace:
    """Read a long CSV trace (header line first). NUL bytes that end the file are ignored and
    noted; a last line without its end of line is read (other tools write this format)."""
    p = Path(path)
    lines = iter_lines(p)
    reader = csv.reader(t + "\n" for _, t in lines)
    try:
        header = next(reader, None)
        if not header or not any(h.strip() for h in header):
            raise TraceError(f"{p}: empty file")
        ids, mets = _columns(p, header, f"{p}:{reader.line_num}")
        b = Builder(p, "csv", list(mets))
        width = len(header)
        numbered = ((reader.line_num, r) for r in reader if any(x.strip() for x in r))
        _fill(b, numbered, ids, mets, p, "csv", width, utc=utc)
    except csv.Error as e:
        raise TraceError(f"{p}:{reader.line_num}: not CSV: {e}") from None
    trace = b.trace(job or p.stem, allow_gaps=allow_gaps)
    trace.notes.extend(cut_notes(lines, 0))
    return trace


def read_long_parquet(
    path: str | Path, *, job: str | None = None, utc: bool = True, allow_gaps: bool = False
) -> Trace:
    """Read a long Parquet trace (needs the ``parquet`` extra: pyarrow)."""
    p = Path(path)
    try:
        import pyarrow.parquet as pq  # optional extra, heavy: imported only to read Parquet
    except ImportError:
        raise TraceError(
            f"{p}: reading Parquet needs pyarrow: pip install 'computewatch[parquet]'"
        ) from None
    try:
        table = pq.read_table(p)
    except OSError as e:
        raise TraceError(f"{p}: cannot read: {e.strerror or 'not a readable file'}") from None
    except Exception as e:  # pyarrow raises its own ArrowInvalid & co. for a bad file
        raise TraceError(f"{p}: not a Parquet file ({type(e).__name__}: {str(e)[:120]})") from None
    names = table.column_names
    ids, mets = _columns(p, names, f"{p}: header")
    b = Builder(p, "parquet", list(mets))
    cols = [table.column(n).to_pylist() for n in names]
    width = len(names)
    rows = ((i + 1, [c[i] for c in cols]) for i in range(table.num_rows))
    _fill(b, rows, ids, mets, p, "parquet", width, utc=utc)
    return b.trace(job or p.stem, allow_gaps=allow_gaps)
