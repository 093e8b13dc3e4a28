"""``computewatch import`` and ``computewatch detect`` (child processes) on the nvidia-smi logs
the reader used to misread or refuse: an 8-GPU log without a device column (read as one GPU:
an eighth of the energy and of the compute ceiling), and a log cut while written (a last line
without its end of line, NUL bytes at the end: refused whole)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

HEADER = "timestamp, name, utilization.gpu [%], memory.used [MiB], power.draw [W]"


def _index_less(path: Path, seconds: int = 400, gpus: int = 8) -> Path:
    """``nvidia-smi --query-gpu=timestamp,name,utilization.gpu,memory.used,power.draw -l 1``
    on an 8-GPU node: eight rows a poll, a millisecond apart, GPU g at 100 + 10 g W."""
    lines = [HEADER]
    for s in range(seconds):
        t = f"2024/01/31 12:{s // 60:02d}:{s % 60:02d}"
        lines += [
            f"{t}.{100 + g:03d}, NVIDIA H100 80GB HBM3, 97 %, 70000 MiB, {100 + 10 * g}.00 W"
            for g in range(gpus)
        ]
    path.write_text("\n".join(lines) + "\n")
    return path


def _cut(path: Path) -> Path:
    """A 2-GPU log with an index, cut in its last line, then NUL bytes (a crash)."""
    lines = ["timestamp, index, name, utilization.gpu [%], power.draw [W]"]
    for s in range(300):
        t = f"2024/01/31 12:{s // 60:02d}:{s % 60:02d}"
        lines += [f"{t}.{100 + g:03d}, {g}, NVIDIA H100 80GB HBM3, 97 %, 300.00 W" for g in (0, 1)]
    path.write_bytes(("\n".join(lines) + "\n2024/01/31 12:05:00.100, 0, NVI").encode() + bytes(900))
    return path


def test_import_counts_every_gpu_of_an_index_less_log(cw: Any, tmp_path: Path) -> None:
    log = _index_less(tmp_path / "node.csv")
    out = json.loads(cw.ok("import", log, "--utc", "--json").stdout)
    (run,) = out["runs"]
    assert run["gpus"] == 8 and run["samples"] == 400
    # 399 s between the first and the last poll, GPU g at 100 + 10 g W
    assert run["gpu_energy_joules"] == pytest.approx(399 * sum(100 + 10 * g for g in range(8)))
    note = "no device column: devices numbered by their order in each poll (8 rows a poll"
    assert any(n.startswith(note) for n in out["notes"])
    text = cw.ok("import", log, "--utc", "--replace").stdout
    assert "of 8 GPU(s)" in text and f"note: {note}" in text
    gpus = sorted(cw.show("node")["gpus"], key=lambda g: g["index"])
    assert [g["index"] for g in gpus] == list(range(8))
    assert [g["energy_joules"] for g in gpus] == pytest.approx(
        [399 * (100 + 10 * g) for g in range(8)]
    )


def test_detect_sees_every_gpu_of_an_index_less_log(cw: Any, tmp_path: Path) -> None:
    log = _index_less(tmp_path / "node.csv")
    (job,) = json.loads(cw.ok("detect", log, "--json").stdout)["jobs"]
    assert job["gpu_count"] == 8
    assert job["ceiling"]["devices"] == 8
    one = _index_less(tmp_path / "one.csv", gpus=1)
    (single,) = json.loads(cw.ok("detect", one, "--json").stdout)["jobs"]
    assert job["ceiling"]["flop"] == pytest.approx(8 * single["ceiling"]["flop"], rel=0.01)
    assert "8 GPU(s)" in cw.ok("detect", log).stdout


def test_import_and_detect_read_a_log_cut_while_written(cw: Any, tmp_path: Path) -> None:
    log = _cut(tmp_path / "crashed.csv")
    out = json.loads(cw.ok("import", log, "--json").stdout)
    assert out["runs"][0]["gpus"] == 2 and out["runs"][0]["samples"] == 300
    assert "the last line was cut (line 602, no end of line): dropped" in out["notes"]
    assert "the file ends in 900 NUL bytes (a log cut by a crash): ignored" in out["notes"]
    assert any("line 602" in n for n in cw.show("crashed")["notes"])
    (job,) = json.loads(cw.ok("detect", log, "--json").stdout)["jobs"]
    assert job["gpu_count"] == 2 and job["samples"] > 0
