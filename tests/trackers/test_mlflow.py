"""MLflow, for real: a SQLite tracking store and model registry in tmp_path, runs searched back
through MlflowClient."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

import computewatch
from computewatch.trackers.mlflow import tag_model_version

from .conftest import TRAIN, train_until_ticks

# MLflow's own deprecation and pydantic warnings, raised as errors under pytest's settings
pytestmark = pytest.mark.filterwarnings(
    "ignore::DeprecationWarning", "ignore::PendingDeprecationWarning", "ignore::FutureWarning"
)


@pytest.fixture(scope="module")
def mlflow_db(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One SQLite tracking store and registry for the module (creating one takes seconds)."""
    return f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"


@pytest.fixture
def mlflow(mlflow_db: str, monkeypatch: pytest.MonkeyPatch, request: Any) -> Any:
    """MLflow on the module's store, each test in an experiment of its own."""
    import mlflow as mlflow_module  # seconds to import: once for the module

    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_db)
    mlflow_module.set_tracking_uri(mlflow_db)
    name = request.node.name
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", name)
    mlflow_module.set_experiment(name)
    return mlflow_module


def request_name(mlflow: Any) -> str:
    """The test's experiment (the fixture's MLFLOW_EXPERIMENT_NAME)."""
    import os

    return os.environ["MLFLOW_EXPERIMENT_NAME"]


def _train(run: computewatch.Run) -> None:
    assert run.db_path is not None
    train_until_ticks(run, run.db_path)


def _metric_keys(client: Any, run_id: str) -> dict[str, float]:
    return dict(client.get_run(run_id).data.metrics)


def test_track_logs_into_the_users_active_run(mlflow: Any, tracker_env: Path) -> None:
    with mlflow.start_run(run_name="users-run") as active:
        mlflow.log_param("user_param", 1)
        with computewatch.track(
            name="ft", interval=0.2, gpu_backend="fake:1xH100-SXM", log_to=["mlflow"],
            db=tracker_env / "cw.db", config={"lr": 3e-4},
        ) as run:  # fmt: skip
            _train(run)
    client = mlflow.MlflowClient()
    data = client.get_run(active.info.run_id).data
    assert data.params == {"user_param": "1"}  # ours are not forced into the user's params
    assert data.tags["computewatch.run_id"] == run.id
    metrics = data.metrics
    assert metrics["computewatch/system/gpu_0_utilization_percentage"] > 0  # the simulated H100
    assert "computewatch/system/cpu_utilization_percentage" in metrics
    assert metrics["computewatch/system/process_memory_rss_megabytes"] > 1
    assert metrics["computewatch/steps_per_second"] > 0
    history = client.get_metric_history(
        active.info.run_id, "computewatch/system/gpu_0_power_usage_watts"
    )
    assert len(history) >= 2 and len({h.step for h in history}) == len(history)
    # the end: the accounting, each figure with its method, and the run's findings
    assert run.summary is not None
    energy = run.summary["energy"]["facility"]
    assert metrics["computewatch/energy_kwh"] == pytest.approx(energy["value"])
    assert data.tags["computewatch.energy_kwh.method"] == energy["method"]
    assert metrics["computewatch/co2e_grams"] > 0
    assert data.tags["computewatch.co2e_grams.method"] == "modeled"
    assert data.tags["computewatch.flops.method"] == "estimated"
    assert data.tags["computewatch.status"] == "completed"
    assert "computewatch.finding.1" in data.tags
    assert client.search_runs([active.info.experiment_id], max_results=10)[0].info.run_id == (
        active.info.run_id
    )  # no second run was made
    assert len(client.search_runs([active.info.experiment_id])) == 1


def test_a_new_run_named_after_ours_and_registry_tags(mlflow: Any, tracker_env: Path) -> None:
    assert mlflow.active_run() is None
    with computewatch.track(
        name="pretrain", interval=0.2, gpu_backend="fake:1xH100-SXM", log_to=["mlflow"],
        db=tracker_env / "cw.db", config={"lr": 3e-4, "token": "abc"},
    ) as run:  # fmt: skip
        _train(run)
    client = mlflow.MlflowClient()
    exp = client.get_experiment_by_name(request_name(mlflow)).experiment_id
    (found,) = client.search_runs([exp])
    assert found.info.run_name == "computewatch-pretrain"
    assert found.info.status == "FINISHED"
    assert found.data.params == {"lr": "0.0003", "token": "***"}  # redacted before it left
    assert found.data.metrics["computewatch/energy_kwh"] > 0

    # The model registry: a version registered from a run, tagged with what trained it.
    client.create_registered_model("tiny")  # the registry: one per module store
    mv = client.create_model_version("tiny", "runs:/x/model", run_id=found.info.run_id)
    tags = tag_model_version("tiny", mv.version, run.id, db=tracker_env / "cw.db")
    got = client.get_model_version("tiny", mv.version).tags
    assert got == tags
    assert float(got["computewatch.energy_kwh"]) == pytest.approx(
        found.data.metrics["computewatch/energy_kwh"], rel=1e-5
    )
    assert run.summary is not None
    assert got["computewatch.energy_kwh.method"] == run.summary["energy"]["facility"]["method"]
    assert got["computewatch.run_id"] == run.id


def test_versions_registered_from_the_run_are_tagged_at_its_end(
    mlflow: Any, tracker_env: Path
) -> None:
    client = mlflow.MlflowClient()
    client.create_registered_model("clf")
    with mlflow.start_run() as active, computewatch.track(
        name="fit", interval=0.2, gpu_backend="none", log_to=["mlflow"],
        db=tracker_env / "cw.db",
    ) as run:  # fmt: skip
        _train(run)
        mv = client.create_model_version("clf", "runs:/y/model", run_id=active.info.run_id)
    tags = client.get_model_version("clf", mv.version).tags
    assert tags["computewatch.run_id"] == run.id
    assert tags["computewatch.energy_kwh.method"] == "modeled"  # no GPU: CPU and memory modeled
    assert float(tags["computewatch.energy_kwh"]) > 0


@pytest.mark.slow
def test_run_log_to_mlflow_from_the_cli(mlflow: Any, cw: Any, tracker_env: Path) -> None:
    script = tracker_env / "train.py"
    script.write_text(TRAIN)
    r = cw.ok("run", "--quiet", "--name", "cli-train", "--log-to", "mlflow", "--interval", "0.2",
              "--gpu-backend", "fake:1xH100-SXM", "--", sys.executable, script, "")  # fmt: skip
    assert "Traceback" not in r.stderr
    # the run made the MLflow store; MLflow's INFO lines about it stay out of the job's stderr
    assert "INFO mlflow" not in r.stderr, r.stderr
    summary = cw.show()
    client = mlflow.MlflowClient()
    exp = client.get_experiment_by_name(request_name(mlflow)).experiment_id
    (found,) = client.search_runs([exp])
    assert found.info.run_name == "computewatch-cli-train"
    assert found.data.tags["computewatch.run_id"] == summary["id"]
    assert found.data.metrics["computewatch/system/gpu_0_utilization_percentage"] > 0
    assert found.data.metrics["computewatch/steps_per_second"] > 0
    assert found.data.metrics["computewatch/energy_kwh"] == pytest.approx(
        summary["energy"]["facility"]["value"]
    )
    # the reproducibility record came along with the run
    assert summary["config"] == {"api_key": "***", "batch": 32, "lr": 0.01}
    assert summary["environment"]["argv"][-2:] == [str(script), ""]
