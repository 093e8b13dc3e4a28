"""TensorBoard: every point as a scalar (tags as the canonical names: ``system/...``,
``computewatch/...``), the accounting's methods and the findings as text, in an event file of
our own (``*.computewatch``) in the log directory, which TensorBoard reads with the others.

The directory is a ``SummaryWriter``'s (``TensorBoard(writer=w)``: its ``log_dir``), a
``log_dir`` given, ``$COMPUTEWATCH_TENSORBOARD_DIR``, else ``runs/computewatch-<name>``. The
event file is written with TensorBoard's own writer: no PyTorch or TensorFlow needed.
"""

from __future__ import annotations

import importlib
import os
import time
from pathlib import Path
from typing import Any

from computewatch.trackers.base import FinalRecord, MetricPoint, TrackerRun

__all__ = ["ENV_DIR", "TensorBoard"]

ENV_DIR = "COMPUTEWATCH_TENSORBOARD_DIR"


class TensorBoard:
    """The TensorBoard backend."""

    name = "tensorboard"

    def __init__(self, log_dir: str | os.PathLike[str] | None = None, *, writer: Any = None):
        if log_dir is None and writer is not None:
            log_dir = getattr(writer, "log_dir", None) or writer.get_logdir()
        self.log_dir: str | None = None if log_dir is None else os.fspath(log_dir)
        self._writer: Any = None
        self._last_step = 0
        self._last_wall = 0.0

    def target(self) -> dict[str, object]:
        """The log directory (absolute), for ``push --trackers``."""
        return {"log_dir": os.path.abspath(self.log_dir) if self.log_dir else None}

    def open(self, run: TrackerRun) -> None:
        if self.log_dir is None:
            base = os.environ.get(ENV_DIR)
            self.log_dir = base if base else str(Path("runs") / run.display_name)
        # tensorboard is an optional dependency: loaded on the logger thread only
        efw = importlib.import_module("tensorboard.summary.writer.event_file_writer")
        self._writer = efw.EventFileWriter(self.log_dir, filename_suffix=".computewatch")

    def _event(self, wall: float, step: int, values: list[Any]) -> None:
        event_pb2 = importlib.import_module("tensorboard.compat.proto.event_pb2")
        summary_pb2 = importlib.import_module("tensorboard.compat.proto.summary_pb2")
        ev = event_pb2.Event(wall_time=wall, step=step, summary=summary_pb2.Summary(value=values))
        self._writer.add_event(ev)

    def log(self, points: list[MetricPoint]) -> None:
        summary_pb2 = importlib.import_module("tensorboard.compat.proto.summary_pb2")
        by_step: dict[tuple[int, float], list[Any]] = {}
        for p in points:
            by_step.setdefault((p.step, p.wall), []).append(
                summary_pb2.Summary.Value(tag=p.name, simple_value=p.value)
            )
        for (step, wall), values in sorted(by_step.items()):
            self._event(wall, step, values)
            self._last_step, self._last_wall = step, wall

    def finish(self, record: FinalRecord) -> None:
        summary_pb2 = importlib.import_module("tensorboard.compat.proto.summary_pb2")
        values = [
            summary_pb2.Summary.Value(tag=k, simple_value=v) for k, v in record.metrics.items()
        ]
        lines = [f"{k}: {v}" for k, v in sorted(record.tags.items())]
        values.append(_text("computewatch/accounting", "\n\n".join(lines)))
        if record.findings:
            values.append(_text("computewatch/findings", "\n\n".join(record.findings)))
        self._event(time.time(), self._last_step, values)
        self._writer.flush()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()


def _text(tag: str, text: str) -> Any:
    """A text summary value, as TensorBoard's text plugin reads it."""
    summary_pb2 = importlib.import_module("tensorboard.compat.proto.summary_pb2")
    tensor_pb2 = importlib.import_module("tensorboard.compat.proto.tensor_pb2")
    shape_pb2 = importlib.import_module("tensorboard.compat.proto.tensor_shape_pb2")
    plugin_pb2 = importlib.import_module("tensorboard.plugins.text.plugin_data_pb2")
    meta = summary_pb2.SummaryMetadata(
        plugin_data=summary_pb2.SummaryMetadata.PluginData(
            plugin_name="text", content=plugin_pb2.TextPluginData(version=0).SerializeToString()
        )
    )
    tensor = tensor_pb2.TensorProto(
        dtype="DT_STRING",
        string_val=[text.encode("utf-8")],
        tensor_shape=shape_pb2.TensorShapeProto(dim=[shape_pb2.TensorShapeProto.Dim(size=1)]),
    )
    return summary_pb2.Summary.Value(tag=tag, metadata=meta, tensor=tensor)
