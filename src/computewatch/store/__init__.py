"""The local store: SQLite in WAL mode (docs/architecture.md, "The store")."""

from computewatch.store.db import (
    COMPLETED,
    FAILED,
    INTERRUPTED,
    RUNNING,
    PhaseRow,
    RequestRow,
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
    "PhaseRow",
    "RequestRow",
    "RunRow",
    "SeriesRow",
    "StepRow",
    "Store",
    "StoreError",
]
