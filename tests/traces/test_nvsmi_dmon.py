"""nvidia-smi's other logs and encodings: ``dmon`` and ``pmon`` (``-o DT``), read into the same
series as the CSV reader; UTF-16 (a PowerShell redirect) and UTF-8 with a BOM; values no GPU
can show and rows longer than the header are refused, naming the line and the column."""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable
from pathlib import Path

import pytest

from computewatch.traces import TraceError, read_nvidia_smi, read_trace


def _table(*rows: str) -> str:
    """dmon's layout: each field right-aligned in a column (the reader splits on spaces)."""
    out = []
    for row in rows:
        lead = "#" if row.startswith("#") else " "
        fields = row.lstrip("#").split(" ")
        if fields[-2:] == ["my", "job"]:  # a command name with a space in it
            fields[-2:] = ["my job"]
        out.append(lead + " ".join(f"{f:>6}" for f in fields))
    return "\n".join(out) + "\n"


DMON = _table(
    "#Date Time gpu pwr gtemp mtemp sm mem enc dec jpg ofa mclk pclk fb bar1",
    "#YYYYMMDD HH:MM:SS Idx W C C % % % % % % MHz MHz MB MB",
    "20240131 12:00:00 0 250 50 - 45 10 0 0 - - 2619 1980 1024 5",
    "20240131 12:00:00 1 60 40 - - 1 0 0 - - 2619 1410 512 5",
    "20240131 12:00:01 0 252 51 - 47 12 0 0 - - 2619 1980 1024 5",
    "#Date Time gpu pwr gtemp mtemp sm mem enc dec jpg ofa mclk pclk fb bar1",
    "#YYYYMMDD HH:MM:SS Idx W C C % % % % % % MHz MHz MB MB",
    "20240131 12:00:01 1 61 41 - 5 1 0 0 - - 2619 1410 512 5",
)

PMON = _table(
    "#Date Time gpu pid type sm mem enc dec jpg ofa fb command",
    "#YYYYMMDD HH:MM:SS Idx # C/G % % % % % % MB name",
    "20240131 12:00:00 0 1234 C 30 5 - - - - 1000 python",
    "20240131 12:00:00 0 5678 C 15 5 - - - - 200 python3",
    "20240131 12:00:00 1 - - - - - - - - - -",
    "20240131 12:00:01 0 1234 C 40 6 - - - - 1000 python",
    "20240131 12:00:01 1 9999 C - - - - - - 300 my job",
)


def v(values: Iterable[float]) -> list[float | None]:
    return [None if math.isnan(x) else x for x in values]


def utc(text: str) -> float:
    return dt.datetime.strptime(text, "%Y%m%d %H:%M:%S").replace(tzinfo=dt.UTC).timestamp()


def test_dmon_with_date_and_time(tmp_path: Path) -> None:
    p = tmp_path / "dmon.log"
    p.write_text(DMON)
    t = read_nvidia_smi(p, utc=True)
    assert t is not None and read_trace(p, utc=True).rows == t.rows == 4
    assert t.format == "nvidia-smi dmon"
    gpus = {g.key: g for g in t.jobs[0].gpus}
    assert set(gpus) == {"index:0", "index:1"}
    a, b = gpus["index:0"], gpus["index:1"]
    assert a.index == 0 and b.index == 1
    assert v(a.times) == [utc("20240131 12:00:00"), utc("20240131 12:00:01")]
    assert v(a.metrics["gpu_power_watts"]) == [250.0, 252.0]
    assert v(a.metrics["gpu_temperature_celsius"]) == [50.0, 51.0]
    assert v(a.metrics["gpu_utilization_ratio"]) == pytest.approx([0.45, 0.47])
    assert v(a.metrics["gpu_memory_utilization_ratio"]) == pytest.approx([0.10, 0.12])
    assert v(a.metrics["gpu_memory_clock_hertz"]) == [2619e6] * 2
    assert v(a.metrics["gpu_sm_clock_hertz"]) == [1980e6] * 2
    assert v(a.metrics["gpu_memory_used_bytes"]) == [1024 * 2**20] * 2
    assert v(b.metrics["gpu_utilization_ratio"]) == [None, pytest.approx(0.05)]
    assert any("mtemp" in n and "bar1" in n for n in t.notes)  # columns not read, said


def test_dmon_csv_format(tmp_path: Path) -> None:
    """``dmon --format csv`` writes the same columns, comma-separated."""
    p = tmp_path / "dmon.csv"
    lines = DMON.splitlines()
    csv = [("#" if ln.startswith("#") else "") + ", ".join(ln.lstrip("#").split()) for ln in lines]
    p.write_text("\n".join(csv) + "\n")
    t = read_trace(p, utc=True)
    g = {g.key: g for g in t.jobs[0].gpus}["index:0"]
    assert v(g.metrics["gpu_power_watts"]) == [250.0, 252.0]


def test_dmon_needs_its_time_columns(tmp_path: Path) -> None:
    p = tmp_path / "dmon.log"
    p.write_text(
        "# gpu   pwr  gtemp  mtemp     sm    mem\n# Idx     W      C      C      %      %\n"
        "    0    70     45      -      0      0\n"
    )
    with pytest.raises(TraceError, match=r"dmon\.log:1: .*no Date and Time columns.*-o DT"):
        read_nvidia_smi(p)


def test_pmon_sums_the_processes_of_each_gpu(tmp_path: Path) -> None:
    p = tmp_path / "pmon.log"
    p.write_text(PMON)
    t = read_trace(p, utc=True)
    assert t.format == "nvidia-smi pmon"
    gpus = {g.key: g for g in t.jobs[0].gpus}
    a, b = gpus["index:0"], gpus["index:1"]
    assert v(a.times) == [utc("20240131 12:00:00"), utc("20240131 12:00:01")]
    assert v(a.metrics["gpu_utilization_ratio"]) == pytest.approx([0.45, 0.40])
    assert v(a.metrics["gpu_memory_utilization_ratio"]) == pytest.approx([0.10, 0.06])
    assert v(a.metrics["gpu_memory_used_bytes"]) == [1200 * 2**20, 1000 * 2**20]
    assert v(b.metrics["gpu_utilization_ratio"]) == [0.0, None]  # idle; then not sampled
    assert v(b.metrics["gpu_memory_used_bytes"]) == [0.0, 300 * 2**20]
    assert any("3 processes" in n for n in t.notes)


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-be", "utf-8-sig"])
def test_utf16_and_bom(tmp_path: Path, encoding: str) -> None:
    text = (
        "timestamp, index, utilization.gpu [%], power.draw [W]\r\n"
        "2024/01/31 12:00:00.000, 0, 50 %, 100.00 W\r\n"
        "2024/01/31 12:00:01.000, 0, 60 %, 110.00 W\r\n"
    )
    p = tmp_path / "smi.csv"
    data = text.encode(encoding)
    if encoding == "utf-16-be":
        data = b"\xfe\xff" + data
    p.write_bytes(data)
    t = read_trace(p, utc=True)
    g = t.jobs[0].gpus[0]
    assert v(g.metrics["gpu_power_watts"]) == [100.0, 110.0]
    assert v(g.metrics["gpu_utilization_ratio"]) == pytest.approx([0.5, 0.6])


def test_utf16_dmon(tmp_path: Path) -> None:
    p = tmp_path / "dmon.log"
    p.write_bytes(DMON.replace("\n", "\r\n").encode("utf-16"))
    assert read_trace(p, utc=True).rows == 4


HEAD = "timestamp, index, utilization.gpu [%], memory.used [MiB], power.draw [W]\n"
OK = "2024/01/31 12:00:00.000, 0, 50 %, 100 MiB, 100.00 W\n"


@pytest.mark.parametrize(
    ("row", "pattern"),
    [
        ("2024/01/31 12:00:01.000, 0, 50 %, 100 MiB, -100.00 W", r"smi\.csv:3: column 5 "
         r"\('power\.draw \[W\]'\): -100\.00 W is not a plausible value \(0 to 2000 W\)"),
        ("2024/01/31 12:00:01.000, 0, 50 %, 100 MiB, 1e9 W", r"smi\.csv:3: column 5 .*1e9 W"),
        ("2024/01/31 12:00:01.000, 0, 150 %, 100 MiB, 100 W", r"smi\.csv:3: column 3 "
         r"\('utilization\.gpu \[%\]'\): 150 % is not a plausible value \(0 to 100 %\)"),
        ("2024/01/31 12:00:01.000, 0, 50 %, -5 MiB, 100 W", r"smi\.csv:3: column 4 "),
    ],
)  # fmt: skip
def test_implausible_values_are_refused(tmp_path: Path, row: str, pattern: str) -> None:
    p = tmp_path / "smi.csv"
    p.write_text(HEAD + OK + row + "\n")
    with pytest.raises(TraceError, match=pattern):
        read_nvidia_smi(p)


def test_a_row_longer_than_the_header_is_refused(tmp_path: Path) -> None:
    p = tmp_path / "smi.csv"
    p.write_text(HEAD + OK + "2024/01/31 12:00:01.000, 0, 50 %, 100 MiB, 100.00 W, 7\n")
    with pytest.raises(TraceError, match=r"smi\.csv:3: 6 fields where the header has 5"):
        read_nvidia_smi(p)


def test_dmon_implausible_value(tmp_path: Path) -> None:
    p = tmp_path / "dmon.log"
    p.write_text(DMON.replace("   252     51", " -1000     51"))
    with pytest.raises(TraceError, match=r"dmon\.log:5: column 4 \('pwr'\): -1000 .*0 to 2000 W"):
        read_nvidia_smi(p)
