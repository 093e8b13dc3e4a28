"""Fuzzing the readers of GPU logs from other tools (nvidia-smi CSV, the long CSV and Parquet
formats) and the detector behind them: any input gives a trace (and a verdict) or the package's
own error, never a traceback. nvidia-smi logs without a device column (devices numbered by their
order in each poll) and logs cut while written (a last line without its end of line, NUL bytes
at the end) among them."""

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
from computewatch.traces import FORMATS, METRICS, NETWORK_METRICS, Trace, read_trace
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


@st.composite
def polled_logs(draw: st.DrawFn) -> tuple[bytes, int, int | None]:
    """An index-less ``--query-gpu`` log as nvidia-smi writes it (one row per device per poll,
    in device order, the same millisecond or a few apart), now and then with a device missing
    from a poll, a stall or a restart (the rows after it later), a job column; then, now and
    then, cut anywhere and ended by NUL bytes. Returns the bytes, the devices, and the polls
    each device has when the log is clean (else None)."""
    gpus = draw(st.integers(1, 9))
    every = draw(st.sampled_from([100, 1000, 5000]))
    step = draw(st.sampled_from([0, 1, 3]))
    polls = draw(st.integers(0, 12))
    jobs = draw(_rarely)
    clean = True
    lines = [("job, " if jobs else "") + "timestamp, power.draw [W], utilization.gpu [%]"]
    ms = 0
    for _ in range(polls):
        for g in range(gpus):
            if draw(_rarely) and draw(_rarely):
                clean = False
                if draw(st.booleans()):
                    continue  # a device missing from the poll
                ms += draw(st.integers(1, 20_000))  # a stall, or a restart
            s, m = divmod(ms + g * step, 1000)
            row = f"2024/01/31 12:{s // 60:02d}:{s % 60:02d}.{m:03d}, {100 + g} W, {g} %"
            lines.append(("a, " if jobs else "") + row)
        ms += every
    data = ("\n".join(lines) + "\n").encode()
    if draw(_rarely):
        data = data[: draw(st.integers(0, len(data)))]
        clean = False
    if draw(_rarely):
        data += bytes(draw(st.integers(1, 9000)))
    return data, gpus, polls if clean and polls else None


def _read(data: bytes, fmt: str | None, errors: tuple[type[BaseException], ...]) -> Trace | None:
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "trace.csv"
        p.write_bytes(data)
        try:
            trace = read_trace(p, fmt, columns=["timestamp", "index", "utilization.gpu"])
        except errors:
            return None
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
        return trace


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


@fuzz(100)
@given(
    data=st.binary(max_size=300),
    nuls=st.integers(0, 9000),
    fmt=st.sampled_from([None, "nvidia-smi"]),
)
def test_any_bytes_ended_by_nul_bytes(fz: ModuleType, data: bytes, nuls: int, fmt: Any) -> None:
    _read(data + bytes(nuls), fmt, fz.OWN_ERRORS)


@fuzz(150)
@given(log=polled_logs())
def test_index_less_logs(fz: ModuleType, log: tuple[bytes, int, int | None]) -> None:
    """Devices numbered by their order in each poll: never more than a poll has; a clean log
    gives every device every poll; a cut last line is said."""
    data, gpus, polls = log
    trace = _read(data, "nvidia-smi", fz.OWN_ERRORS)
    if trace is None:
        assert polls is None, "a clean log was refused"
        return
    for j in trace.jobs:
        assert len(j.gpus) <= gpus
        assert [g.index for g in j.gpus] == list(range(len(j.gpus)))
        if polls is not None:
            assert len(j.gpus) == gpus
            assert all(len(g.times) == polls for g in j.gpus)
    text = data.rstrip(b"\x00")
    if b"\n" in text and text.rsplit(b"\n", 1)[1].strip():
        assert any(n.startswith("the last line was cut") for n in trace.notes)
