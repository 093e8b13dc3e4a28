"""Weights & Biases: the system series under ``computewatch/system/`` (apart from W&B's own
``system/`` monitor), the run's figures under ``computewatch/`` against ``computewatch/tick``,
the accounting, methods and findings in the run's summary, the hyperparameters in its config and
the code's ``git diff`` as the file ``computewatch_diff.patch``.

The run logged is ``wandb.run`` when the program has one (found on the thread that started the
tracking), else a new run named ``computewatch-<name>`` in ``WANDB_PROJECT`` (default
``computewatch``), in whatever mode W&B is configured for (``WANDB_MODE=offline`` writes
locally). In the user's own run the points are logged with ``commit=False``: they join the
user's next logged step and never move the step counter (W&B refuses steps that go back).
W&B's own monitor measures the process that starts the run: ``WandB(monitor=False)`` switches
it off where that process is not the job (``computewatch run``'s supervisor).
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from typing import Any

from computewatch.trackers.base import FinalRecord, MetricPoint, TrackerRun

__all__ = ["DIFF_FILE", "TICK_KEY", "WandB"]

TICK_KEY = "computewatch/tick"
"""The x-axis of our series: the sampler's tick number."""
DIFF_FILE = "computewatch_diff.patch"
"""The run's ``git diff HEAD`` among the W&B run's files."""


def _wandb() -> Any:
    # optional dependency, heavy to import: loaded on the logger thread only
    return importlib.import_module("wandb")


class WandB:
    """The W&B backend; ``run`` is a ``wandb`` run to log into (default: ``wandb.run``)."""

    name = "wandb"

    def __init__(
        self, run: Any = None, *, project: str | None = None, monitor: bool = True
    ) -> None:
        self.project = project
        self.monitor = monitor
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
                settings=wandb.Settings(x_disable_stats=not self.monitor, x_start_time=run.started),
            )
            self.own = True
            self._run.define_metric(TICK_KEY, hidden=True)
            self._run.define_metric("computewatch/*", step_metric=TICK_KEY)
        else:
            self._run.config.update({"computewatch_run_id": run.run_id}, allow_val_change=True)

    def log(self, points: list[MetricPoint]) -> None:
        by_step: dict[int, dict[str, float]] = {}
        for p in points:
            by_step.setdefault(p.step, {TICK_KEY: float(p.step)})[p.name] = p.value
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
        if self.own and record.config:
            self._run.config.update(record.config, allow_val_change=True)
        if record.diff:
            path = Path(self._run.dir) / DIFF_FILE
            path.write_text(record.diff)
            self._run.save(str(path), base_path=self._run.dir, policy="now")

    def close(self) -> None:
        if self.own and self._run is not None:
            self._run.finish()
