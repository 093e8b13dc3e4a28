"""Neptune, for real, in offline mode: the operations it queued read back from its data
directory."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

import computewatch
from computewatch.trackers import Neptune

from .conftest import TRAIN, train_until_ticks
from .readback import neptune_fields

pytestmark = pytest.mark.filterwarnings(
    "ignore::DeprecationWarning", "ignore::PendingDeprecationWarning", "ignore::FutureWarning"
)


def test_track_logs_into_a_given_neptune_run(tracker_env: Path) -> None:
    import neptune

    user_run = neptune.init_run(
        name="users-run", capture_hardware_metrics=False, capture_stdout=False,
        capture_stderr=False,
    )  # fmt: skip
    user_run["parameters/lr"] = 0.1
    with computewatch.track(
        name="ft", interval=0.2, gpu_backend="fake:1xH100-SXM",
        log_to=[Neptune(run=user_run)], db=tracker_env / "cw.db",
    ) as run:  # fmt: skip
        train_until_ticks(run, tracker_env / "cw.db")
    user_run["parameters/after"] = 1  # still the user's to use
    user_run.stop()
    fields, series = neptune_fields(tracker_env / "neptune")
    assert fields["sys/name"] == "users-run" and fields["parameters/lr"] == 0.1
    assert fields["parameters/after"] == 1
    assert fields["computewatch/info/run_id"] == run.id
    assert series["computewatch/system/gpu_0_utilization_percentage"]
    assert run.summary is not None
    assert fields["computewatch/energy_kwh"] == pytest.approx(
        run.summary["energy"]["facility"]["value"]
    )
    assert (
        fields["computewatch/info/energy_kwh.method"]
        == (run.summary["energy"]["facility"]["method"])
    )


@pytest.mark.slow
def test_run_log_to_neptune_from_the_cli(cw: Any, tracker_env: Path) -> None:
    script = tracker_env / "train.py"
    script.write_text(TRAIN)
    r = cw.ok("run", "--quiet", "--name", "cli-train", "--log-to", "neptune", "--interval", "0.2",
              "--gpu-backend", "fake:1xH100-SXM", "--", sys.executable, script, "")  # fmt: skip
    assert "Traceback" not in r.stderr
    summary = cw.show()
    fields, series = neptune_fields(tracker_env / "neptune")
    assert fields["sys/name"] == "computewatch-cli-train"
    assert fields["computewatch/info/run_id"] == summary["id"]
    assert len(series["computewatch/system/gpu_0_power_usage_watts"]) >= 2
    assert any(v > 0 for v in series["computewatch/steps_per_second"])
    assert fields["computewatch/co2e_grams"] == pytest.approx(summary["carbon"]["total"]["value"])
    assert fields["computewatch/info/co2e_grams.method"] == "modeled"
