"""The reproducibility record at a run's end: the environment captured when it started and
the hyperparameters user code declared (``track(config=...)``, ``run.config(...)``, the
framework callbacks), stored as the run's ``environment`` and ``config`` documents.

User code writes its configuration to ``config-<pid>.json`` in the run's spool directory (one
file per process, replaced whole on each change); the supervisor (or ``track()``'s sampler)
reads them before the spool is removed.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec

from computewatch.sources.environment import Capture, redact_config
from computewatch.store import Store

__all__ = [
    "CONFIG_PREFIX",
    "ENV_RUN_DB",
    "ReproRecord",
    "read_configs",
    "read_declaration",
    "record_repro",
    "repro_record",
    "store_repro",
    "write_config",
    "write_declaration",
]

CONFIG_PREFIX = "config-"
ENV_RUN_DB = "COMPUTEWATCH_RUN_DB"
"""The store of the supervising ``computewatch run``, for ``track(log_to=...)`` inside it."""


def write_config(spool: str | os.PathLike[str], values: Mapping[str, Any]) -> None:
    """This process's configuration, redacted, into the run's spool (atomic replace). Raises
    OSError; the caller decides what a failure means."""
    d = Path(spool)
    pid = os.getpid()
    tmp = d / f".{CONFIG_PREFIX}{pid}.json"
    tmp.write_text(json.dumps(redact_config(values), sort_keys=True, default=str))
    tmp.replace(d / f"{CONFIG_PREFIX}{pid}.json")


GOVERNANCE_FILE = "governance.json"
"""``track(model=...)``'s declaration of what the run trains, in the run's spool directory."""


def write_declaration(spool: str | os.PathLike[str], declaration: Mapping[str, Any]) -> None:
    """Record what the run trains (atomic replace); raises OSError."""
    d = Path(spool)
    tmp = d / f".{GOVERNANCE_FILE}.{os.getpid()}"
    tmp.write_text(json.dumps(dict(declaration), sort_keys=True))
    tmp.replace(d / GOVERNANCE_FILE)


def read_declaration(spool: str | os.PathLike[str]) -> dict[str, Any] | None:
    try:
        doc = json.loads((Path(spool) / GOVERNANCE_FILE).read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) and isinstance(doc.get("model"), str) else None


def read_configs(spool: str | os.PathLike[str]) -> dict[str, Any]:
    """Every process's configuration merged (the lowest pid's value wins a clash: rank 0 starts
    first, as a rule); an unreadable file is skipped."""
    merged: dict[str, Any] = {}

    def order(name: str) -> int:
        pid = name[len(CONFIG_PREFIX) : -len(".json")]
        return int(pid) if pid.isascii() and pid.isdigit() else 1 << 62

    try:
        names = sorted(
            (n for n in os.listdir(spool) if n.startswith(CONFIG_PREFIX) and n.endswith(".json")),
            key=order,
        )
    except OSError:
        return merged
    for name in names:
        try:
            values = json.loads((Path(spool) / name).read_text())
        except (OSError, ValueError):
            continue
        if isinstance(values, dict):
            for k, v in values.items():
                merged.setdefault(k, v)
    return merged


class ReproRecord(msgspec.Struct, frozen=True):
    """What a run's end stores for reproducibility: documents by kind (``environment``,
    ``config``, ``governance``) and a note on what is missing."""

    docs: dict[str, object]
    note: str | None = None


def repro_record(
    capture: Capture | None, facts: Mapping[str, Any] | None, spool: str | os.PathLike[str]
) -> ReproRecord:
    """Gather the run's ``environment``, ``config`` and declared ``governance`` (files and the
    capture only: nothing is written). Never raises."""
    docs: dict[str, object] = {}
    notes: list[str] = []
    try:
        env = capture.result(facts) if capture is not None else None
        if env is not None:
            docs["environment"] = env
        elif capture is not None:
            notes.append(f"environment not recorded: {capture.error}")
        config = read_configs(spool)
        if config:
            docs["config"] = config
        declared = read_declaration(spool)
        if declared is not None:
            docs["governance"] = declared
    except (OSError, ValueError, TypeError) as e:
        notes.append(f"reproducibility record not read: {type(e).__name__}: {e}")
    return ReproRecord(docs, "; ".join(notes) or None)


def store_repro(store: Store, run_key: int, record: ReproRecord) -> None:
    """Store the record's documents for the run; a governance declaration given to ``run``
    (stored when the run started) wins over the one user code wrote. Raises what the store
    raises (``sqlite3.Error``): the caller decides where the run's end goes."""
    for kind, doc in record.docs.items():
        if kind == "governance" and "governance" in store.meta(run_key):
            continue
        store.set_meta(run_key, kind, doc)


def record_repro(
    store: Store,
    run_key: int,
    capture: Capture | None,
    facts: Mapping[str, Any] | None,
    spool: str | os.PathLike[str],
) -> str | None:
    """Store the run's ``environment`` and ``config``; a note when something is missing. Never
    raises: the record must not cost the run its end."""
    record = repro_record(capture, facts, spool)
    notes = [record.note] if record.note else []
    try:
        store_repro(store, run_key, record)
    except (sqlite3.Error, ValueError, TypeError) as e:
        notes.append(f"reproducibility record not stored: {type(e).__name__}: {e}")
    return "; ".join(notes) or None
