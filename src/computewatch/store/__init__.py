"""The local store: SQLite in WAL mode (DESIGN.md, step 3)."""

from computewatch.store.db import (
    COMPLETED,
    FAILED,
    INTERRUPTED,
    RUNNING,
    RunRow,
    SeriesRow,
    StepRow,
    Store,
    StoreError,
)
from computewatch.store.schema import SCHEMA_VERSION

__all__ = [
    "COMPLETED",
    "FAILED",
    "INTERRUPTED",
    "RUNNING",
    "SCHEMA_VERSION",
    "RunRow",
    "SeriesRow",
    "StepRow",
    "Store",
    "StoreError",
]
