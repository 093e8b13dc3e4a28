"""Logging runs into the experiment trackers people already use (MLflow, W&B, TensorBoard,
Neptune), the reproducibility record, and model cards.

``computewatch run --log-to mlflow``, ``track(log_to=["wandb"])`` and the configuration's
``[log_to] trackers`` all come here: :func:`backends_for` makes one backend per tool (each in
its own module, behind :class:`~computewatch.trackers.base.TrackerBackend`), and
:class:`~computewatch.trackers.logger.TrackerLogger` feeds them from a thread of its own.
docs/trackers.md has the metric names per tool.
"""

from __future__ import annotations

from collections.abc import Iterable

from computewatch.trackers.base import (
    TRACKER_NAMES,
    FinalRecord,
    MetricPoint,
    TrackerBackend,
    TrackerError,
    TrackerRun,
    check_names,
)
from computewatch.trackers.logger import TrackerLogger
from computewatch.trackers.mlflow import MLflow
from computewatch.trackers.neptune import Neptune
from computewatch.trackers.tensorboard import TensorBoard
from computewatch.trackers.wandb import WandB

__all__ = [
    "TRACKER_NAMES",
    "FinalRecord",
    "MLflow",
    "MetricPoint",
    "Neptune",
    "TensorBoard",
    "TrackerBackend",
    "TrackerError",
    "TrackerLogger",
    "TrackerRun",
    "WandB",
    "backends_for",
]


def backends_for(
    specs: Iterable[str | TrackerBackend], where: str = "log_to"
) -> list[TrackerBackend]:
    """One backend per spec: a tool's name (``"mlflow"``, ...; the caller's current run of that
    tool is found now, on this thread) or a backend object (``MLflow(run_id=...)``)."""
    out: list[TrackerBackend] = []
    for spec in specs:
        if isinstance(spec, str):
            (name,) = check_names([spec], where)
            backend: TrackerBackend
            if name == "mlflow":
                backend = MLflow()
            elif name == "wandb":
                backend = WandB()
            elif name == "tensorboard":
                backend = TensorBoard()
            else:
                backend = Neptune()
            out.append(backend)
        elif all(hasattr(spec, m) for m in ("open", "log", "finish", "close", "name")):
            out.append(spec)
        else:
            raise TrackerError(
                f"{where}: expected a tracker name ({', '.join(TRACKER_NAMES)}) or a tracker "
                f"object, not {type(spec).__name__}"
            )
    return out
