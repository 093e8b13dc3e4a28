"""Weights & Biases: system series under ``system/`` (W&B shows them in a panel of their
own), the run's figures under ``computewatch/``, and the accounting, methods and findings in
the run's summary.

The run logged is ``wandb.run`` when the program has one (found on the thread that started the
tracking), else a new run named ``computewatch-<name>`` in ``WANDB_PROJECT`` (default
``computewatch``), in whatever mode W&B is configured for (``WANDB_MODE=offline`` writes
locally). In the user's own run the points are logged with ``commit=False``: they join the
user's next logged step and never move the step counter (W&B refuses steps that go back).
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

from computewatch.trackers.base import FinalRecord, MetricPoint, TrackerRun

__all__ = ["WandB"]


def _wandb() -> Any:
    # optional dependency, heavy to import: loaded on the logger thread only
    return importlib.import_module("wandb")


class WandB:
    """The W&B backend; ``run`` is a ``wandb`` run to log into (default: ``wandb.run``)."""

    name = "wandb"

    def __init__(self, run: Any = None, *, project: str | None = None) -> None:
        self.project = project
        self.own = False
        self._run: Any = run
        if run is None:
            mod = sys.modules.get("wandb")  # only when the program uses W&B: never imported here
            if mod is not None and getattr(mod, "run", None) is not None:
                self._run = mod.run

    def open(self, run: TrackerRun) -> None:
        if self._run is None:
            wandb = _wandb()
            self._run = wandb.init(
                project=self.project or os.environ.get("WANDB_PROJECT") or "computewatch",
                name=run.display_name,
                config={**run.config, "computewatch_run_id": run.run_id},
                tags=[f"{k}={v}"[:64] for k, v in run.tags.items()] or None,
                reinit="create_new",
            )
            self.own = True
        else:
            self._run.config.update({"computewatch_run_id": run.run_id}, allow_val_change=True)

    def log(self, points: list[MetricPoint]) -> None:
        by_step: dict[int, dict[str, float]] = {}
        for p in points:
            by_step.setdefault(p.step, {"system/computewatch_tick": float(p.step)})[p.name] = (
                p.value
            )
        for _step, row in sorted(by_step.items()):
            if self.own:
                self._run.log(row)
            else:
                self._run.log(row, commit=False)

    def finish(self, record: FinalRecord) -> None:
        summary: dict[str, Any] = dict(record.metrics)
        summary.update(record.tags)
        if record.findings:
            summary["computewatch/findings"] = "\n".join(record.findings)
        self._run.summary.update(summary)

    def close(self) -> None:
        if self.own and self._run is not None:
            self._run.finish()
