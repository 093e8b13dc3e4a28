"""A run's reserve: a little disk space set aside when the run starts and given back just before
its last writes, so that a disk that filled while the job ran still takes the run's end (its
status, exit code and end time).

The reserve is a file of :data:`RESERVE_BYTES` allocated for real (``posix_fallocate``: the
blocks are taken, not a sparse hole) beside the waiting runs, ``<db dir>/spool/<run id>.reserve``.
A supervisor killed before its end leaves one behind; the next reader that marks that run
interrupted removes it (``Store.reconcile``).
"""

from __future__ import annotations

import os
from pathlib import Path

from computewatch.paths import make_private_dirs

__all__ = ["RESERVE_BYTES", "make_reserve", "release_reserve", "reserve_path"]

RESERVE_BYTES = 512 * 1024
"""Room for the run's end row and its summary in the write-ahead log: a few 4 KiB pages each,
written in transactions of their own, with a wide margin."""

SUFFIX = ".reserve"


def reserve_path(db_path: Path, run_id: str) -> Path:
    return db_path.parent / "spool" / f"{run_id}{SUFFIX}"


def make_reserve(db_path: Path, run_id: str, size: int = RESERVE_BYTES) -> Path | None:
    """Set ``size`` bytes aside for the run ``run_id``; None when the disk cannot spare them
    (already full, read-only): the run goes on without a reserve. Never raises."""
    path = reserve_path(db_path, run_id)
    try:
        make_private_dirs(path.parent)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError:
        return None
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError:
        os.close(fd)
        release_reserve(path)
        return None
    os.close(fd)
    return path


def release_reserve(path: Path | None) -> None:
    """Give the space back (before the run's last writes). Never raises."""
    if path is None:
        return
    try:
        path.unlink(missing_ok=True)
    except OSError:
        pass
