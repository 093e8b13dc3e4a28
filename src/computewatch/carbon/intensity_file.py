"""A user's file of grid intensity over time: CSV or Parquet with columns ``time,g_per_kwh``.

``time`` is ISO 8601 (``2026-11-30T14:00:00Z``; no offset means UTC; Parquet may also store a
timestamp column), ``g_per_kwh`` gCO2e per kWh, non-negative. Each row holds from its time to
the next row's; the last row lasts as long as the most common gap (an hour for a single row).
A bad row is an :class:`~computewatch.carbon.records.IntensityError` naming the file and line.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import itertools
import math
from pathlib import Path

from computewatch.carbon.records import (
    FORECAST,
    IntensityError,
    IntensityPoint,
    IntensitySeries,
    parse_time,
    to_utc,
)

__all__ = ["MAX_ROWS", "parse_intensity_csv", "read_intensity_file"]

MAX_ROWS = 1_000_000  # a century of hourly values; refuse what cannot be a grid series
_DEFAULT_STEP = 3600


def read_intensity_file(path: str | Path) -> IntensitySeries:
    """The series in a ``.csv`` or ``.parquet`` file (by suffix; others are read as CSV)."""
    p = Path(path)
    try:
        if p.suffix.lower() in (".parquet", ".pq"):
            rows = _parquet_rows(p)
        else:
            raw = p.read_bytes()
            try:
                text = raw.decode("utf-8-sig")
            except UnicodeDecodeError:
                raise IntensityError(f"{p}: not a UTF-8 CSV file") from None
            return parse_intensity_csv(text, str(p))
    except FileNotFoundError:
        raise IntensityError(f"intensity file {p} does not exist") from None
    except IsADirectoryError:
        raise IntensityError(f"intensity file {p} is a directory") from None
    except PermissionError:
        raise IntensityError(f"cannot read intensity file {p}: permission denied") from None
    return _series(rows, str(p))


def parse_intensity_csv(text: str, name: str = "<csv>") -> IntensitySeries:
    """CSV text with a ``time,g_per_kwh`` header (other columns are ignored)."""
    reader = csv.reader(io.StringIO(text))
    try:
        header = next(reader)
    except StopIteration:
        raise IntensityError(f"{name}: empty file; expected a time,g_per_kwh header") from None
    except csv.Error as e:
        raise IntensityError(f"{name}, line 1: {e}") from None
    cols = [h.strip().lower() for h in header]
    if "time" not in cols or "g_per_kwh" not in cols:
        raise IntensityError(f"{name}, line 1: header must name columns time and g_per_kwh")
    ti, gi = cols.index("time"), cols.index("g_per_kwh")
    rows: list[tuple[int, dt.datetime, float]] = []
    try:
        for row in reader:
            line = reader.line_num
            if not row or all(not c.strip() for c in row):
                continue
            if len(rows) >= MAX_ROWS:
                raise IntensityError(f"{name}: more than {MAX_ROWS} rows")
            if max(ti, gi) >= len(row):
                raise IntensityError(f"{name}, line {line}: expected time and g_per_kwh")
            rows.append((line, _time(row[ti], name, line), _value(row[gi], name, line)))
    except csv.Error as e:
        raise IntensityError(f"{name}, line {reader.line_num}: {e}") from None
    return _series(rows, name)


def _time(text: str, name: str, line: int) -> dt.datetime:
    try:
        return parse_time(text)
    except (ValueError, OverflowError):
        raise IntensityError(
            f"{name}, line {line}: time {text.strip()[:40]!r} is not ISO 8601"
        ) from None


def _value(text: object, name: str, line: int) -> float:
    try:
        v = float(text)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise IntensityError(
            f"{name}, line {line}: g_per_kwh {str(text)[:40]!r} is not a number"
        ) from None
    if not math.isfinite(v) or v < 0 or v > 1e5:
        raise IntensityError(
            f"{name}, line {line}: g_per_kwh {v!r} must be a finite number from 0 to 100000"
        )
    return v


def _parquet_rows(p: Path) -> list[tuple[int, dt.datetime, float]]:
    try:  # pyarrow (the ``parquet`` extra) is heavy: loaded only for a Parquet file
        import pyarrow.parquet as pq
    except ImportError:
        raise IntensityError(
            f"{p}: reading Parquet needs pyarrow: pip install 'computewatch[parquet]'"
        ) from None
    try:
        table = pq.read_table(p)
    except (FileNotFoundError, IsADirectoryError, PermissionError):
        raise
    except Exception as e:  # pyarrow's own errors (ArrowInvalid ...) for a broken file
        raise IntensityError(f"{p}: not a readable Parquet file ({e})") from None
    names = [n.lower() for n in table.column_names]
    if "time" not in names or "g_per_kwh" not in names:
        raise IntensityError(f"{p}: Parquet columns must include time and g_per_kwh")
    if table.num_rows > MAX_ROWS:
        raise IntensityError(f"{p}: more than {MAX_ROWS} rows")
    times = table.column(names.index("time")).to_pylist()
    values = table.column(names.index("g_per_kwh")).to_pylist()
    rows = []
    for i, (t, v) in enumerate(zip(times, values, strict=True), start=1):
        if isinstance(t, dt.datetime):
            when = to_utc(t)
        elif isinstance(t, str):
            when = _time(t, str(p), i)
        else:
            raise IntensityError(f"{p}, row {i}: time {t!r} is not a timestamp or ISO 8601 text")
        rows.append((i, when, _value(v, str(p), i)))
    return rows


def _series(rows: list[tuple[int, dt.datetime, float]], name: str) -> IntensitySeries:
    if not rows:
        raise IntensityError(f"{name}: no rows of intensity")
    rows.sort(key=lambda r: r[1])
    for a, b in itertools.pairwise(rows):
        if a[1] == b[1]:
            when = b[1].isoformat()
            raise IntensityError(f"{name}, line {b[0]}: time {when} repeats line {a[0]}")
    gaps = [int((b[1] - a[1]).total_seconds()) for a, b in itertools.pairwise(rows)]
    step = max(set(gaps), key=gaps.count) if gaps else _DEFAULT_STEP
    provider = f"file:{name}"
    points = []
    for i, (_, t, g) in enumerate(rows):
        length = gaps[i] if i < len(gaps) else step
        points.append(IntensityPoint(t, g, provider, max(length, 1), FORECAST))
    note = f"user file {name}: {len(points)} values, every {step} s"
    return IntensitySeries(region="file", provider=provider, points=tuple(points), notes=(note,))
