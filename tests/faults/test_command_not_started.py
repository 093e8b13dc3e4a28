"""Fault case 10: a command that cannot start is reported as a shell reports it."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def test_a_directory_as_the_command_is_a_directory(cw: Any, tmp_path: Path) -> None:
    r = cw("run", "--", str(tmp_path))
    assert r.returncode == 126  # as sh: "Is a directory", 126
    assert r.stderr == f"computewatch: is a directory: {tmp_path}\n"


def test_a_missing_directory_as_the_command_is_not_found(cw: Any, tmp_path: Path) -> None:
    missing = tmp_path / "no-such-dir" / ""
    r = cw("run", "--", f"{missing}/")
    assert r.returncode == 127
    assert r.stderr == f"computewatch: command not found: {missing}/\n"
