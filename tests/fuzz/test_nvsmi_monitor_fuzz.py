"""Fuzzing the readers of ``nvidia-smi dmon`` and ``pmon`` logs and of UTF-16 logs: any header,
units line, row and value (spaces or commas, ``-``, numbers no GPU shows, rows of any length,
headers again or changed) gives a trace that imports, or the package's own error naming the
file, never a traceback."""

from __future__ import annotations

import tempfile
from pathlib import Path
from types import ModuleType

from hypothesis import given, settings
from hypothesis import strategies as st

from computewatch.store import Store
from computewatch.traces import read_trace
from computewatch.traces.dmon import DMON_FIELDS, PMON_FIELDS
from computewatch.traces.importer import import_trace

BASE = settings.get_profile("computewatch-fuzz")  # tests/fuzz/conftest.py


def fuzz(n: int) -> settings:
    return settings(BASE, max_examples=n * BASE.max_examples)


_rarely = st.integers(0, 4).map(lambda n: n == 0)
_COLUMN = st.sampled_from(
    [*DMON_FIELDS, *PMON_FIELDS, "mtemp", "enc", "dec", "type", "pid", "command", "bogus"]
)
_VALUE = st.one_of(
    st.sampled_from(
        ["0", "1", "45", "100", "101", "-", "-1", "1e9", "nan", "inf", "2619", "python", "C",
         "20240131", "12:00:00", "12:00:01", "19700101", "25:61:00", "", "é", "#"]
    ),
    st.integers(-10, 3000).map(str),
    st.text(max_size=8),
)  # fmt: skip


_GOOD = st.one_of(st.integers(0, 100).map(str), st.just("-"))


@st.composite
def monitor_logs(draw: st.DrawFn) -> str:
    """Mostly well-formed logs (so that reading and importing are reached), with now and then a
    header without its time columns, a row of another length, a value of any kind, a header
    again or changed."""
    lead = ["Date", "Time", "gpu"]
    if draw(_rarely):
        lead = draw(st.sampled_from([["gpu"], ["Time", "gpu"], []]))
    read = st.sampled_from(sorted({*DMON_FIELDS, *PMON_FIELDS}))
    cols = [*lead, draw(read), *draw(st.lists(_COLUMN, min_size=0, max_size=5))]
    sep = ", " if draw(_rarely) else "  "
    lines = ["#" + sep.join(cols), "#" + sep.join("x" for _ in cols)]
    for k in range(draw(st.integers(0, 8) if draw(_rarely) else st.integers(1, 8))):
        if draw(_rarely):
            again = draw(st.lists(_COLUMN, max_size=4)) if draw(_rarely) else cols
            lines.append("#" + sep.join(again))
            continue
        width = len(cols) + (draw(st.integers(-1, 1)) if draw(_rarely) else 0)
        row = [draw(_VALUE if draw(_rarely) else _GOOD) for _ in range(max(width, 0))]
        if lead[:2] == ["Date", "Time"] and len(row) >= 3 and not draw(_rarely):
            row[0], row[1] = "20240131", f"12:00:{k:02d}"
            row[2] = draw(st.sampled_from(["0", "1"]))
        lines.append(sep.join(row))
    return "\n".join(lines) + "\n"


def _read(data: bytes, fz: ModuleType) -> None:
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "smi.log"
        p.write_bytes(data)
        try:
            trace = read_trace(p)
        except fz.OWN_ERRORS:
            return
        assert trace.format in ("nvidia-smi dmon", "nvidia-smi pmon", "nvidia-smi", "csv")
        for j in trace.jobs:
            for g in j.gpus:
                assert all(b >= a for a, b in zip(g.times, g.times[1:], strict=False))
                for vals in g.metrics.values():
                    assert len(vals) == len(g.times)
        with Store.memory() as store:
            for r in import_trace(store, trace):
                assert store.run_by_key(r.key).status == "completed"


@fuzz(150)
@given(text=monitor_logs())
def test_dmon_and_pmon_logs(fz: ModuleType, text: str) -> None:
    _read(text.encode(), fz)


@fuzz(60)
@given(text=monitor_logs(), encoding=st.sampled_from(["utf-16", "utf-16-le", "utf-8-sig"]))
def test_other_encodings(fz: ModuleType, text: str, encoding: str) -> None:
    data = text.encode(encoding, "surrogatepass")
    if encoding == "utf-16-le" and data:
        data = b"\xff\xfe" + data[: len(data) - len(data) % 2 - 1]  # cut in a character
    _read(data, fz)


@fuzz(60)
@given(data=st.binary(max_size=200))
def test_any_bytes_after_a_utf16_mark(fz: ModuleType, data: bytes) -> None:
    _read(b"\xff\xfe" + data, fz)
