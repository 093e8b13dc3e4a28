"""What a tracker did not receive, kept beside the store for ``computewatch push --trackers``.

A tracker disabled during a run (a refused or killed MLflow server) or given up at the run's
end keeps its points not delivered and whether the run's accounting is still owed, with what
names its run in the tool (MLflow's run id and tracking URI, W&B's run id and project,
TensorBoard's directory), in ``<the store's folder>/trackers/<run id>.json``: one file per run,
one entry per tracker, written whole and renamed into place. The accounting itself is not kept:
it is the stored summary's, read again at the push. At most :data:`BACKLOG_CAP` points per
tracker are kept (the oldest beyond it are dropped and counted).

:func:`deliver_kept` delivers a run's entries through the same
:class:`~computewatch.trackers.logger.TrackerLogger` a run uses (a thread per tracker, one
deadline), and an entry is rewritten with what is still not delivered, or removed: a second
push sends nothing again.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from computewatch.trackers.base import MetricPoint, TrackerBackend, TrackerError

__all__ = [
    "BACKLOG_CAP",
    "FORMAT",
    "Kept",
    "backend_for",
    "backlog_path",
    "read_backlog",
    "runs_with_backlog",
    "target_of",
    "write_kept",
]

BACKLOG_CAP = 250_000
"""Points kept per tracker (about 5 h of a one-GPU run at 1 s); older ones are dropped."""
FORMAT = 1
"""The file's format (``format``); a file of another is left alone."""
_DIR = "trackers"


@dataclass(slots=True)
class Kept:
    """One tracker's part of a run's backlog."""

    tracker: str
    target: dict[str, Any] = field(default_factory=dict)
    """What names the tracker's run (``run_id``, ``tracking_uri``, ``project``, ``log_dir``)."""
    points: list[MetricPoint] = field(default_factory=list)
    final: bool = False
    """True while the run's accounting (the end record) is still owed to the tracker."""
    why: str = ""
    """Why it was not delivered (the line said at the time)."""
    dropped: int = 0
    """Points dropped beyond :data:`BACKLOG_CAP` (not kept)."""

    @property
    def empty(self) -> bool:
        return not self.points and not self.final


def backlog_path(db_path: Path, run_id: str) -> Path:
    """The run's backlog file: ``trackers/<run id>.json`` in the store's folder."""
    return Path(db_path).parent / _DIR / f"{run_id}.json"


def runs_with_backlog(db_path: Path) -> list[str]:
    """The ids of the runs that have a backlog file beside the store ``db_path``."""
    folder = Path(db_path).parent / _DIR
    try:
        return sorted(p.stem for p in folder.glob("*.json"))
    except OSError:
        return []


def _num(v: float) -> float | str:
    return v if math.isfinite(v) else repr(v)  # JSON has no NaN or infinity


def _encode(k: Kept) -> dict[str, Any]:
    names: dict[str, int] = {}
    rows = []
    for p in k.points:
        i = names.setdefault(p.name, len(names))
        rows.append([i, _num(p.value), p.step, p.wall])
    return {
        "target": k.target,
        "final": k.final,
        "why": k.why,
        "dropped": k.dropped,
        "names": list(names),
        "points": rows,
    }


def _decode(tracker: str, d: dict[str, Any]) -> Kept:
    names = [str(n) for n in d.get("names") or []]
    points = [
        MetricPoint(names[int(i)], float(v), int(step), float(wall))
        for i, v, step, wall in d.get("points") or []
    ]
    target = d.get("target")
    return Kept(
        tracker,
        dict(target) if isinstance(target, dict) else {},
        points,
        bool(d.get("final")),
        str(d.get("why") or ""),
        int(d.get("dropped") or 0),
    )


def read_backlog(path: Path) -> dict[str, Kept]:
    """The file's entries by tracker; none when there is no file. A file that cannot be read
    or is of another format raises :class:`TrackerError` (it is left as it is)."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as e:
        raise TrackerError(f"the trackers' backlog {path} cannot be read ({e})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise TrackerError(f"the trackers' backlog {path} is not of format {FORMAT}")
    trackers = doc.get("trackers")
    out: dict[str, Kept] = {}
    try:
        for name, entry in (trackers if isinstance(trackers, dict) else {}).items():
            out[str(name)] = _decode(str(name), entry)
    except (TypeError, ValueError, IndexError) as e:
        raise TrackerError(f"the trackers' backlog {path} is damaged ({e})") from None
    return out


def write_kept(path: Path, run_id: str, kept: list[Kept]) -> None:
    """Replace these trackers' entries in the run's backlog (an empty one is removed; no entry
    left: no file). Raises ``OSError`` when it cannot be written (a read-only folder)."""
    try:
        entries = read_backlog(path)
    except TrackerError:
        entries = {}
    for k in kept:
        if k.empty:
            entries.pop(k.tracker, None)
        else:
            entries[k.tracker] = k
    if not entries:
        path.unlink(missing_ok=True)
        return
    doc = {
        "format": FORMAT,
        "run_id": run_id,
        "trackers": {name: _encode(k) for name, k in entries.items()},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(doc, f, separators=(",", ":"))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def target_of(backend: TrackerBackend) -> dict[str, Any]:
    """What names ``backend``'s run in its tool (its ``target()``; none for a backend of the
    user's own making without one)."""
    fn = getattr(backend, "target", None)
    try:
        got = fn() if callable(fn) else None
    except Exception:  # a backend's own description failing: a new run at the push
        return {}
    return dict(got) if isinstance(got, dict) else {}


def backend_for(tracker: str, target: dict[str, Any]) -> TrackerBackend:
    """The backend that delivers a kept entry: into the run it names when it names one (points
    the tool already has are skipped where the tool can say so: MLflow), else a new run."""
    # each tracker's module (and its framework) loads only when a kept entry is delivered
    from computewatch.trackers.mlflow import MLflow
    from computewatch.trackers.neptune import Neptune
    from computewatch.trackers.tensorboard import TensorBoard
    from computewatch.trackers.wandb import WandB

    def text(key: str) -> str | None:
        v = target.get(key)
        return v if isinstance(v, str) and v else None

    if tracker == "mlflow":
        return MLflow(
            text("run_id"),
            tracking_uri=text("tracking_uri"),
            experiment=text("experiment"),
            quiet=True,
            own=bool(target.get("own")),
            resume=True,
        )
    if tracker == "wandb":
        return WandB(project=text("project"), monitor=False, resume=text("run_id"))
    if tracker == "tensorboard":
        return TensorBoard(text("log_dir"))
    if tracker == "neptune":
        return Neptune(project=text("project"))
    raise TrackerError(f"unknown tracker {tracker!r} in the trackers' backlog")
