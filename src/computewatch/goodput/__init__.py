"""Goodput across restarts and checkpoints: the runs of one training in time order, their time
split into productive step time and badput (initialization, data waits, checkpoint saves,
progress lost to a restart, gaps between runs, idle), and the checkpoint interval the measured
failure rate calls for (``computewatch goodput``; docs/diagnosis.md, "Goodput")."""

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from computewatch.goodput.json import GoodputJson, report_json
    from computewatch.goodput.local import lineage_runs, local_goodput, run_time
    from computewatch.goodput.model import (
        BADPUT,
        Breakdown,
        CheckpointAdvice,
        GoodputReport,
        RunGoodput,
        RunTime,
        RunTimeJson,
        goodput,
        run_time_from_json,
    )

# Names load their module on first use: the summary's types import goodput.model alone.
_HOME = {
    "GoodputJson": "json",
    "report_json": "json",
    "lineage_runs": "local",
    "local_goodput": "local",
    "run_time": "local",
    "BADPUT": "model",
    "Breakdown": "model",
    "CheckpointAdvice": "model",
    "GoodputReport": "model",
    "RunGoodput": "model",
    "RunTime": "model",
    "RunTimeJson": "model",
    "goodput": "model",
    "run_time_from_json": "model",
}


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{home}"), name)


__all__ = [
    "BADPUT",
    "Breakdown",
    "CheckpointAdvice",
    "GoodputJson",
    "GoodputReport",
    "RunGoodput",
    "RunTime",
    "RunTimeJson",
    "goodput",
    "lineage_runs",
    "local_goodput",
    "report_json",
    "run_time",
    "run_time_from_json",
]
