"""The supervisor in-process: a failing monitor never changes the command's fate."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

from computewatch.sampling import supervisor as supervise
from computewatch.sampling.supervisor import RunOptions, run_command
from computewatch.store import Store


def test_a_monitor_that_fails_to_start_leaves_the_command_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("simulated failure")

    monkeypatch.setattr(supervise, "build_monitor", broken)
    marker = tmp_path / "ran"
    err = io.StringIO()
    with Store.open(tmp_path / "cw.db") as store:
        outcome = run_command(
            RunOptions(
                command=[sys.executable, "-c", f"open({str(marker)!r}, 'w'); raise SystemExit(7)"],
                live="quiet",
            ),
            store,
            stderr=err,
        )
        assert store.list_runs() == []
    assert outcome.exit_code == 7
    assert outcome.summary is None
    assert marker.exists()
    assert "monitoring failed (RuntimeError: simulated failure)" in err.getvalue()
    assert "went on unmonitored" in err.getvalue()


def test_a_store_that_fails_at_the_end_keeps_the_exit_status(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sqlite3

    def full(*args: object, **kwargs: object) -> None:
        raise sqlite3.OperationalError("database or disk is full")

    from computewatch.sampling import lifecycle

    monkeypatch.setattr(lifecycle, "finish_run", full)
    err = io.StringIO()
    with Store.open(tmp_path / "cw.db") as store:
        outcome = run_command(
            RunOptions(command=[sys.executable, "-c", "raise SystemExit(3)"], live="quiet"),
            store,
            stderr=err,
        )
    assert outcome.exit_code == 3
    assert "could not be stored now (disk full)" in err.getvalue()  # the run waits in the spool
    assert len(list((tmp_path / "spool").glob("*.run.sqlite"))) == 1
