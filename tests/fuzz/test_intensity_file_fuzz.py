"""Fuzzing the intensity file reader (``when --intensity-file``, ``[carbon] intensity_file``):
any CSV text or Parquet bytes give a valid series or the package's own error, nothing else."""

from __future__ import annotations

import datetime as dt
import math
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from computewatch.carbon.intensity_file import parse_intensity_csv, read_intensity_file
from computewatch.carbon.records import IntensitySeries
from computewatch.carbon.window import best_window
from computewatch.errors import ComputewatchError

BASE = settings.get_profile("computewatch-fuzz")  # tests/fuzz/conftest.py


def fuzz(n: int) -> settings:
    return settings(BASE, max_examples=n * BASE.max_examples)


def _valid(s: IntensitySeries) -> None:
    assert s.points
    times = [p.time for p in s.points]
    assert times == sorted(times) and len(set(times)) == len(times)
    for p in s.points:
        assert p.time.tzinfo is not None
        assert math.isfinite(p.g_per_kwh) and 0 <= p.g_per_kwh <= 1e5
        assert p.resolution_s >= 1


@fuzz(200)
@given(st.text(max_size=400))
def test_any_text(text: str) -> None:
    try:
        s = parse_intensity_csv(text)
    except ComputewatchError:
        return
    _valid(s)


_times = st.datetimes(
    min_value=dt.datetime(1970, 1, 2), max_value=dt.datetime(2200, 1, 1), timezones=st.just(dt.UTC)
)
_cells = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(-10, 10**9).map(str),
    st.text(max_size=8),
)


@fuzz(200)
@given(
    st.lists(
        st.tuples(st.one_of(_times.map(dt.datetime.isoformat), st.text(max_size=20)), _cells),
        max_size=30,
    ),
    st.sampled_from(["time,g_per_kwh", "g_per_kwh,time", "TIME,G_PER_KWH,extra"]),
)
def test_rows_of_every_shape(rows: list[tuple[str, str]], header: str) -> None:
    flip = header.startswith("g_per_kwh")
    body = "".join(
        f'"{b.replace(chr(34), "")}","{a.replace(chr(34), "")}"\n'
        if flip
        else f'"{a.replace(chr(34), "")}","{b.replace(chr(34), "")}"\n'
        for a, b in rows
    )
    try:
        s = parse_intensity_csv(header + "\n" + body)
    except ComputewatchError:
        return
    _valid(s)
    # and the planner takes whatever the reader accepts
    plan = best_window(s, 3600, s.points[0].time, 86400)
    assert plan.start >= s.points[0].time


@fuzz(50)
@given(st.binary(max_size=600))
def test_any_parquet_bytes(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "x.parquet"
        p.write_bytes(b"PAR1" + data + b"PAR1" if data[:1] == b"\x00" else data)
        try:
            s = read_intensity_file(p)
        except ComputewatchError:
            return
        _valid(s)
