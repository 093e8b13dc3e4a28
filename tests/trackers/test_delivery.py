"""Delivery to the trackers as a run really meets them: a real ``mlflow server`` on a loopback
port (one that answers, one that refuses, one that never answers, one killed mid-run), W&B
offline, TensorBoard read back with its own reader. Each tracker has its own thread and the
run's end one deadline; what lands is the run's own, under names of ours."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tests.conftest import free_loopback_port

from .readback import wandb_config, wandb_finished, wandb_history, wandb_records, wandb_summary

pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings(
        "ignore::DeprecationWarning", "ignore::PendingDeprecationWarning", "ignore::FutureWarning"
    ),
]

SCRIPT = """
import os, sys, time
import computewatch

with computewatch.track(config={"lr": 0.1, "opt": {"name": "adam", "betas": [0.9, 0.99]},
                                "api_key": "s3cret"}) as run:
    go = sys.argv[1] if len(sys.argv) > 1 else ""
    end = time.monotonic() + 600
    n = 0
    while time.monotonic() < end:
        time.sleep(0.05)
        run.step(samples=8)
        n += 1
        if (go and os.path.exists(go)) or (not go and n >= 40):
            break
"""
"""A training loop: 40 steps of 50 ms, or until the file named by its argument appears."""


def _repo(root: Path) -> tuple[Path, str]:
    repo = root / "proj"
    repo.mkdir()
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.org"]
    subprocess.run([*git, "init", "-q", "-b", "main"], cwd=repo, check=True)
    (repo / "train.py").write_text(SCRIPT)
    subprocess.run([*git, "add", "."], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "x"], cwd=repo, check=True)
    commit = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=repo, check=True, capture_output=True, text=True
    ).stdout.strip()
    (repo / "train.py").write_text(SCRIPT + "\nHF_TOKEN = 'hf_planted'\n")
    return repo, commit


def _wait(pred: Any, what: str, timeout: float = 240.0) -> Any:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = pred()
        if got:
            return got
        time.sleep(0.25)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Any]]:
    """A real ``mlflow server`` (SQLite store, proxied artifacts) on a free loopback port;
    the module's last test kills it."""
    d = tmp_path_factory.mktemp("mlflow-server")
    port = free_loopback_port()
    log = (d / "server.log").open("w")
    proc = subprocess.Popen(
        [
            str(Path(sys.executable).with_name("mlflow")), "server", "--host", "127.0.0.1",
            "--port", str(port), "--workers", "1",
            "--backend-store-uri", f"sqlite:///{d / 'mlflow.db'}",
            "--artifacts-destination", str(d / "artifacts"),
        ],
        stdout=log, stderr=subprocess.STDOUT, cwd=d, start_new_session=True,
    )  # fmt: skip
    uri = f"http://127.0.0.1:{port}"

    def up() -> bool:
        assert proc.poll() is None, (d / "server.log").read_text()[-3000:]
        try:
            with urllib.request.urlopen(f"{uri}/health", timeout=2) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    _wait(up, "mlflow server to answer", timeout=280)
    yield uri, proc
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    log.close()


def _client(uri: str) -> Any:
    import mlflow

    return mlflow.MlflowClient(tracking_uri=uri)


def _only_run(client: Any, experiment: str) -> Any:
    exp = client.get_experiment_by_name(experiment)
    assert exp is not None
    (found,) = client.search_runs([exp.experiment_id])
    return found


def _tensorboard(log_dir: Path) -> EventAccumulator:
    acc = EventAccumulator(str(log_dir), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    return acc


def test_mlflow_server_gets_the_record_params_times_and_diff(
    mlflow_server: tuple[str, Any], cw: Any, tracker_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri, _ = mlflow_server
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "record")
    repo, commit = _repo(tracker_env)
    cw.ok("run", "--quiet", "--interval", "0.3", "--log-to", "mlflow", "--",
          sys.executable, "train.py", cwd=repo)  # fmt: skip
    summary = cw.show()
    client = _client(uri)
    found = _only_run(client, "record")
    # the hyperparameters `show` lists, nested keys dotted, a secret redacted
    assert found.data.params == {
        "lr": "0.1", "opt.name": "adam", "opt.betas": "[0.9, 0.99]", "api_key": "***",
    }  # fmt: skip
    tags = found.data.tags
    assert tags["mlflow.source.git.commit"] == commit
    assert tags["mlflow.source.name"].endswith("train.py")
    # the run's real start and end: every point inside them
    rss = client.get_metric_history(
        found.info.run_id, "computewatch/system/process_memory_rss_megabytes"
    )
    assert len(rss) >= 2
    assert found.info.start_time <= min(m.timestamp for m in rss)
    assert found.info.end_time >= max(m.timestamp for m in rss)
    started = summary["started_at"]
    assert abs(found.info.start_time / 1000 - _unix(started)) < 0.01
    # the last tick (the job gone) logs no 0 MB
    assert max(rss, key=lambda m: m.step).value > 1
    # the diff as an artifact, redacted
    path = client.download_artifacts(found.info.run_id, "computewatch/diff.patch", str(tracker_env))
    patch = Path(path).read_text()
    assert "+HF_TOKEN = ***" in patch and "hf_planted" not in patch
    assert not any(k.startswith("system/") for k in found.data.metrics)


def _unix(text: str) -> float:
    import datetime as dt

    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def test_a_server_that_refuses_is_named_at_once_and_starves_no_other(
    cw: Any, tracker_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tracker_env / "train.py").write_text(SCRIPT)
    port = free_loopback_port()  # nothing listens there
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("COMPUTEWATCH_TRACKERS_DEADLINE", "20")
    r = cw.ok("run", "--interval", "0.3", "--log-to", "mlflow", "--log-to", "tensorboard",
              "--", sys.executable, tracker_env / "train.py")  # fmt: skip
    lines = [ln for ln in r.stderr.splitlines() if "tracker mlflow" in ln]
    assert len(lines) == 1, r.stderr
    assert f"127.0.0.1:{port} refused the connection" in lines[0]
    acc = _tensorboard(tracker_env / "tb")
    assert "computewatch/energy_kwh" in acc.Tags()["scalars"]  # the accounting arrived


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections (the kernel's backlog) and never answers."""
    with socket.socket() as s:
        port = free_loopback_port()
        s.bind(("127.0.0.1", port))
        s.listen(64)
        yield port


def test_a_server_that_never_answers_is_given_up_at_the_deadline(
    cw: Any, tracker_env: Path, monkeypatch: pytest.MonkeyPatch, silent_port: int
) -> None:
    (tracker_env / "train.py").write_text(SCRIPT)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://127.0.0.1:{silent_port}")
    # long enough for W&B and TensorBoard to start on a loaded machine (seconds each): MLflow,
    # which never gets an answer, is still given up at it
    monkeypatch.setenv("COMPUTEWATCH_TRACKERS_DEADLINE", "45")
    r = cw.ok("run", "--interval", "0.3", "--log-to", "mlflow", "--log-to", "tensorboard",
              "--log-to", "wandb", "--", sys.executable, tracker_env / "train.py")  # fmt: skip
    lines = [ln for ln in r.stderr.splitlines() if "tracker mlflow" in ln]
    assert len(lines) == 1, r.stderr
    assert "given up at the run's end after 45 s" in lines[0]
    assert "still running after" in lines[0] and f"(http://127.0.0.1:{silent_port})" in lines[0]
    assert "not delivered" in lines[0]
    assert "trackers did not finish in time" not in r.stderr
    # the others had threads of their own: every tick and the accounting
    summary = cw.show()
    acc = _tensorboard(tracker_env / "tb")
    tags = acc.Tags()["scalars"]
    assert "computewatch/energy_kwh" in tags
    ticks = {e.step for e in acc.Scalars("computewatch/system/host_memory_usage_megabytes")}
    assert len(ticks) >= 3
    (run_dir,) = (tracker_env / "wandb").glob("offline-run-*")
    wandb_finished(run_dir)
    assert wandb_summary(run_dir).get("computewatch.run_id") == summary["id"], r.stderr
    assert len([h for h in wandb_history(run_dir) if "computewatch/tick" in h]) >= 3


def test_track_block_names_the_tracker_it_gave_up(
    tracker_env: Path, monkeypatch: pytest.MonkeyPatch, silent_port: int
) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://127.0.0.1:{silent_port}")
    monkeypatch.setenv("COMPUTEWATCH_TRACKERS_DEADLINE", "15")
    code = (
        "import time, computewatch\n"
        "with computewatch.track(interval=0.2, log_to=['mlflow', 'tensorboard'],\n"
        "                        db='cw.db') as r:\n"
        "    for _ in range(20):\n"
        "        time.sleep(0.05); r.step()\n"
        "print('after the block', flush=True)\n"
    )
    p = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=250, check=False
    )
    assert p.returncode == 0, p.stderr
    assert "after the block" in p.stdout
    (line,) = [ln for ln in p.stderr.splitlines() if "tracker mlflow" in ln]
    assert "given up at the run's end after 15 s" in line and str(silent_port) in line
    assert "computewatch/energy_kwh" in _tensorboard(tracker_env / "tb").Tags()["scalars"]


def test_wandb_gets_the_config_and_no_monitor_of_the_supervisor(cw: Any, tracker_env: Path) -> None:
    repo, _ = _repo(tracker_env)
    cw.ok("run", "--quiet", "--interval", "0.3", "--log-to", "wandb", "--",
          sys.executable, "train.py", cwd=repo)  # fmt: skip
    (run_dir,) = (tracker_env / "wandb").glob("offline-run-*")
    wandb_finished(run_dir)
    config = wandb_config(run_dir)
    assert config["lr"] == 0.1 and config["opt"] == {"name": "adam", "betas": [0.9, 0.99]}
    assert config["api_key"] == "***"
    kinds = {r.WhichOneof("record_type") for r in wandb_records(run_dir)}
    assert "stats" not in kinds  # W&B's monitor would measure computewatch's supervisor
    patch = next(Path(run_dir).rglob("computewatch_diff.patch")).read_text()
    assert "+HF_TOKEN = ***" in patch and "hf_planted" not in patch


def test_tensorboard_series_are_the_runs_own(cw: Any, tracker_env: Path) -> None:
    """A sleeping job: its tree's CPU is about nothing whatever the rest of the machine does,
    and the last tick, with the job gone, logs no 0 MB of memory."""
    cw.ok("run", "--quiet", "--interval", "0.5", "--log-to", "tensorboard", "--", "sleep", "3")
    acc = _tensorboard(tracker_env / "tb")
    tags = acc.Tags()["scalars"]
    assert all(t.startswith("computewatch/") for t in tags), tags
    cpu = [e.value for e in acc.Scalars("computewatch/system/cpu_utilization_percentage")]
    assert cpu and max(cpu) < 20.0, cpu
    rss = acc.Scalars("computewatch/system/process_memory_rss_megabytes")
    assert max(rss, key=lambda e: e.step).value > 0.1


def test_a_server_killed_mid_run_is_given_up_at_the_deadline(
    mlflow_server: tuple[str, Any], cw: Any, tracker_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Last in the module: it kills the module's server."""
    uri, proc = mlflow_server
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "killed")
    monkeypatch.setenv("COMPUTEWATCH_TRACKERS_DEADLINE", "20")
    (tracker_env / "train.py").write_text(SCRIPT)
    go = tracker_env / "go"
    job = cw.popen("run", "--interval", "0.3", "--log-to", "mlflow", "--log-to", "tensorboard",
                   "--", sys.executable, tracker_env / "train.py", go,
                   stderr=subprocess.PIPE)  # fmt: skip
    client = _client(uri)

    def logged() -> bool:
        exp = client.get_experiment_by_name("killed")
        runs = client.search_runs([exp.experiment_id]) if exp is not None else []
        return bool(runs and runs[0].data.metrics)

    _wait(logged, "the run's first points in MLflow")
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    go.touch()
    _, err = job.communicate(timeout=250)
    assert job.returncode == 0, err
    (line,) = [ln for ln in err.splitlines() if "tracker mlflow" in ln]
    assert ("given up at the run's end" in line and f"({uri})" in line) or "failed" in line, line
    assert "computewatch/energy_kwh" in _tensorboard(tracker_env / "tb").Tags()["scalars"]
