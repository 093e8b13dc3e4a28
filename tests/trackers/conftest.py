"""The real trackers, offline: W&B in offline mode, Neptune in offline mode, MLflow on a SQLite
file, TensorBoard event files, all under the test's tmp_path. No network."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from tests.track_waits import stored_ticks


@pytest.fixture(autouse=True)
def tracker_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every tool pointed at tmp_path, offline, quiet; returns tmp_path."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_CONSOLE", "off")
    monkeypatch.setenv("WANDB_DISABLE_GIT", "true")
    monkeypatch.setenv("NEPTUNE_MODE", "offline")
    monkeypatch.setenv("NEPTUNE_DATA_DIRECTORY", str(tmp_path / "neptune"))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.setenv("COMPUTEWATCH_TENSORBOARD_DIR", str(tmp_path / "tb"))
    # the tools' own start (seconds to import, on a loaded machine more) must not meet the
    # run's end deadline in tests that read back what they got; the deadline's tests set theirs
    monkeypatch.setenv("COMPUTEWATCH_TRACKERS_DEADLINE", "120")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))  # no user configuration
    monkeypatch.delenv("COMPUTEWATCH_CONFIG", raising=False)
    monkeypatch.delenv("COMPUTEWATCH_RUN_DB", raising=False)
    monkeypatch.delenv("MLFLOW_RUN_ID", raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


TRAIN = """
import sys, time
import computewatch

log_to = sys.argv[1].split(",") if len(sys.argv) > 1 and sys.argv[1] else None
config = {"lr": 0.01, "batch": 32, "api_key": "s3cret"}
with computewatch.track(name="train", interval=0.2, gpu_backend="fake:1xH100-SXM",
                        log_to=log_to, config=config) as run:
    nxt = time.monotonic()
    for _ in range(25):
        nxt += 0.04
        time.sleep(max(0.0, nxt - time.monotonic()))
        run.step(samples=32, tokens=1024)
"""
"""A small training loop: 25 steps of 40 ms, 32 samples each, on a simulated H100."""


def train_until_ticks(run: Any, db: Path, ticks: int = 3, timeout: float = 60.0) -> None:
    """Step every 40 ms until the run's sampler has stored ``ticks`` ticks (on a loaded machine
    the sampler can start late: a fixed number of steps might all come before its first)."""
    deadline = time.monotonic() + timeout
    n = 0
    while time.monotonic() < deadline:
        for _ in range(5):
            time.sleep(0.04)
            run.step(samples=32, tokens=256)
        n += 5
        if n >= 15 and stored_ticks(db, run.id) >= ticks:
            return
    raise AssertionError(f"the sampler stored fewer than {ticks} ticks in {timeout:g} s")
