"""Weights & Biases: the system series under ``computewatch/system/`` (apart from W&B's own
``system/`` monitor), the run's figures under ``computewatch/`` against ``computewatch/tick``,
the accounting, methods and findings in the run's summary, the hyperparameters in its config and
the code's ``git diff`` as the file ``computewatch_diff.patch``.

The run logged is ``wandb.run`` when the program has one (found on the thread that started the
tracking), else a new run named ``computewatch-<name>`` in ``WANDB_PROJECT`` (default
``computewatch``), in whatever mode W&B is configured for (``WANDB_MODE=offline`` writes
locally). In the user's own run the points are logged with ``commit=False``: they join the
user's next logged step and never move the step counter (W&B refuses steps that go back), so
ticks between two of the user's steps leave only the last in that run; every tick also goes to
a companion run we start beside it (same project, group the user's run's group or id, job type
``computewatch``, its own ``computewatch/tick`` axis), linked both ways (config
``computewatch_user_run``, summary ``computewatch/system_run``).
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
        self,
        run: Any = None,
        *,
        project: str | None = None,
        monitor: bool = True,
        resume: str | None = None,
    ) -> None:
        self.project = project
        self.monitor = monitor
        self.resume = resume
        """A run id of ours to continue (``push --trackers``; W&B's ``resume="allow"``)."""
        self.own = False
        self._run: Any = run
        self._companion: Any = None
        """In the user's run: the run of ours every tick goes to (see the module's text)."""
        if run is None:
            mod = sys.modules.get("wandb")  # only when the program uses W&B: never imported here
            if mod is not None and getattr(mod, "run", None) is not None:
                self._run = mod.run

    def target(self) -> dict[str, object]:
        """What names the run our ticks go to (ours, or the companion of the user's), for
        ``push --trackers``."""
        mine = self._run if self.own else self._companion
        return {
            "run_id": getattr(mine, "id", None) if mine is not None else self.resume,
            "project": getattr(mine, "project", None) if mine is not None else self.project,
        }

    def open(self, run: TrackerRun) -> None:
        if self._run is None:
            wandb = _wandb()
            self._run = wandb.init(
                project=self.project or os.environ.get("WANDB_PROJECT") or "computewatch",
                id=self.resume,
                resume="allow" if self.resume else None,
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
            self._companion = self._start_companion(run)

    def _start_companion(self, run: TrackerRun) -> Any:
        wandb = _wandb()
        user = self._run
        companion = wandb.init(
            project=getattr(user, "project", None) or self.project
            or os.environ.get("WANDB_PROJECT") or "computewatch",
            name=f"{getattr(user, 'name', None) or run.display_name}-computewatch",
            group=getattr(user, "group", None) or getattr(user, "id", None),
            job_type="computewatch",
            config={"computewatch_run_id": run.run_id,
                    "computewatch_user_run": getattr(user, "id", None)},
            reinit="create_new",
            settings=wandb.Settings(x_disable_stats=True, x_start_time=run.started),
        )  # fmt: skip
        companion.define_metric(TICK_KEY, hidden=True)
        companion.define_metric("computewatch/*", step_metric=TICK_KEY)
        user.summary.update({"computewatch/system_run": getattr(companion, "id", None)})
        return companion

    def log(self, points: list[MetricPoint]) -> None:
        by_step: dict[int, dict[str, float]] = {}
        for p in points:
            by_step.setdefault(p.step, {TICK_KEY: float(p.step)})[p.name] = p.value
        rows = [row for _step, row in sorted(by_step.items())]
        if self.own:
            for row in rows:
                self._run.log(row)
            return
        if self._companion is not None:
            for row in rows:
                self._companion.log(row)
        if rows:  # the user's next step takes the newest: one row per step in their run
            self._run.log(rows[-1], commit=False)

    def finish(self, record: FinalRecord) -> None:
        summary: dict[str, Any] = dict(record.metrics)
        summary.update(record.tags)
        if record.findings:
            summary["computewatch/findings"] = "\n".join(record.findings)
        self._run.summary.update(summary)
        if self._companion is not None:
            self._companion.summary.update(summary)
        if self.own and record.config:
            self._run.config.update(record.config, allow_val_change=True)
        if record.diff:
            path = Path(self._run.dir) / DIFF_FILE
            path.write_text(record.diff)
            self._run.save(str(path), base_path=self._run.dir, policy="now")

    def close(self) -> None:
        if self._companion is not None:
            self._companion.finish()
            self._companion = None
        if self.own and self._run is not None:
            self._run.finish()
