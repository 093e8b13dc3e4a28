"""Profiles and traces linked to a run: files under ``<data home>/artifacts/RUNID/``, listed in
the run's ``artifacts`` document (``Store.set_meta(run_key, "artifacts", ...)``) under
``profiles``. Entries are added, never replaced: other tools' keys in the document are kept."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, NotRequired, TypedDict

from computewatch.paths import make_private_dirs
from computewatch.store import Store

__all__ = ["Artifact", "add_artifact", "artifact_dir", "artifacts_of"]

Tool = Literal["py-spy", "torch-profiler", "cprofile", "nsys"]
Trigger = Literal["manual", "anomaly", "steps", "run"]


class Artifact(TypedDict):
    """One profile or trace of a run: the tool, why it was taken, its files by kind
    (``speedscope``, ``svg``, ``chrome_trace``, ``operators``, ``pstats``, ``text``,
    ``nsys_report``) and when (Unix seconds)."""

    tool: Tool
    trigger: Trigger
    files: dict[str, str]
    created_at: float
    pid: NotRequired[int]
    note: NotRequired[str]


def artifact_dir(db_path: Path, run_id: str) -> Path:
    """Where a run's profiles go: ``artifacts/RUNID`` beside its database (the data home for
    the default database), made private (0700) on first use."""
    d = db_path.expanduser().resolve().parent / "artifacts" / run_id
    make_private_dirs(d)
    return d


def add_artifact(store: Store, run_key: int, artifact: Artifact) -> None:
    """Append ``artifact`` to the run's ``artifacts`` document in one write transaction."""
    c = store.conn
    c.execute("BEGIN IMMEDIATE")
    try:
        doc: Any = store.meta(run_key).get("artifacts")
        if not isinstance(doc, dict):
            doc = {}
        profiles = doc.get("profiles")
        doc["profiles"] = [*(profiles if isinstance(profiles, list) else []), dict(artifact)]
        store.set_meta(run_key, "artifacts", doc)
        c.execute("COMMIT")
    except BaseException:
        c.execute("ROLLBACK")
        raise


def artifacts_of(store: Store, run_key: int) -> list[Artifact]:
    """The run's profiles and traces, oldest first (entries not shaped as expected skipped)."""
    doc = store.meta(run_key).get("artifacts")
    profiles = doc.get("profiles") if isinstance(doc, dict) else None
    out: list[Artifact] = []
    for p in profiles if isinstance(profiles, list) else []:
        if isinstance(p, dict) and isinstance(p.get("files"), dict) and "tool" in p:
            out.append(p)  # type: ignore[arg-type]
    return out
