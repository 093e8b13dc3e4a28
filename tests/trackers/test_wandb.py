"""Weights & Biases, for real, offline: runs read back from their ``.wandb`` transaction logs."""

from __future__ import annotations

import glob
import sys
from pathlib import Path
from typing import Any

import pytest

import computewatch

from .conftest import TRAIN, train_until_ticks
from .readback import wandb_config, wandb_finished, wandb_history, wandb_summary

pytestmark = pytest.mark.filterwarnings(
    "ignore::DeprecationWarning", "ignore::PendingDeprecationWarning"
)


def _runs(tmp: Path) -> list[str]:
    return sorted(glob.glob(str(tmp / "wandb" / "offline-run-*")))


def test_track_logs_into_the_users_wandb_run(tracker_env: Path) -> None:
    import wandb

    user_run = wandb.init(project="mine", name="users-run", config={"epochs": 2})
    try:
        with computewatch.track(
            name="ft", interval=0.2, gpu_backend="fake:1xH100-SXM", log_to=["wandb"],
            db=tracker_env / "cw.db",
        ) as run:  # fmt: skip
            for i in range(3):
                user_run.log({"loss": 1.0 / (i + 1)})  # the user's own steps go on
                train_until_ticks(run, tracker_env / "cw.db", ticks=i + 2)
        user_run.log({"loss": 0.01})
    finally:
        user_run.finish()
    dirs = _runs(tracker_env)
    assert len(dirs) == 2, dirs  # the user's run and our companion beside it
    for d in dirs:
        wandb_finished(d)
    by_config = {d: wandb_config(d) for d in dirs}
    (run_dir,) = [d for d in dirs if "computewatch_user_run" not in by_config[d]]
    (companion,) = [d for d in dirs if d != run_dir]
    history = wandb_history(run_dir)
    assert [h["loss"] for h in history if "loss" in h][-1] == 0.01
    steps = [h["_step"] for h in history]
    assert steps == sorted(steps) and len(steps) == len(set(steps))  # the user's step counter
    key = "computewatch/system/gpu_0_utilization_percentage"
    ours = [h for h in history if key in h]
    assert ours, history  # our points joined the user's steps
    # every tick, none overwritten, in the companion run
    ticks = [int(h["computewatch/tick"]) for h in wandb_history(companion) if key in h]
    assert len(ticks) >= 4 and ticks == sorted(set(ticks)), ticks
    assert len(ticks) > len(ours)  # more ticks than the user's run could keep
    assert wandb_summary(run_dir)["computewatch/system_run"]
    assert by_config[companion]["computewatch_user_run"]
    summary = wandb_summary(run_dir)
    assert run.summary is not None
    assert summary["computewatch/energy_kwh"] == pytest.approx(
        run.summary["energy"]["facility"]["value"]
    )
    assert summary["computewatch.energy_kwh.method"] == run.summary["energy"]["facility"]["method"]
    assert summary["computewatch.co2e_grams.method"] == "modeled"
    assert wandb_config(run_dir)["computewatch_run_id"] == run.id


@pytest.mark.slow
def test_run_log_to_wandb_from_the_cli(cw: Any, tracker_env: Path) -> None:
    script = tracker_env / "train.py"
    script.write_text(TRAIN)
    r = cw.ok("run", "--quiet", "--name", "cli-train", "--log-to", "wandb", "--interval", "0.2",
              "--gpu-backend", "fake:1xH100-SXM", "--", sys.executable, script, "")  # fmt: skip
    assert "Traceback" not in r.stderr
    summary = cw.show()
    (run_dir,) = _runs(tracker_env)
    wandb_finished(run_dir)
    history = wandb_history(run_dir)
    assert len([h for h in history if "computewatch/system/gpu_0_power_usage_watts" in h]) >= 2
    assert any(h.get("computewatch/steps_per_second", 0) > 0 for h in history)
    got = wandb_summary(run_dir)
    assert got["computewatch/energy_kwh"] == pytest.approx(summary["energy"]["facility"]["value"])
    assert got["computewatch.run_id"] == summary["id"]
    assert wandb_config(run_dir)["computewatch_run_id"] == summary["id"]
