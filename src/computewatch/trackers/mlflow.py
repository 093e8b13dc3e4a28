"""MLflow: system series as ``system/...`` metrics (MLflow's own naming), the run's figures
as ``computewatch/...`` metrics, how each was obtained as ``computewatch.*`` tags, and the
training compute and cost on registered model versions (the model registry).

The run logged is the user's active run (``mlflow.active_run()`` on the thread that started
the tracking, else ``MLFLOW_RUN_ID``), else a new run named ``computewatch-<name>`` in
``MLFLOW_EXPERIMENT_NAME`` (default: MLflow's default experiment). The tracking URI is MLflow's
own (``MLFLOW_TRACKING_URI``, ``mlflow.set_tracking_uri``).
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import socket
import sys
import time
from typing import Any
from urllib.parse import urlsplit

from computewatch.analysis.repro import flatten
from computewatch.analysis.summary_types import stored_summary
from computewatch.paths import resolve_db_path
from computewatch.store import Store
from computewatch.trackers.base import FinalRecord, MetricPoint, TrackerError, TrackerRun
from computewatch.trackers.final import final_record

__all__ = ["DIFF_ARTIFACT", "MLflow", "model_version_tags", "params_of", "tag_model_version"]

_BATCH = 1000  # MLflow's log_batch limit on metrics per call
_TAG_CHARS = 5000  # MLflow's limit on a tag value (8000 in recent versions; the lower one)
_PARAM_CHARS = 6000  # MLflow's limit on a param value (recent versions; 500 before 2.x)
_CONNECT_SECONDS = 2.0
DIFF_ARTIFACT = "computewatch/diff.patch"
"""Where the run's ``git diff HEAD`` lands among the MLflow run's artifacts."""
_STATUS = {"completed": "FINISHED", "failed": "FAILED", "interrupted": "KILLED"}


def _mlflow() -> Any:
    # heavy optional dependency (seconds to import): loaded on the logger thread only
    return importlib.import_module("mlflow")


class MLflow:
    """The MLflow backend. ``run_id``/``tracking_uri``/``experiment`` pick the run explicitly;
    by default the caller's active run is found when this object is made."""

    name = "mlflow"

    def __init__(
        self,
        run_id: str | None = None,
        *,
        tracking_uri: str | None = None,
        experiment: str | None = None,
        quiet: bool = False,
        own: bool = False,
        resume: bool = False,
    ) -> None:
        self.run_id = run_id
        self.resume = resume
        """True (``push --trackers``): the run may already hold some of the points; those it
        has (same metric, same step) are read back and not logged again."""
        self._have: dict[str, set[int]] = {}
        self.quiet = quiet
        """True: MLflow's own INFO lines ("Creating initial MLflow database tables...") are
        not printed. ``computewatch run`` sets it: its stderr is the job's."""
        self.tracking_uri = tracking_uri
        self.experiment = experiment
        self.own = own and run_id is not None
        """True when this backend started the MLflow run (and ends it); given with ``run_id``,
        a run computewatch started before (a backlog's), ended again at the close."""
        self._client: Any = None
        self._params: set[str] = set()
        self._ended: float | None = None
        self._status = "FINISHED"
        self._run: TrackerRun | None = None
        if run_id is None:
            # Only if the program already uses MLflow: its active run is thread-local, so it is
            # looked for here, on the caller's thread. Never imports mlflow.
            mod = sys.modules.get("mlflow")
            if mod is not None:
                active = mod.active_run()
                if active is not None:
                    self.run_id = active.info.run_id
                    self.tracking_uri = tracking_uri or mod.get_tracking_uri()

    @property
    def where(self) -> str:
        """The tracking URI, as the lines about this backend name it."""
        # never asks mlflow: the module may be half imported on the delivery thread
        return self.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI", "")

    def target(self) -> dict[str, object]:
        """What names this backend's run, for ``push --trackers``."""
        return {
            "run_id": self.run_id,
            "tracking_uri": self.where or None,
            "experiment": self.experiment or os.environ.get("MLFLOW_EXPERIMENT_NAME"),
            "own": self.own,
        }

    def open(self, run: TrackerRun) -> None:
        self._run = run
        _refused(self.where)  # a server that refuses: said at once, not after MLflow's retries
        mlflow = _mlflow()
        if self.quiet:  # MLflow configures its logger when imported: adjusted after that
            logger = logging.getLogger("mlflow")
            logger.setLevel(max(logger.getEffectiveLevel(), logging.WARNING))
        client = mlflow.MlflowClient(tracking_uri=self.tracking_uri)
        self._client = client
        if self.run_id is None and os.environ.get("MLFLOW_RUN_ID"):
            self.run_id = os.environ["MLFLOW_RUN_ID"]
        tags = {"computewatch.run_id": run.run_id, **_clip(run.tags, "computewatch.tag.")}
        if self.run_id is None:
            name = self.experiment or os.environ.get("MLFLOW_EXPERIMENT_NAME")
            exp_id = os.environ.get("MLFLOW_EXPERIMENT_ID") or "0"
            if name:
                exp = client.get_experiment_by_name(name)
                exp_id = exp.experiment_id if exp is not None else client.create_experiment(name)
            tags["mlflow.source.type"] = "LOCAL"
            created = client.create_run(
                exp_id,
                start_time=int(run.started * 1000),  # the run's start, not this call's
                tags=tags,
                run_name=run.display_name,
            )
            self.run_id = created.info.run_id
            self.own = True
            self._log_params(run.config)
        elif self.own:  # a run of ours from before (a backlog's): tagged when it was made
            pass
        else:
            for k, v in tags.items():
                client.set_tag(self.run_id, k, v)

    def _log_params(self, config: dict[str, object]) -> None:
        """The run's hyperparameters as params (nested keys dotted: ``opt.name``), each once:
        MLflow's params cannot change."""
        entities = importlib.import_module("mlflow.entities")
        items = [
            entities.Param(k, v) for k, v in params_of(config).items() if k not in self._params
        ]
        for i in range(0, len(items), 100):
            self._client.log_batch(self.run_id, params=items[i : i + 100])
        self._params.update(p.key for p in items)

    def _missing(self, keyed: list[tuple[str, int]]) -> list[bool]:
        """For ``resume``: whether the run lacks each (metric, step), its history read once
        per metric."""
        for key in {k for k, _ in keyed} - self._have.keys():
            history = self._client.get_metric_history(self.run_id, key)
            self._have[key] = {int(m.step) for m in history}
        return [step not in self._have[key] for key, step in keyed]

    def log(self, points: list[MetricPoint]) -> None:
        entities = importlib.import_module("mlflow.entities")
        if self.resume:
            missing = self._missing([(p.name, p.step) for p in points])
            points = [p for p, m in zip(points, missing, strict=True) if m]
        metrics = [entities.Metric(p.name, p.value, int(p.wall * 1000), p.step) for p in points]
        for i in range(0, len(metrics), _BATCH):
            self._client.log_batch(self.run_id, metrics=metrics[i : i + _BATCH])

    def finish(self, record: FinalRecord) -> None:
        entities = importlib.import_module("mlflow.entities")
        client = self._client
        tags = dict(record.tags)
        if record.findings:
            tags["computewatch.findings"] = "\n".join(record.findings)
        if self.own:
            self._log_params(record.config)  # `run --log-to`: user code declared them later
            if record.git_commit:
                tags["mlflow.source.git.commit"] = record.git_commit
            if record.source_name:
                tags["mlflow.source.name"] = record.source_name
        else:  # the user's run: MLflow's own source tags when it set them
            have = client.get_run(self.run_id).data.tags
            if record.git_commit and "mlflow.source.git.commit" not in have:
                tags["mlflow.source.git.commit"] = record.git_commit
        at = int((record.ended or time.time()) * 1000)
        figures = dict(record.metrics)
        if self.resume:
            missing = self._missing([(k, 0) for k in figures])
            figures = {k: v for (k, v), m in zip(figures.items(), missing, strict=True) if m}
        client.log_batch(
            self.run_id,
            metrics=[entities.Metric(k, v, at, 0) for k, v in figures.items()],
            tags=[entities.RunTag(k, v[:_TAG_CHARS]) for k, v in tags.items()],
        )
        if record.diff:
            client.log_text(self.run_id, record.diff, DIFF_ARTIFACT)
        # The model registry: versions registered from this MLflow run carry its compute.
        versions = client.search_model_versions(f"run_id='{self.run_id}'")
        for mv in versions:
            for k, v in model_version_tags(record).items():
                client.set_model_version_tag(mv.name, mv.version, k, v)
        self._ended = record.ended
        self._status = _STATUS.get(record.status, "FINISHED")

    def close(self) -> None:
        if self.own and self._client is not None:
            self._client.set_terminated(
                self.run_id,
                status=self._status,
                end_time=int((self._ended or time.time()) * 1000),  # the run's end, not now
            )


def params_of(config: dict[str, object]) -> dict[str, str]:
    """Hyperparameters as MLflow params: nested keys dotted (``{"opt": {"lr": 1}}`` →
    ``opt.lr = "1"``), lists as JSON, names and values clipped to MLflow's limits."""
    out: dict[str, str] = {}
    for k, v in flatten(config).items():
        text = json.dumps(v) if isinstance(v, list | dict | bool) or v is None else str(v)
        out[k[:250]] = text[:_PARAM_CHARS]
    return out


def _refused(uri: str) -> None:
    """Raise a :class:`TrackerError` when the HTTP tracking server at ``uri`` refuses a
    connection (nothing listens); a server that is slow to accept is left to MLflow."""
    parts = urlsplit(uri)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
        socket.create_connection((parts.hostname, port), timeout=_CONNECT_SECONDS).close()
    except ConnectionRefusedError as e:
        raise TrackerError(f"the MLflow server at {uri} refused the connection ({e})") from e
    except (OSError, ValueError):
        return


def _now_ms() -> int:
    return int(time.time() * 1000)


def _clip(values: dict[str, str], prefix: str) -> dict[str, str]:
    return {f"{prefix}{k}"[:250]: str(v)[:_TAG_CHARS] for k, v in values.items()}


def model_version_tags(record: FinalRecord) -> dict[str, str]:
    """The tags a registered model version gets from the run that trained it: the training
    compute and cost, each with how it was obtained (``computewatch.energy_kwh`` = ``0.52``,
    ``computewatch.energy_kwh.method`` = ``measured`` ...)."""
    out: dict[str, str] = {}
    for key, value in record.metrics.items():
        short = key.removeprefix("computewatch/")
        out[f"computewatch.{short}"] = f"{value:.6g}"
    for key, text in record.tags.items():
        if not key.startswith("computewatch.finding"):
            out[key] = text[:_TAG_CHARS]
    return out


def tag_model_version(
    name: str,
    version: str | int,
    run: str,
    *,
    db: str | os.PathLike[str] | None = None,
    tracking_uri: str | None = None,
) -> dict[str, str]:
    """Tag version ``version`` of the registered model ``name`` with the training compute and
    cost of the computewatch run ``run`` (an id, id prefix, name or ``last``; several runs:
    call once per run, the last one's tags win). Returns the tags set."""
    with Store.open_readonly(resolve_db_path(db)) as store:
        row = store.find_run(run)
        if row.summary is None:
            raise TrackerError(f"run {row.id} has no summary yet (still running?)")
        record = final_record(stored_summary(row.summary), row.status)
    tags = model_version_tags(record)
    client = _mlflow().MlflowClient(tracking_uri=tracking_uri)
    for k, v in tags.items():
        client.set_model_version_tag(name, str(version), k, v)
    return tags
