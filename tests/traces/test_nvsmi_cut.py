"""An nvidia-smi log cut while it was written (a crash, a copy taken while logging: a
redirected log is written in blocks, cut anywhere) or ended by NUL bytes (a filesystem that
had allocated the last block, a killed copy): the last line without its end of line and the
NUL tail are dropped, with a note; a malformed line anywhere else is still refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from computewatch.traces import TraceError, read_nvidia_smi, read_trace
from computewatch.traces._build import iter_lines

HEAD = "timestamp, index, utilization.gpu [%], power.draw [W]\n"


def _rows(n: int) -> str:
    return "".join(f"2024/01/31 12:00:{s:02d}.000, 0, {s} %, 100.00 W\n" for s in range(n))


CUT_NOTE = "the last line was cut (line 12, no end of line): dropped"


@pytest.mark.parametrize(
    "tail",
    [
        "2",
        "2024/01/31 12:00:1",
        "2024/01/31 12:00:10.000, 0, 5",  # a value cut: fewer fields
        "2024/01/31 12:00:10.000, 0, 10 %, 10",  # all fields, the last one cut: dropped too
        "2024/01/31 12:00:10.000, 0, 10 %, 100.00 W",  # whole but for its end of line
    ],
)
def test_a_last_line_without_its_end_of_line_is_dropped(tmp_path: Path, tail: str) -> None:
    p = tmp_path / "cut.csv"
    p.write_text(HEAD + _rows(10) + tail)
    t = read_nvidia_smi(p)
    (g,) = t.jobs[0].gpus
    assert len(g.times) == t.rows == 10
    assert list(g.metrics["gpu_power_watts"]) == [100.0] * 10
    assert CUT_NOTE in t.notes


def test_nul_bytes_that_end_the_file_are_ignored(tmp_path: Path) -> None:
    p = tmp_path / "nul.csv"
    p.write_bytes((HEAD + _rows(10)).encode() + b"\x00" * 3000)
    t = read_nvidia_smi(p)
    assert t.rows == 10
    assert "the file ends in 3000 NUL bytes (a log cut by a crash): ignored" in t.notes
    assert not any("cut (line" in n for n in t.notes)


def test_a_cut_line_then_nul_bytes(tmp_path: Path) -> None:
    p = tmp_path / "both.csv"
    p.write_bytes((HEAD + _rows(10) + "2024/01/31 12:0").encode() + b"\x00" * 70_000)
    t = read_trace(p)
    assert t.rows == 10
    assert CUT_NOTE in t.notes
    assert any("70000 NUL bytes" in n for n in t.notes)


def test_a_character_cut_with_the_last_line(tmp_path: Path) -> None:
    p = tmp_path / "utf8.csv"
    head = "timestamp, index, name, power.draw [W]\n"
    row = "2024/01/31 12:00:{:02d}.000, 0, GPU é, 100 W\n"
    data = (head + "".join(row.format(s) for s in range(10)) + row.format(10)).encode()
    p.write_bytes(data[: data.rindex("é".encode()) + 1])  # half of the é
    t = read_nvidia_smi(p)
    assert t.rows == 10 and CUT_NOTE in t.notes


def test_a_malformed_line_elsewhere_is_still_refused(tmp_path: Path) -> None:
    p = tmp_path / "bad.csv"
    later = _rows(10).splitlines(keepends=True)[5:]
    p.write_text(HEAD + _rows(5) + "2024/01/31 12:00:0\n" + "".join(later))
    with pytest.raises(TraceError, match=r"bad\.csv:7: 1 fields where the header has 4"):
        read_nvidia_smi(p)
    q = tmp_path / "last.csv"  # the last line, with its end of line: written whole, so refused
    q.write_text(HEAD + _rows(5) + "2024/01/31 12:00:0\n")
    with pytest.raises(TraceError, match=r"last\.csv:7: 1 fields"):
        read_nvidia_smi(q)


def test_nul_bytes_inside_are_still_binary(tmp_path: Path) -> None:
    p = tmp_path / "bin.csv"
    later = _rows(4).splitlines(keepends=True)[3]
    p.write_bytes((HEAD + _rows(3)).encode() + b"\x00" * 10 + later.encode())
    with pytest.raises(TraceError, match=r"bin\.csv:5: binary data"):
        read_nvidia_smi(p)


def test_only_nul_bytes(tmp_path: Path) -> None:
    p = tmp_path / "zeros.csv"
    p.write_bytes(b"\x00" * 8192)
    with pytest.raises(TraceError, match=r"zeros\.csv: no text, only 8192 NUL bytes"):
        read_trace(p)


def test_the_only_row_cut(tmp_path: Path) -> None:
    p = tmp_path / "one.csv"
    p.write_text(HEAD + "2024/01/31 12:00:00.000, 0, 5")
    with pytest.raises(TraceError, match=r"one\.csv: no data rows \(the only one, line 2, was cut"):
        read_nvidia_smi(p)


def test_a_cut_index_less_log_reads_its_polls(tmp_path: Path) -> None:
    """Both defects at once, as a crashed 2-GPU log without an index has them."""
    p = tmp_path / "crash.csv"
    rows = [
        f"2024/01/31 12:00:{q // 10:02d}.{(q % 10) * 100 + g:03d}, {10 * g + 5} %, 100 W"
        for q in range(50)
        for g in range(2)
    ]
    text = "timestamp, utilization.gpu [%], power.draw [W]\n" + "\n".join(rows) + "\n"
    p.write_bytes(text.encode()[:-9] + b"\x00" * 512)  # the last row cut, then NULs
    t = read_nvidia_smi(p)
    assert [len(g.times) for g in t.jobs[0].gpus] == [50, 49]
    assert any(n.startswith("the last line was cut (line 101") for n in t.notes)
    assert any(n.startswith("1 poll cut short") for n in t.notes)


def test_utf16_last_line_cut(tmp_path: Path) -> None:
    p = tmp_path / "ps.csv"
    p.write_bytes((HEAD + _rows(10) + "2024/01/31 12:00:10.000, 0").encode("utf-16"))
    t = read_nvidia_smi(p)
    assert t.rows == 10 and CUT_NOTE in t.notes


def test_dmon_last_line_cut(tmp_path: Path) -> None:
    p = tmp_path / "dmon.log"
    rows = "".join(f" 20240131 12:00:{s:02d}    0    70    45\n" for s in range(10))
    p.write_text("#Date Time gpu pwr sm\n#YYYYMMDD HH:MM:SS Idx W %\n" + rows + " 20240131 12:0")
    t = read_trace(p)
    assert t.rows == 10
    assert "the last line was cut (line 13, no end of line): dropped" in t.notes


def test_lines_say_where_the_file_was_cut(tmp_path: Path) -> None:
    p = tmp_path / "x.csv"
    p.write_bytes(b"a\nb\nc" + b"\x00" * 5)
    lines = iter_lines(p)
    assert list(lines) == [(1, "a"), (2, "b"), (3, "c")]
    assert (lines.cut, lines.nul_tail) == (3, 5)
    p.write_bytes(b"a\nb\n")
    lines = iter_lines(p)
    assert list(lines) == [(1, "a"), (2, "b")]
    assert (lines.cut, lines.nul_tail) == (0, 0)
