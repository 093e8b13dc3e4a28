"""The server process's garbage collector, set for a long-lived process answering many small
requests.

CPython's collector runs a young collection every 700 container allocations, and a full one
when enough objects have survived. In the server, the objects made at start-up (the modules,
the app, SQLAlchemy's and Pydantic's structures: some 140,000) were traversed by every full
collection, and a continuation upload allocates thousands of containers that live for one
request: on one process at 25 uploads a second, full collections came every 2 s and took
10-100 ms each, during which nothing else was answered (the p99 upload rose from about 30 ms to
140 ms). :func:`tune_for_serving` freezes what start-up made (``gc.freeze``: still freed by
reference counting, never traversed again) and raises the thresholds, so that a request's
objects die before a collection finds them; :func:`settle` freezes again what the process then
keeps for its lifetime (the ledger's replay cache, after the first upkeep).

Only ``computewatch server`` calls them: an app made inside another process (the tests) leaves
that process's collector alone.
"""

from __future__ import annotations

import gc
from typing import Final

__all__ = ["GC_THRESHOLDS", "settle", "tune_for_serving"]

GC_THRESHOLDS: Final = (50_000, 20, 100)
"""Allocations between young collections, and young (then middle) collections between the
next generation's: a request's objects are garbage by the time one runs."""

_serving: list[bool] = []
"""Not empty once :func:`tune_for_serving` ran in this process."""


def tune_for_serving() -> None:
    """Collect once, freeze what is left and raise the thresholds (before serving)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
    _serving.append(True)


def settle() -> None:
    """Freeze what the process holds now (its lifetime caches), when it serves; else nothing."""
    if _serving:
        gc.freeze()
