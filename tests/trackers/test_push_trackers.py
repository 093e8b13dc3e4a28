"""``computewatch push --trackers``: what a tracker did not receive during a run (a real
``mlflow server`` down at the run's end, one killed mid-run; W&B offline given up at the end)
is kept beside the store and delivered later, once, without duplicates."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import free_loopback_port

from .readback import wandb_finished, wandb_history, wandb_summary

pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings(
        "ignore::DeprecationWarning", "ignore::PendingDeprecationWarning", "ignore::FutureWarning"
    ),
]

SCRIPT = """
import os, sys, time
import computewatch

with computewatch.track(config={"lr": 0.1}) as run:
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


def _wait(pred: Any, what: str, timeout: float = 240.0) -> Any:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = pred()
        if got:
            return got
        time.sleep(0.25)
    raise AssertionError(f"timed out waiting for {what}")


class Server:
    """A real ``mlflow server`` on a fixed loopback port and SQLite file: started, killed and
    started again on the same store."""

    def __init__(self, d: Path) -> None:
        self.d = d
        self.port = free_loopback_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        log = (self.d / "server.log").open("a")
        self.proc = subprocess.Popen(
            [
                str(Path(sys.executable).with_name("mlflow")), "server", "--host", "127.0.0.1",
                "--port", str(self.port), "--workers", "1",
                "--backend-store-uri", f"sqlite:///{self.d / 'mlflow.db'}",
                "--artifacts-destination", str(self.d / "artifacts"),
            ],
            stdout=log, stderr=subprocess.STDOUT, cwd=self.d, start_new_session=True,
        )  # fmt: skip
        log.close()
        proc = self.proc

        def up() -> bool:
            assert proc.poll() is None, (self.d / "server.log").read_text()[-3000:]
            try:
                with urllib.request.urlopen(f"{self.uri}/health", timeout=2) as r:
                    return bool(r.status == 200)
            except OSError:
                return False

        _wait(up, "mlflow server to answer", timeout=280)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


@pytest.fixture
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    s = Server(tmp_path_factory.mktemp("mlflow-server"))
    yield s
    s.kill()


def _client(uri: str) -> Any:
    import mlflow

    return mlflow.MlflowClient(tracking_uri=uri)


def _only_run(client: Any, experiment: str) -> Any:
    exp = client.get_experiment_by_name(experiment)
    assert exp is not None
    (found,) = client.search_runs([exp.experiment_id])
    return found


def _points(client: Any, run_id: str) -> Counter[tuple[str, int]]:
    run = client.get_run(run_id)
    got: Counter[tuple[str, int]] = Counter()
    for key in run.data.metrics:
        for m in client.get_metric_history(run_id, key):
            got[(key, int(m.step))] += 1
    return got


def _backlog(cw: Any) -> list[Path]:
    return sorted((cw.home / "trackers").glob("*.json")) if (cw.home / "trackers").exists() else []


def test_a_server_down_at_the_end_gets_the_run_at_the_push(
    server: Server, cw: Any, tracker_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tracker_env / "train.py").write_text(SCRIPT)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", server.uri)  # nothing listens there yet
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "later")
    monkeypatch.setenv("COMPUTEWATCH_TRACKERS_DEADLINE", "20")
    r = cw.ok("run", "--interval", "0.3", "--log-to", "mlflow",
              "--", sys.executable, tracker_env / "train.py")  # fmt: skip
    (line,) = [ln for ln in r.stderr.splitlines() if "tracker mlflow" in ln]
    assert "refused the connection" in line and "computewatch push --trackers" in line, line
    summary = cw.show()
    assert len(_backlog(cw)) == 1
    server.start()
    monkeypatch.delenv("MLFLOW_TRACKING_URI")  # the push reads the run's own tracking URI
    monkeypatch.delenv("MLFLOW_EXPERIMENT_NAME")
    p = cw.ok("push", "--trackers")
    assert f"{summary['id']} mlflow: delivered" in p.stdout and "accounting" in p.stdout, p.stdout
    client = _client(server.uri)
    found = _only_run(client, "later")
    assert found.data.tags["computewatch.run_id"] == summary["id"]
    assert "computewatch/energy_kwh" in found.data.metrics
    assert found.info.status == "FINISHED"
    points = _points(client, found.info.run_id)
    ticks = {s for (k, s) in points if k == "computewatch/system/host_memory_usage_megabytes"}
    assert len(ticks) >= 3
    assert max(points.values()) == 1  # each metric once per step
    assert _backlog(cw) == []
    again = cw.ok("push", "--trackers", summary["id"])  # a second push sends nothing again
    assert "nothing kept for the trackers" in again.stdout
    assert _points(client, found.info.run_id) == points


def test_a_server_killed_mid_run_gets_the_rest_without_duplicates(
    server: Server, cw: Any, tracker_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.start()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", server.uri)
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "killed")
    monkeypatch.setenv("COMPUTEWATCH_TRACKERS_DEADLINE", "5")
    (tracker_env / "train.py").write_text(SCRIPT)
    go = tracker_env / "go"
    job = cw.popen("run", "--interval", "0.3", "--log-to", "mlflow",
                   "--", sys.executable, tracker_env / "train.py", go,
                   stderr=subprocess.PIPE)  # fmt: skip
    client = _client(server.uri)

    def logged() -> bool:
        exp = client.get_experiment_by_name("killed")
        runs = client.search_runs([exp.experiment_id]) if exp is not None else []
        return bool(runs and runs[0].data.metrics)

    _wait(logged, "the run's first points in MLflow")
    server.kill()
    time.sleep(1.5)  # a few ticks the server never sees
    go.touch()
    _, err = job.communicate(timeout=250)
    assert job.returncode == 0, err
    (line,) = [ln for ln in err.splitlines() if "tracker mlflow" in ln]
    assert "computewatch push --trackers" in line, line
    run_id = cw.show()["id"]
    server.start()  # the same store, up again
    p = cw.ok("push", "--trackers", run_id)
    assert f"{run_id} mlflow: delivered" in p.stdout, p.stdout
    found = _only_run(client, "killed")
    assert found.info.status == "FINISHED" and "computewatch/energy_kwh" in found.data.metrics
    points = _points(client, found.info.run_id)
    assert max(points.values()) == 1, [k for k, n in points.items() if n > 1]
    steps = sorted(
        {s for (k, s) in points if k == "computewatch/system/host_memory_usage_megabytes"}
    )
    assert steps == list(range(steps[0], steps[0] + len(steps)))  # no tick missing
    assert cw.ok("push", "--trackers").stdout.startswith("nothing kept")
    assert _points(client, found.info.run_id) == points


def test_wandb_given_up_at_the_end_gets_its_run_at_the_push(
    cw: Any, tracker_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tracker_env / "train.py").write_text(SCRIPT)
    monkeypatch.setenv("COMPUTEWATCH_TRACKERS_DEADLINE", "0")  # W&B's start takes seconds
    r = cw.ok("run", "--interval", "0.3", "--log-to", "wandb",
              "--", sys.executable, tracker_env / "train.py")  # fmt: skip
    (line,) = [ln for ln in r.stderr.splitlines() if "tracker wandb" in ln]
    assert "given up" in line and "computewatch push --trackers" in line, line
    run_id = cw.show()["id"]
    monkeypatch.setenv("COMPUTEWATCH_TRACKERS_DEADLINE", "120")
    p = cw.ok("push", "--trackers", "--json")
    (done,) = json.loads(p.stdout)
    assert done["run_id"] == run_id and done["tracker"] == "wandb" and done["delivered"]
    dirs = sorted((tracker_env / "wandb").glob("offline-run-*"))
    for d in dirs:
        wandb_finished(d)
    rows = [h for d in dirs for h in wandb_history(d) if "computewatch/tick" in h]
    ticks = [h["computewatch/tick"] for h in rows]
    assert len(ticks) >= 3 and len(ticks) == len(set(ticks))
    assert any(wandb_summary(d).get("computewatch.run_id") == run_id for d in dirs)
    assert "nothing kept" in cw.ok("push", "--trackers").stdout
