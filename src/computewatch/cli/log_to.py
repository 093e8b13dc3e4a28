"""``computewatch run --log-to mlflow|wandb|tensorboard|neptune``: the run logged into the
experiment trackers the user already has (docs/trackers.md).

The flag lives here (argparse only: ``--help`` loads nothing else); :func:`tracker_observers`
makes the sampler's observer when the run starts.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: the sampling side loads when a run starts
    from computewatch.config import Config
    from computewatch.sampling.observers import RunObserver

__all__ = ["CHOICES", "add_log_to_argument", "tracker_observers"]

CHOICES = ("mlflow", "wandb", "tensorboard", "neptune")
"""computewatch.config.TRACKERS, spelled out so that the parser imports nothing
(tests/trackers check that they agree)."""


def add_log_to_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--log-to",
        action="append",
        choices=CHOICES,
        default=[],
        metavar="TRACKER",
        help="also log the run's system series, steps, accounting and findings into this "
        f"experiment tracker ({', '.join(CHOICES)}; repeatable; default: the configuration's "
        "[log_to] trackers; docs/trackers.md)",
    )


def tracker_observers(args: argparse.Namespace, config: Config) -> list[RunObserver]:
    """The trackers' observer for ``run``: ``--log-to`` else ``[log_to] trackers``; none
    without either (the trackers' modules are not loaded)."""
    names = list(getattr(args, "log_to", None) or []) or list(config.log_to)
    if not names:
        return []
    # only with trackers: the backends' modules (each tool loads on the logger's thread)
    from computewatch.sampling.tracker_feed import TrackerObserver
    from computewatch.trackers import MLflow, TrackerBackend, WandB, backends_for
    from computewatch.trackers.base import check_names

    specs: list[str | TrackerBackend] = []
    for n in check_names(names, "--log-to"):
        if n == "mlflow":  # MLflow's INFO lines would land in the job's output (its stderr)
            specs.append(MLflow(quiet=True))
        elif n == "wandb":  # W&B's monitor would measure this supervisor, not the job
            specs.append(WandB(monitor=False))
        else:
            specs.append(n)
    # what a tracker does not receive is kept beside the run's store (push --trackers); the
    # module loads with --log-to only (start-up time)
    from computewatch.paths import resolve_db_path

    db = resolve_db_path(getattr(args, "db", None))
    return [TrackerObserver(backends_for(specs, "--log-to"), db_path=db)]
