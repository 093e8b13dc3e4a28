"""Profiles and traces linked to a run: files under ``<data home>/artifacts/RUNID/``, listed in
the run's ``artifacts`` document (``Store.set_meta(run_key, "artifacts", ...)``) under
``profiles``. Entries are added, never replaced: other tools' keys in the document are kept."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Literal, NotRequired, TypedDict

from computewatch.analysis.summary_types import DiagnosisSection
from computewatch.paths import make_private_dirs
from computewatch.store import Store

__all__ = [
    "MANIFEST_SUFFIX",
    "Artifact",
    "Tool",
    "Trigger",
    "add_artifact",
    "artifact_dir",
    "artifacts_of",
    "collect_manifests",
    "link_pending",
    "name_captures",
    "write_manifest",
]

MANIFEST_SUFFIX = ".artifact.json"
"""Profiles written inside a running job (the PyTorch Profiler, the anomaly capture) leave one
manifest each in the run's artifacts directory; the run's end links them
(:func:`collect_manifests`), so the job itself never writes the store."""

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


def artifact_dir(db_path: Path, run_id: str, *, create: bool = True) -> Path:
    """Where a run's profiles go: ``artifacts/RUNID`` beside its database (the data home for
    the default database; a run waiting in the spool keeps its database's), made private
    (0700) on first use."""
    home = db_path.expanduser().resolve().parent
    if home.name == "spool":  # <db dir>/spool/<id>.run.sqlite: the database's directory
        home = home.parent
    d = home / "artifacts" / run_id
    if create:
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


def write_manifest(directory: Path, stem: str, artifact: Artifact) -> Path:
    """Leave ``artifact`` for the run's end to link (written whole, then renamed: a reader
    never sees half a manifest)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{stem}{MANIFEST_SUFFIX}"
    tmp = directory / f".{stem}{MANIFEST_SUFFIX}.tmp"
    tmp.write_text(json.dumps(artifact))
    os.replace(tmp, path)
    return path


def collect_manifests(store: Store, run_key: int, directory: Path) -> int:
    """Link every manifest in ``directory`` to the run (oldest first) and remove it; returns
    how many. A manifest that cannot be read is left where it is."""
    try:
        found = sorted(directory.glob(f"*{MANIFEST_SUFFIX}"), key=lambda p: p.stat().st_mtime)
    except OSError:
        return 0
    n = 0
    for path in found:
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError, RecursionError):  # RecursionError: nested too deeply
            continue
        if not (isinstance(doc, dict) and isinstance(doc.get("files"), dict) and "tool" in doc):
            continue
        add_artifact(store, run_key, doc)  # type: ignore[arg-type]
        path.unlink(missing_ok=True)
        n += 1
    return n


def link_pending(store: Store, run_key: int, run_id: str) -> None:
    """At a run's end: link the manifests its job left (never raises: the run is stored
    either way, and the manifests stay for a later try)."""
    try:
        d = artifact_dir(Path(store.path), run_id, create=False)
        if d.is_dir():
            collect_manifests(store, run_key, d)
    except Exception:
        pass


def name_captures(diagnosis: DiagnosisSection, store: Store, run_key: int) -> None:
    """Name the captures taken on a step-time regression in the diagnosis's
    ``step_regression`` finding (one evidence line per capture; in place). Never raises."""
    try:
        _name_captures(diagnosis, artifacts_of(store, run_key))
    except Exception:
        pass


def _name_captures(diagnosis: DiagnosisSection, artifacts: list[Artifact]) -> None:
    caught = [a for a in artifacts if a.get("trigger") == "anomaly"]
    for f in diagnosis["findings"] if caught else ():
        if f["id"] == "step_regression":
            for a in caught:
                files = ", ".join(a["files"][k] for k in sorted(a["files"]))
                f["evidence"]["lines"].append(
                    f"{a['tool']} capture taken when the regression was detected: {files}"
                )
