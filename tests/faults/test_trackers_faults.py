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


# -- push --trackers: bad input and what cannot be kept ---------------------------------------


class RefusesMLflow(Raises):
    """A tracker named as a tool (so what it misses is kept) whose server refuses."""

    name = "mlflow"


def test_what_cannot_be_kept_is_dropped_with_a_count(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    said: list[str] = []
    blocked = tmp_path / "trackers"
    blocked.write_text("a file where the backlog's folder would be")  # root cannot mkdir either
    logger = tracker_logger.TrackerLogger(
        [RefusesMLflow()], TrackerRun("r1", "x"), keep_path=blocked / "r1.json",
        warn=said.append, deadline=10, backlog_cap=5,
    ).start()  # fmt: skip
    logger.points([MetricPoint("computewatch/steps_per_second", 1.0, i, 0.0) for i in range(12)])
    assert logger.finish(None, "completed")
    assert any("kept for `computewatch push --trackers r1`" in s for s in said), said
    (line,) = [s for s in said if "could not be kept" in s]
    assert line.startswith("tracker mlflow: 5 point(s) and the run's accounting could not be kept")
    assert "dropped" in line and "FileExistsError" in line

    said.clear()
    logger = tracker_logger.TrackerLogger(
        [RefusesMLflow()], TrackerRun("r2", "x"), keep_path=tmp_path / "ok" / "r2.json",
        warn=said.append, deadline=10, backlog_cap=5,
    ).start()  # fmt: skip
    logger.points([MetricPoint("computewatch/steps_per_second", 1.0, i, 0.0) for i in range(12)])
    logger.finish(None, "completed")
    assert logger.kept["mlflow"].dropped == 7 and len(logger.kept["mlflow"].points) == 5
    assert [i.step for i in logger.kept["mlflow"].points] == [7, 8, 9, 10, 11]  # the newest
    assert any("7 older point(s) beyond the backlog's cap of 5 dropped" in s for s in said), said


def test_push_trackers_bad_input_is_one_line(cw: Any) -> None:
    r = cw("push", "--trackers")
    assert r.returncode == 1 and "no runs recorded yet" in r.stderr
    cw.ok("run", "--quiet", "--", "true")  # a run logged to no tracker
    for args, code, text in [
        (("nosuchrun",), 1, "nosuchrun"),
        (("--server", "http://127.0.0.1:9"), 2, "drop --server"),
        (("--all",), 2, "drop --all"),
    ]:
        r = cw("push", "--trackers", *args)
        assert r.returncode == code, (args, r.stderr)
        assert text in r.stderr and "Traceback" not in r.stderr
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    r = cw.ok("push", "--trackers", "last")  # no tracker configured: nothing to deliver
    assert r.stdout.strip().endswith("nothing kept for the trackers")
    r = cw.ok("push", "--trackers")
    assert r.stdout.strip() == "nothing kept for the trackers: every tracker received its runs"


@pytest.mark.slow
def test_push_trackers_to_a_tracker_still_down_keeps_it(
    cw: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.conftest import free_loopback_port

    port = free_loopback_port()  # nothing listens there, now or at the push
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("COMPUTEWATCH_TRACKERS_DEADLINE", "20")
    cw.ok("run", "--quiet", "--interval", "0.2", "--log-to", "mlflow", "--", "sleep", "1")
    run_id = cw.show()["id"]
    (kept,) = (cw.home / "trackers").glob("*.json")
    for _ in range(2):
        r = cw("push", "--trackers")
        assert r.returncode == 1, r.stderr
        assert "Traceback" not in r.stderr
        (line,) = r.stdout.splitlines()
        assert line.startswith(f"{run_id} mlflow: not delivered (TrackerError: the MLflow server")
        assert f"127.0.0.1:{port} refused the connection" in line
        assert "point(s) and the run's accounting kept for the next" in line
        assert "stays kept" in r.stderr
        assert kept.exists()
