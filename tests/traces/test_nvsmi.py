"""The nvidia-smi CSV reader on every variant nvidia-smi writes: header with units in it and in
the values, nounits, noheader with the columns given, any subset, N/A values, several GPUs."""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable
from pathlib import Path

import pytest

from computewatch.traces import TraceError, read_nvidia_smi, read_trace

HEADER = (
    "timestamp, index, name, uuid, utilization.gpu [%], utilization.memory [%], "
    "memory.used [MiB], memory.total [MiB], power.draw [W], temperature.gpu, "
    "clocks.current.sm [MHz], pstate"
)
ROWS_UNITS = [
    "2024/01/31 12:34:56.789, 0, NVIDIA H100 80GB HBM3, GPU-aaa, 45 %, 10 %, 1024 MiB, "
    "81559 MiB, 250.30 W, 50, 1980 MHz, P0",
    "2024/01/31 12:34:56.795, 1, NVIDIA H100 80GB HBM3, GPU-bbb, [N/A], 0 %, 512 MiB, "
    "81559 MiB, [Not Supported], 40, 1980 MHz, P0",
    "2024/01/31 12:34:57.789, 0, NVIDIA H100 80GB HBM3, GPU-aaa, 47 %, 12 %, 1024 MiB, "
    "81559 MiB, 252.30 W, 51, 1980 MHz, P0",
    "2024/01/31 12:34:57.795, 1, NVIDIA H100 80GB HBM3, GPU-bbb, 5 %, 1 %, 512 MiB, "
    "81559 MiB, 60.00 W, 41, 1410 MHz, P0",
]


def v(values: Iterable[float]) -> list[float | None]:
    """A series as a list, None where the reader stored NaN (a value not given)."""
    return [None if math.isnan(x) else x for x in values]


def _nounits(row: str) -> str:
    for u in (" %", " MiB", " W", " MHz"):
        row = row.replace(u, "")
    return row


def _epoch(text: str) -> float:
    return dt.datetime.strptime(text, "%Y/%m/%d %H:%M:%S.%f").replace(tzinfo=dt.UTC).timestamp()


def _check(trace_path: Path, **kw: object) -> None:
    t = read_nvidia_smi(trace_path, utc=True, **kw)  # type: ignore[arg-type]
    assert [j.job for j in t.jobs] == [trace_path.stem]
    gpus = {g.key: g for g in t.jobs[0].gpus}
    assert set(gpus) == {"GPU-aaa", "GPU-bbb"}
    a, b = gpus["GPU-aaa"], gpus["GPU-bbb"]
    assert a.index == 0 and a.name == "NVIDIA H100 80GB HBM3"
    assert v(a.times) == [_epoch("2024/01/31 12:34:56.789"), _epoch("2024/01/31 12:34:57.789")]
    assert v(a.metrics["gpu_utilization_ratio"]) == pytest.approx([0.45, 0.47])
    assert v(a.metrics["gpu_memory_utilization_ratio"]) == pytest.approx([0.10, 0.12])
    assert v(a.metrics["gpu_memory_used_bytes"]) == [1024 * 2**20] * 2
    assert v(a.metrics["gpu_memory_total_bytes"]) == [81559 * 2**20] * 2
    assert v(a.metrics["gpu_power_watts"]) == pytest.approx([250.3, 252.3])
    assert v(a.metrics["gpu_temperature_celsius"]) == [50.0, 51.0]
    assert v(a.metrics["gpu_sm_clock_hertz"]) == [1980e6, 1980e6]
    assert v(b.metrics["gpu_utilization_ratio"]) == [None, pytest.approx(0.05)]
    assert v(b.metrics["gpu_power_watts"]) == [None, 60.0]
    assert t.rows == 4
    assert any("pstate" in n for n in t.notes)
    assert any(n.startswith("gpu_power_watts: 1 of 4") for n in t.notes)


def test_header_with_units_in_values(tmp_path: Path) -> None:
    p = tmp_path / "smi.csv"
    p.write_text("\n".join([HEADER, *ROWS_UNITS]) + "\n")
    _check(p)


def test_nounits(tmp_path: Path) -> None:
    p = tmp_path / "smi.csv"
    p.write_text("\n".join([HEADER, *map(_nounits, ROWS_UNITS)]) + "\n")
    _check(p)


def test_noheader_needs_and_takes_the_columns(tmp_path: Path) -> None:
    p = tmp_path / "smi.csv"
    p.write_text("\n".join(map(_nounits, ROWS_UNITS)) + "\n")
    with pytest.raises(TraceError, match=r"smi.csv:1: no header line.*--columns"):
        read_nvidia_smi(p)
    cols = [c.split(" [")[0] for c in HEADER.split(", ")]
    _check(p, columns=cols)


def test_noheader_with_units_in_values(tmp_path: Path) -> None:
    p = tmp_path / "smi.csv"
    p.write_text("\n".join(ROWS_UNITS) + "\n")
    _check(p, columns=[c.split(" [")[0] for c in HEADER.split(", ")])


def test_a_subset_of_columns_without_index_is_one_gpu(tmp_path: Path) -> None:
    p = tmp_path / "subset.csv"
    p.write_text(
        "timestamp, utilization.gpu [%], power.draw [W]\n"
        "2024/01/31 12:00:00.000, 10 %, 100.00 W\n"
        "2024/01/31 12:00:01.000, 20 %, 200.00 W\n"
        "2024/01/31 12:00:02, 30 %, 300.00 W\n"
    )
    t = read_trace(p, utc=True)
    (g,) = t.jobs[0].gpus
    assert g.key == "index:0"
    assert set(g.metrics) == {"gpu_utilization_ratio", "gpu_power_watts"}
    assert v(g.metrics["gpu_power_watts"]) == [100.0, 200.0, 300.0]
    assert t.metrics == ["gpu_utilization_ratio", "gpu_power_watts"]


def test_memory_total_from_used_and_free(tmp_path: Path) -> None:
    p = tmp_path / "free.csv"
    p.write_text(
        "timestamp, memory.used [MiB], memory.free [MiB]\n"
        "2024/01/31 12:00:00.000, 100 MiB, 900 MiB\n"
        "2024/01/31 12:00:01.000, 200 MiB, 800 MiB\n"
    )
    (g,) = read_nvidia_smi(p).jobs[0].gpus
    assert v(g.metrics["gpu_memory_total_bytes"]) == [1000 * 2**20] * 2
    assert "memory_free_bytes" not in g.metrics


def test_job_column_and_repeated_header(tmp_path: Path) -> None:
    p = tmp_path / "jobs.csv"
    p.write_text(
        "job, timestamp, index, utilization.gpu [%]\n"
        "a, 2024/01/31 12:00:00.000, 0, 10 %\n"
        "b, 2024/01/31 12:00:00.000, 0, 90 %\n"
        "job, timestamp, index, utilization.gpu [%]\n"
        "a, 2024/01/31 12:00:01.000, 0, 11 %\n"
        "b, 2024/01/31 12:00:01.000, 0, 91 %\n"
    )
    t = read_nvidia_smi(p)
    assert [j.job for j in t.jobs] == ["a", "b"]
    assert v(t.jobs[1].gpus[0].metrics["gpu_utilization_ratio"]) == pytest.approx([0.9, 0.91])


def test_local_time_by_default(tmp_path: Path) -> None:
    p = tmp_path / "t.csv"
    p.write_text("timestamp, utilization.gpu [%]\n2024/01/31 12:00:00.500, 1 %\n")
    local = dt.datetime(2024, 1, 31, 12, 0, 0, 500000).timestamp()
    assert v(read_nvidia_smi(p).jobs[0].gpus[0].times) == [local]


def test_repeated_timestamps_are_dropped_and_said(tmp_path: Path) -> None:
    p = tmp_path / "t.csv"  # the same GPU twice at one time (without an index: two GPUs)
    p.write_text(
        "timestamp, index, utilization.gpu [%]\n2024/01/31 12:00:00, 0, 1 %\n"
        "2024/01/31 12:00:00, 0, 2 %\n2024/01/31 12:00:01, 0, 3 %\n"
    )
    t = read_nvidia_smi(p)
    assert v(t.jobs[0].gpus[0].metrics["gpu_utilization_ratio"]) == pytest.approx([0.01, 0.03])
    assert any("repeated" in n for n in t.notes)


def test_gaps_allowed_on_request(tmp_path: Path) -> None:
    p = tmp_path / "gap.csv"
    lines = ["timestamp, power.draw [W]"]
    lines += [f"2024/01/31 12:00:{s:02d}.000, 100 W" for s in range(10)]
    lines += ["2024/01/31 14:00:00.000, 100 W"]
    p.write_text("\n".join(lines) + "\n")
    with pytest.raises(TraceError, match=r"gap.csv:12: a gap of 7191 s"):
        read_nvidia_smi(p)
    t = read_nvidia_smi(p, allow_gaps=True)
    assert any("1 gaps" in n for n in t.notes)
