"""The long CSV/Parquet format: job, timestamp, gpu, name and metric columns in SI units."""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from computewatch.traces import METRICS, TraceError, read_long_csv, read_long_parquet, read_trace

CSV = """job,timestamp,gpu,name,gpu_utilization_ratio,gpu_power_watts,gpu_memory_used_bytes
train,2024-01-31T12:00:00Z,0,NVIDIA A100-SXM4-80GB,0.9,300,1000
train,2024-01-31T12:00:00Z,1,NVIDIA A100-SXM4-80GB,0.8,290,1000
serve,1706702400,0,NVIDIA A100-SXM4-80GB,0.1,,500
train,2024-01-31T12:00:01Z,0,NVIDIA A100-SXM4-80GB,0.95,310,1000
train,2024-01-31T12:00:01Z,1,NVIDIA A100-SXM4-80GB,0.85,295,1000
serve,1706702401.5,0,NVIDIA A100-SXM4-80GB,0.2,80,500
"""


def v(values: Iterable[float]) -> list[float | None]:
    """A series as a list, None where the reader stored NaN (a value not given)."""
    return [None if math.isnan(x) else x for x in values]


def _check(t: object) -> None:
    jobs = {j.job: j for j in t.jobs}  # type: ignore[attr-defined]
    assert set(jobs) == {"train", "serve"}
    tr = jobs["train"]
    assert [g.key for g in tr.gpus] == ["index:0", "index:1"]
    assert v(tr.gpus[0].times) == [1706702400.0, 1706702401.0]
    assert v(tr.gpus[0].metrics["gpu_utilization_ratio"]) == [0.9, 0.95]
    assert tr.gpus[1].name == "NVIDIA A100-SXM4-80GB"
    sv = jobs["serve"].gpus[0]
    assert v(sv.times) == [1706702400.0, 1706702401.5]
    assert v(sv.metrics["gpu_power_watts"]) == [None, 80.0]


def test_long_csv(tmp_path: Path) -> None:
    p = tmp_path / "long.csv"
    p.write_text(CSV)
    _check(read_long_csv(p))
    assert read_trace(p).format == "csv"  # guessed from the 'gpu' column


def test_long_parquet(tmp_path: Path) -> None:
    src = tmp_path / "long.csv"
    src.write_text(CSV)
    import pyarrow.csv as pacsv

    table = pacsv.read_csv(src)
    table = table.set_column(
        1,
        "timestamp",
        pa.array(
            [1706702400.0, 1706702400.0, 1706702400.0, 1706702401.0, 1706702401.0, 1706702401.5]
        ),
    )
    p = tmp_path / "long.parquet"
    pq.write_table(table, p)
    _check(read_long_parquet(p))
    assert read_trace(p).format == "parquet"


def test_metric_names_are_the_sampler_series() -> None:
    from computewatch.sources import gpu_common, nvidia

    text = Path(gpu_common.__file__).read_text() + Path(nvidia.__file__).read_text()
    for m in METRICS:
        if "pcie" not in m:
            assert f'"{m}"' in text, m


def test_unknown_column_is_an_error(tmp_path: Path) -> None:
    p = tmp_path / "bad.csv"
    p.write_text("timestamp,gpu,utilization_percent\n1,0,5\n")
    with pytest.raises(TraceError, match=r"bad.csv:1: unknown column 'utilization_percent'"):
        read_long_csv(p)


def test_nul_bytes_that_end_a_long_csv_are_ignored_and_said(tmp_path: Path) -> None:
    p = tmp_path / "long.csv"
    p.write_bytes(
        b"timestamp,gpu,gpu_power_watts\n1706702400,0,100\n1706702401,0,100\n" + bytes(99)
    )
    t = read_long_csv(p)
    assert t.rows == 2
    assert "the file ends in 99 NUL bytes (a log cut by a crash): ignored" in t.notes
