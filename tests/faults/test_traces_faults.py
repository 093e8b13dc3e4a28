"""Fault cases for GPU logs from other tools: every malformed trace gets one clear line naming
the file and the line at fault, and a non-zero exit, from ``import`` and ``detect`` alike."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

HEAD = "timestamp, index, utilization.gpu [%], memory.used [MiB], power.draw [W]\n"
OK = "2024/01/31 12:00:0{s}.000, 0, 50 %, 100 MiB, 100.00 W\n"

CASES: dict[str, tuple[bytes, str]] = {
    "missing_timestamp": (
        b"index, utilization.gpu [%]\n0, 5 %\n",
        r"bad\.csv:1: no 'timestamp' column",
    ),
    "no_metric_column": (
        b"timestamp, index, pstate\n2024/01/31 12:00:00, 0, P0\n",
        r"bad\.csv:1: none",
    ),
    "unknown_unit_header": (
        b"timestamp, memory.used [KiB]\n2024/01/31 12:00:00, 5\n",
        r"bad\.csv:1: column 'memory.used \[KiB\]': unknown unit 'KiB'",
    ),
    "unknown_unit_value": (
        (HEAD + OK.format(s=0) + "2024/01/31 12:00:01.000, 0, 50 %, 100 GB, 100.00 W\n").encode(),
        r"bad\.csv:3: column 'memory.used \[MiB\]': unknown unit 'GB'",
    ),
    "gap": (
        (
            HEAD
            + "".join(OK.format(s=s) for s in range(8))
            + OK.replace("12:00", "18:00").format(s=0)
        ).encode(),
        r"bad\.csv:10: a gap of 21593 s",
    ),
    "time_backwards": (
        (HEAD + OK.format(s=5) + OK.format(s=6) + OK.format(s=2)).encode(),
        r"bad\.csv:4: time goes backwards for GPU index:0 \(after .*bad\.csv:3\)",
    ),
    "binary": (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", r"bad\.csv:3: binary data"),
    "not_utf8": (
        (HEAD + OK.format(s=0)).encode() + b"2024/01/31 12:00:01.000, 0, 5\xff %\n",
        r"bad\.csv:3: not UTF-8 text \(byte 0xff\)",
    ),
    "bad_number": (
        (HEAD + "2024/01/31 12:00:00.000, 0, lots, 1, 1\n").encode(),
        r"bad\.csv:2: column 'utilization.gpu \[%\]': 'lots' is not a number",
    ),
    "bad_time": ((HEAD + "yesterday, 0, 1, 1, 1\n").encode(), r"bad\.csv:2: timestamp 'yesterday'"),
    "short_row": ((HEAD + "2024/01/31 12:00:00.000, 0\n").encode(), r"bad\.csv:2: 2 fields"),
    "empty": (b"", r"bad\.csv: empty file"),
    "header_only": (HEAD.encode(), r"bad\.csv: no data rows"),
    "noheader": (b"2024/01/31 12:00:00.000, 0, 5\n", r"bad\.csv:1: no header line"),
    "negative_power": (
        (HEAD + OK.format(s=0) + "2024/01/31 12:00:01.000, 0, 50 %, 100 MiB, -100.00 W\n").encode(),
        r"bad\.csv:3: column 5 \('power\.draw \[W\]'\): -100\.00 W is not a plausible value",
    ),
    "gigawatt": (
        (HEAD + OK.format(s=0) + "2024/01/31 12:00:01.000, 0, 50 %, 100 MiB, 1e9 W\n").encode(),
        r"bad\.csv:3: column 5 .*1e9 W is not a plausible value \(0 to 2000 W\)",
    ),
    "over_100_percent": (
        (HEAD + OK.format(s=0) + "2024/01/31 12:00:01.000, 0, 150 %, 100 MiB, 1 W\n").encode(),
        r"bad\.csv:3: column 3 .*150 % is not a plausible value \(0 to 100 %\)",
    ),
    "long_row": (
        (HEAD + OK.format(s=0) + "2024/01/31 12:00:01.000, 0, 5 %, 1 MiB, 1 W, 9\n").encode(),
        r"bad\.csv:3: 6 fields where the header has 5",
    ),
    "dmon_without_time": (
        b"# gpu   pwr  gtemp     sm\n# Idx     W      C      %\n    0    70     45      0\n",
        r"bad\.csv:1: an nvidia-smi dmon log with no Date and Time columns.*-o DT",
    ),
    "dmon_bad_value": (
        b"#Date Time gpu pwr sm\n#YYYYMMDD HH:MM:SS Idx W %\n20240131 12:00:00 0 70 500\n",
        r"bad\.csv:3: column 5 \('sm'\): 500 is not a plausible value \(0 to 100 %\)",
    ),
    "dmon_short_row": (
        b"#Date Time gpu pwr sm\n#YYYYMMDD HH:MM:SS Idx W %\n20240131 12:00:00 0 70\n",
        r"bad\.csv:3: 4 fields where the header has 5",
    ),
    "pmon_bad_time": (
        b"#Date Time gpu pid type sm command\n20240131 25:00:00 0 1 C 5 python\n",
        r"bad\.csv:2: date and time '20240131' '25:00:00'",
    ),
    "missing_device_without_index": (
        (
            "timestamp, utilization.gpu [%]\n"
            + "".join(
                f"2024/01/31 12:00:0{s}.00{g}, 5 %\n"
                for s in range(10)
                for g in range(2)
                if (s, g) != (5, 1)
            )
        ).encode(),
        r"bad\.csv:12: no device column \(index, uuid, pci\.bus_id\) and a poll of 1 rows where "
        r"the others have 2.*--query-gpu=timestamp,index",
    ),
    "malformed_line_before_a_cut_one": (
        (HEAD + OK.format(s=0) + "2024/01/31 12:00:01.000, 0\n" + OK.format(s=2))
        .encode()
        .rstrip(b"\n")[:-4],
        r"bad\.csv:3: 2 fields where the header has 5",
    ),
    "utf16_with_nul": (
        "timestamp, index, power.draw [W]\n\x002024/01/31 12:00:00, 0, 5 W\n".encode("utf-16"),
        r"bad\.csv:2: binary data",
    ),
}


def _one_clear_line(r: Any, pattern: str) -> None:
    import re

    assert r.returncode != 0
    assert "Traceback" not in r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("computewatch: "), lines[0]
    assert re.search(pattern, lines[0]), lines[0]


@pytest.mark.parametrize("case", sorted(CASES))
def test_import_names_file_and_line(cw: Any, tmp_path: Path, case: str) -> None:
    data, pattern = CASES[case]
    p = tmp_path / "bad.csv"
    p.write_bytes(data)
    _one_clear_line(cw("import", p, "--format", "nvidia-smi"), pattern)


@pytest.mark.parametrize(
    "case",
    [
        "gap",
        "time_backwards",
        "not_utf8",
        "binary",
        "missing_timestamp",
        "missing_device_without_index",
    ],
)
def test_detect_names_file_and_line(cw: Any, tmp_path: Path, case: str) -> None:
    data, pattern = CASES[case]
    p = tmp_path / "bad.csv"
    p.write_bytes(data)
    _one_clear_line(cw("detect", p, "--format", "nvidia-smi"), pattern)


def test_long_csv_missing_gpu_column(cw: Any, tmp_path: Path) -> None:
    p = tmp_path / "bad.csv"
    p.write_text("job,timestamp,gpu_power_watts\na,1,5\n")
    _one_clear_line(cw("import", p, "--format", "csv"), r"bad\.csv:1: missing column 'gpu'")


def test_garbage_parquet(cw: Any, tmp_path: Path) -> None:
    p = tmp_path / "bad.parquet"
    p.write_bytes(b"PAR1" + b"\x00garbage" * 10)
    _one_clear_line(cw("import", p), r"bad\.parquet: not a Parquet file")


def test_the_same_log_twice_is_one_clear_line(cw: Any, tmp_path: Path) -> None:
    p = tmp_path / "smi.csv"
    p.write_bytes((HEAD + "".join(OK.format(s=s) for s in range(3))).encode())
    cw.ok("import", p)
    _one_clear_line(cw("import", p), r"smi\.csv: this log was imported already as run \w+")


def test_missing_file(cw: Any, tmp_path: Path) -> None:
    _one_clear_line(cw("import", tmp_path / "nope.csv"), r"nope\.csv: cannot read")


def test_detect_without_input_is_a_usage_error(cw: Any) -> None:
    r = cw("detect")
    assert r.returncode == 2 and "give telemetry files" in r.stderr
