"""``computewatch gc --older-than AGE [--vacuum]`` through the CLI: the samples of runs older
than the cutoff are deleted, newer runs keep theirs, summaries stay, and ``--vacuum`` gives the
freed pages back (the database file shrinks)."""

from __future__ import annotations

import sqlite3
import sys
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

DAY = 86400.0


def _db(path: Path, sql: str, *params: object) -> Any:
    with closing(sqlite3.connect(path)) as conn, conn:
        return conn.execute(sql, params).fetchall()


def _samples(db: Path, name: str) -> int:
    [(n,)] = _db(
        db,
        "SELECT count(*) FROM samples JOIN runs ON runs.key = samples.run_key WHERE name = ?",
        name,
    )
    return int(n)


def _file_bytes(db: Path) -> int:
    # The CLI's last connection checkpoints the WAL away on close; count it anyway if left.
    wal = db.with_name(db.name + "-wal")
    return db.stat().st_size + (wal.stat().st_size if wal.exists() else 0)


@pytest.mark.slow
def test_gc_deletes_old_runs_samples_and_vacuum_shrinks_the_file(cw: Any) -> None:
    # Eight fake GPUs sampled every 0.1 s for 1.5 s: thousands of samples to delete.
    job = [sys.executable, "-c", "import time; time.sleep(1.5)"]
    for name in ("old", "new"):
        cw.ok(
            "run", "--quiet", "--interval", "0.1", "--gpu-backend", "fake:8xH100-SXM",
            "--name", name, "--", *job,
        )  # fmt: skip
    db = cw.db
    # The old run started 40 days ago (as far as gc can tell: it goes by started_at).
    _db(
        db,
        "UPDATE runs SET started_at = started_at - ?, ended_at = ended_at - ? WHERE name = 'old'",
        40 * DAY,
        40 * DAY,
    )
    old, new = _samples(db, "old"), _samples(db, "new")
    assert old > 1000 and new > 1000, (old, new)
    before = cw.show("old")
    size0 = _file_bytes(db)

    r = cw.ok("gc", "--older-than", "30d")
    assert r.stdout.strip() == "deleted the samples of 1 run(s); their summaries are kept"
    assert _samples(db, "old") == 0
    assert _samples(db, "new") == new
    [(deleted_at,)] = _db(db, "SELECT samples_deleted_at FROM runs WHERE name = 'old'")
    assert deleted_at is not None
    assert cw.show("old") == before
    # Without --vacuum the pages freed stay in the file, on SQLite's free list.
    [(free,)] = _db(db, "PRAGMA freelist_count")
    assert free > 0
    size1 = _file_bytes(db)
    assert size1 >= size0 * 0.9, (size0, size1)

    r = cw.ok("gc", "--older-than", "30d", "--vacuum")
    assert r.stdout.strip() == "deleted the samples of 0 run(s); their summaries are kept"
    [(free,)] = _db(db, "PRAGMA freelist_count")
    assert free == 0
    size2 = _file_bytes(db)
    [(pages,)] = _db(db, "PRAGMA page_count")
    [(page_size,)] = _db(db, "PRAGMA page_size")
    assert size2 == pages * page_size
    # Half the samples were the old run's, so well over a quarter of the file is given back.
    assert size2 < size1 * 0.75, (size1, size2)
    assert _samples(db, "new") == new
    assert cw.show("old") == before
    assert cw.show("new")["name"] == "new"
