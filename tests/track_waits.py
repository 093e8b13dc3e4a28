"""Waits for the scripts that tests run in a child interpreter under ``computewatch.track()``.

On a loaded machine the sampler that a standalone ``track()`` starts (a subprocess: imports,
store, sources, run row) may tick for the first time seconds after the block began, and the
thread that appends ``step()``'s records to the spool every ``FLUSH_SECONDS`` may run late: a
script that sleeps a fixed time can end its block, or die, before either happened. These
functions wait for what the test needs instead, and give up (an AssertionError in the script,
which then exits non-zero with the message) after ``give_up`` seconds.

A test puts ``SOURCE`` (the functions' text) at the top of its script.
"""

from __future__ import annotations

import inspect
import os
import sqlite3
import time
from typing import Any


def stored_ticks(db: Any, run_id: str) -> int:
    """How many ticks the store at ``db`` holds of run ``run_id`` (0 before the sampler has
    made the database or the run): a read-only open and one query."""
    from computewatch.store import Store, StoreError

    try:
        with Store.open_readonly(db) as store:
            return len(store.ticks(store.find_run(run_id).key))
    except (StoreError, sqlite3.Error):
        return 0


def wait_for_ticks(run: Any, ticks: int = 3, give_up: float = 60.0) -> None:
    """Until the sampler of the standalone ``run`` has stored ``ticks`` ticks; polled every
    0.1 s (a fraction of a millisecond of the script's CPU each)."""
    deadline = time.monotonic() + give_up
    while stored_ticks(run.db_path, run.id) < ticks:
        if time.monotonic() > deadline:
            raise AssertionError(f"the sampler stored fewer than {ticks} ticks in {give_up:g} s")
        time.sleep(0.1)


def wait_for_spooled_steps(run: Any, steps: int, give_up: float = 60.0) -> None:
    """Until this process's spool file (``run.spool``) holds ``steps`` step records, decoded as
    the sampler decodes them; polled every 0.05 s."""
    from computewatch.records import StepRecord
    from computewatch.sampling.channel import SpoolReader

    deadline = time.monotonic() + give_up
    pid = os.getpid()
    while True:
        reader = SpoolReader(run.spool)  # a fresh reader reads every file from its start
        try:
            found = sum(isinstance(e, StepRecord) and e.pid == pid for e in reader.poll())
        finally:
            reader.close()
        if found >= steps:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"{found} of {steps} steps reached the spool in {give_up:g} s")
        time.sleep(0.05)


SOURCE = "\n\n".join(
    [
        "import os, sqlite3, time\nfrom typing import Any",
        inspect.getsource(stored_ticks),
        inspect.getsource(wait_for_ticks),
        inspect.getsource(wait_for_spooled_steps),
        "",
    ]
)
"""The functions above as script text, their imports first."""
