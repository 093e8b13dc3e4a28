"""``computewatch detect`` on files: the trace reader's notes reach the user."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

HEADER = "timestamp, name, utilization.gpu [%], memory.used [MiB]"
GPU = "NVIDIA H100 80GB HBM3"


def _row(s: int, d: int, *, index: bool = False) -> str:
    at = f"2024/01/31 12:{s // 60:02d}:{s % 60:02d}.{d * 5:03d}"
    dev = f" {d}," if index else ""
    return f"{at},{dev} {GPU}, {50 + 10 * d + s % 7} %, {1000 + d} MiB"


def _two_gpus_by_poll(path: Path) -> Path:
    """Two GPUs polled every second, no device column, the last line cut (no end of line)."""
    lines = [HEADER] + [_row(s, d) for s in range(120) for d in range(2)]
    path.write_text("\n".join(lines))
    return path


def _two_gpus_indexed(path: Path) -> Path:
    """The same two GPUs with nvidia-smi's index column, every line whole: no notes."""
    header = HEADER.replace("timestamp,", "timestamp, index,")
    lines = [header] + [_row(s, d, index=True) for s in range(120) for d in range(2)]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_detect_gives_the_readers_notes(cw: Any, tmp_path: Path) -> None:
    cut = _two_gpus_by_poll(tmp_path / "bypoll.csv")
    whole = _two_gpus_indexed(tmp_path / "indexed.csv")
    numbered = "no device column: devices numbered by their order in each poll (2 rows a poll"
    dropped = "the last line was cut (line 241, no end of line): dropped"

    text = cw.ok("detect", cut, whole)
    notes = text.stderr.splitlines()
    assert any(n.startswith(f"{cut}: note: {numbered}") for n in notes), text.stderr
    assert f"{cut}: note: {dropped}" in notes, text.stderr
    assert all(n.startswith(f"{cut}: note: ") for n in notes)  # the whole file has none
    assert "note" not in text.stdout  # the verdicts alone on stdout
    assert len(text.stdout.splitlines()) == 2

    doc = json.loads(cw.ok("detect", cut, whole, "--json").stdout)
    by_source = {j["source"]: j for j in doc["jobs"]}
    assert by_source[str(whole)]["notes"] == []
    job = by_source[str(cut)]
    assert job["gpu_count"] == 2
    assert any(n.startswith(numbered) for n in job["notes"])
    assert dropped in job["notes"]
