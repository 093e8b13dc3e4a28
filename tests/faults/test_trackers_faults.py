"""Faults (issue 14): a tracker that raises or hangs never costs the job anything; a wrong
tracker name is one clear error with the choices."""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Any

import pytest

import computewatch
from computewatch.errors import UsageError
from computewatch.trackers import FinalRecord, MetricPoint, TrackerRun
from computewatch.trackers import logger as tracker_logger


class Hangs:
    """A tracker whose server never answers: every call blocks."""

    name = "hangs"

    def __init__(self) -> None:
        self.release = threading.Event()
        self.entered = threading.Event()

    def open(self, run: TrackerRun) -> None:
        self.entered.set()
        self.release.wait(60)

    def log(self, points: list[MetricPoint]) -> None:
        self.release.wait(60)

    def finish(self, record: FinalRecord) -> None:
        self.release.wait(60)

    def close(self) -> None:
        pass


class Raises(Hangs):
    name = "raises"

    def open(self, run: TrackerRun) -> None:
        raise ConnectionError("tracker server unreachable")


def test_a_hung_tracker_never_holds_the_training_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(tracker_logger.ENV_DEADLINE, "0.5")  # the end's bound, shortened
    hung = Hangs()
    with computewatch.track(name="hung", interval=0.2, gpu_backend="none",
                            log_to=[hung], db=tmp_path / "cw.db") as run:  # fmt: skip
        assert hung.entered.wait(30)  # the tracker is stuck from here on
        for _ in range(200):
            run.step(samples=1)  # appends: nothing waits for the tracker
    assert run.summary is not None and run.summary["steps"]["count"] == 200
    assert run.status == "completed"
    err = capfd.readouterr().err
    (line,) = [ln for ln in err.splitlines() if "tracker hangs" in ln]
    assert "given up at the run's end after 0.5 s: open still running after" in line
    hung.release.set()


def test_a_tracker_that_raises_is_disabled_with_one_line(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    with computewatch.track(name="raises", interval=0.2, gpu_backend="none",
                            log_to=[Raises()], db=tmp_path / "cw.db") as run:  # fmt: skip
        for _ in range(10):
            run.step()
    assert run.summary is not None and run.summary["steps"]["count"] == 10
    err = capfd.readouterr().err
    lines = [ln for ln in err.splitlines() if "tracker raises" in ln]
    assert lines == [
        "computewatch: warning: tracker raises disabled (open failed: ConnectionError: "
        "tracker server unreachable); the run goes on"
    ]


def test_unknown_tracker_names_are_errors_with_the_choices(cw: Any, tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="unknown tracker 'comet'; choose from mlflow, wandb, "):
        computewatch.track(log_to=["comet"])
    r = cw("run", "--log-to", "comet", "--", "true")
    assert r.returncode == 2
    assert "invalid choice: 'comet' (choose from 'mlflow', 'wandb', 'tensorboard', 'neptune')" in (
        r.stderr
    )
    assert "Traceback" not in r.stderr
    conf = tmp_path / "bad.toml"
    conf.write_text('[log_to]\ntrackers = ["comet"]\n')
    r = cw("run", "--config", str(conf), "--", "true")
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert "log_to.trackers" in r.stderr and "mlflow, wandb, tensorboard, neptune" in r.stderr


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_an_unusable_tracker_store_never_costs_the_job_its_status(
    cw: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "nosuchscheme://tracker")  # MLflow refuses it
    monkeypatch.setenv("COMPUTEWATCH_TRACKERS_DEADLINE", "120")  # time to import MLflow
    job = [sys.executable, "-c", "import time; time.sleep(0.5); raise SystemExit(3)"]
    r = cw("run", "--quiet", "--log-to", "mlflow", "--", *job)
    assert r.returncode == 3
    assert "tracker mlflow disabled" in r.stderr and "Traceback" not in r.stderr
    assert cw.show()["exit_code"] == 3
