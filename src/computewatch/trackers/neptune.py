"""Neptune: everything under the ``computewatch/`` namespace: system series as
``computewatch/system/...`` float series, the run's figures as ``computewatch/...`` (series
live, fields at the end), how each was obtained as ``computewatch/info/<key>`` strings, the
findings as ``computewatch/findings``.

The run logged is the one given (``Neptune(run=r)``), else a new run named
``computewatch-<name>`` in ``NEPTUNE_PROJECT``, in Neptune's configured mode
(``NEPTUNE_MODE=offline`` writes under ``.neptune/`` or ``NEPTUNE_DATA_DIRECTORY``). Neptune's
own hardware monitoring and output capture are off in the run we start: computewatch measures.
"""

from __future__ import annotations

import importlib
import os
from typing import Any

from computewatch.analysis.repro import flatten
from computewatch.trackers.base import FinalRecord, MetricPoint, TrackerRun

__all__ = ["Neptune", "neptune_path"]


def neptune_path(name: str) -> str:
    """A canonical name as a Neptune field path: ``system/x`` → ``computewatch/system/x``."""
    return name if name.startswith("computewatch/") else f"computewatch/{name}"


class Neptune:
    """The Neptune backend."""

    name = "neptune"

    def __init__(self, run: Any = None, *, project: str | None = None) -> None:
        self.project = project
        self.own = False
        self._run: Any = run

    def target(self) -> dict[str, object]:
        """The project, for ``push --trackers`` (which starts a new run there)."""
        return {"project": self.project or os.environ.get("NEPTUNE_PROJECT")}

    def open(self, run: TrackerRun) -> None:
        if self._run is None:
            # optional dependency, seconds to import: loaded on the logger thread only
            neptune = importlib.import_module("neptune")
            self._run = neptune.init_run(
                project=self.project,
                name=run.display_name,
                tags=[f"{k}={v}" for k, v in run.tags.items()] or None,
                capture_hardware_metrics=False,
                capture_stdout=False,
                capture_stderr=False,
                capture_traceback=False,
            )
            self.own = True
            self._config(run.config)
        self._run["computewatch/info/run_id"] = run.run_id

    def _config(self, config: dict[str, object]) -> None:
        """Hyperparameters under ``computewatch/config/`` (nested keys as namespaces; numbers
        and booleans as they are, other values as text)."""
        for key, v in flatten(config).items():
            value = v if isinstance(v, int | float) else str(v)
            self._run[f"computewatch/config/{key.replace('.', '/')}"] = value

    def log(self, points: list[MetricPoint]) -> None:
        for p in points:
            self._run[neptune_path(p.name)].append(p.value, step=p.step, timestamp=p.wall)

    def finish(self, record: FinalRecord) -> None:
        if self.own:
            self._config(record.config)
        for k, v in record.metrics.items():
            self._run[neptune_path(k)] = v
        for k, text in record.tags.items():
            self._run[f"computewatch/info/{k.removeprefix('computewatch.')}"] = text
        if record.findings:
            self._run["computewatch/findings"] = "\n".join(record.findings)

    def close(self) -> None:
        if self._run is not None:
            if self.own:
                self._run.stop()
            else:
                self._run.wait()
