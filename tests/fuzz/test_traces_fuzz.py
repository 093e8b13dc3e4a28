"""Fuzzing the readers of GPU logs from other tools (nvidia-smi CSV, the long CSV and Parquet
formats) and the detector behind them: any input gives a trace (and a verdict) or the package's
own error, never a traceback."""

from __future__ import annotations

import io
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from computewatch.detect import DetectError, classify_trace
from computewatch.store import Store
from computewatch.traces import FORMATS, METRICS, NETWORK_METRICS, read_trace
from computewatch.traces.importer import import_trace
from computewatch.traces.nvsmi import FIELDS

BASE = settings.get_profile("computewatch-fuzz")  # tests/fuzz/conftest.py


def fuzz(n: int) -> settings:
    return settings(BASE, max_examples=n * BASE.max_examples)


_rarely = st.integers(0, 4).map(lambda n: n == 0)
_FIELD = st.sampled_from(
    ["timestamp", "index", "name", "uuid", "job", "pstate", *FIELDS, "bogus.field"]
)
_UNIT = st.sampled_from(["", " [%]", " [MiB]", " [W]", " [MHz]", " [KiB]", " []", " [", "°C"])
_VALUE = st.one_of(
    st.sampled_from(
        [
            "2024/01/31 12:00:00.000",
            "2024/01/31 12:00:01",
            "0",
            "1",
            "45 %",
            "45",
            "100 MiB",
            "250.5 W",
            "1410 MHz",
            "[N/A]",
            "[Not Supported]",
            "N/A",
            "",
            "nan",
            "inf",
            "-1",
            "1e400",
            "GPU-x",
            "2024-01-31T12:00:00Z",
            "1706702400",
            "é",
            "\x00",
            "[",
            "7 GB",
        ]
    ),
    st.text(max_size=12),
)


@st.composite
def nvsmi_logs(draw: st.DrawFn) -> str:
    cols = draw(st.lists(st.tuples(_FIELD, _UNIT), min_size=1, max_size=7))
    header = ", ".join(f + u for f, u in cols)
    rows = draw(st.lists(st.lists(_VALUE, min_size=0, max_size=len(cols) + 1), max_size=8))
    body = "\n".join(", ".join(r) for r in rows)
    return (header + "\n" if not draw(_rarely) else "") + body + "\n"


@st.composite
def long_csvs(draw: st.DrawFn) -> str:
    cols = draw(
        st.lists(
            st.sampled_from(
                ["job", "timestamp", "gpu", "name", *METRICS, *NETWORK_METRICS, "other"]
            ),
            min_size=1,
            max_size=6,
            unique=True,
        )
    )
    rows = draw(st.lists(st.lists(_VALUE, min_size=0, max_size=len(cols) + 1), max_size=8))
    out = io.StringIO()
    out.write(",".join(cols) + "\n")
    for r in rows:
        out.write(",".join('"' + v.replace('"', '""') + '"' if draw(_rarely) else v for v in r))
        out.write("\n")
    return out.getvalue()


def _read(data: bytes, fmt: str | None, errors: tuple[type[BaseException], ...]) -> None:
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "trace.csv"
        p.write_bytes(data)
        try:
            trace = read_trace(p, fmt, columns=["timestamp", "index", "utilization.gpu"])
        except errors:
            return
        for j in trace.jobs:
            for g in j.gpus:
                assert all(b >= a for a, b in zip(g.times, g.times[1:], strict=False))
                for vals in g.metrics.values():
                    assert len(vals) == len(g.times)
        try:
            classify_trace(trace)
        except DetectError:
            pass
        with Store.memory() as store:  # in memory: the fuzzers write no database file
            for r in import_trace(store, trace):
                assert store.run_by_key(r.key).status == "completed"


@fuzz(150)
@given(text=nvsmi_logs())
def test_structured_nvidia_smi_logs(fz: ModuleType, text: str) -> None:
    _read(text.encode(), "nvidia-smi", fz.OWN_ERRORS)


@fuzz(100)
@given(text=long_csvs())
def test_structured_long_csvs(fz: ModuleType, text: str) -> None:
    _read(text.encode(), "csv", fz.OWN_ERRORS)


@fuzz(100)
@given(data=st.binary(max_size=300), fmt=st.sampled_from([None, *FORMATS]))
def test_any_bytes(fz: ModuleType, data: bytes, fmt: Any) -> None:
    _read(data, fmt, fz.OWN_ERRORS)
