"""TensorBoard, for real: event files read back with TensorBoard's own EventAccumulator."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import computewatch
from computewatch.trackers import TensorBoard

from .conftest import TRAIN, train_until_ticks

pytestmark = pytest.mark.filterwarnings(
    "ignore::DeprecationWarning", "ignore::PendingDeprecationWarning"
)


def _events(log_dir: Path) -> EventAccumulator:
    acc = EventAccumulator(str(log_dir), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    return acc


def test_track_writes_beside_the_users_summary_writer(tracker_env: Path) -> None:
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(log_dir=str(tracker_env / "runs" / "mine"))
    with computewatch.track(
        name="ft", interval=0.2, gpu_backend="fake:1xH100-SXM",
        log_to=[TensorBoard(writer=writer)], db=tracker_env / "cw.db",
    ) as run:  # fmt: skip
        writer.add_scalar("loss", 1.0, 0)
        train_until_ticks(run, tracker_env / "cw.db")
    writer.close()
    acc = _events(tracker_env / "runs" / "mine")  # one directory: the user's and ours
    tags = acc.Tags()["scalars"]
    assert "loss" in tags
    assert "computewatch/system/gpu_0_utilization_percentage" in tags
    assert "computewatch/system/process_memory_rss_megabytes" in tags
    assert acc.Scalars("computewatch/samples_per_second")[0].value > 0
    assert run.summary is not None
    (energy,) = acc.Scalars("computewatch/energy_kwh")
    assert energy.value == pytest.approx(run.summary["energy"]["facility"]["value"], rel=1e-6)
    (text,) = acc.Tensors("computewatch/accounting")
    body = text.tensor_proto.string_val[0].decode()
    assert f"computewatch.energy_kwh.method: {run.summary['energy']['facility']['method']}" in body
    assert f"computewatch.run_id: {run.id}" in body


@pytest.mark.slow
def test_run_log_to_tensorboard_from_the_cli(cw: Any, tracker_env: Path) -> None:
    script = tracker_env / "train.py"
    script.write_text(TRAIN)
    cw.ok("run", "--quiet", "--name", "cli-train", "--log-to", "tensorboard", "--interval", "0.2",
          "--gpu-backend", "fake:1xH100-SXM", "--", sys.executable, script, "")  # fmt: skip
    summary = cw.show()
    acc = _events(tracker_env / "tb")  # COMPUTEWATCH_TENSORBOARD_DIR
    power = acc.Scalars("computewatch/system/gpu_0_power_usage_watts")
    assert len(power) >= 2 and [e.step for e in power] == sorted(e.step for e in power)
    assert any(e.value > 0 for e in acc.Scalars("computewatch/steps_per_second"))
    (co2,) = acc.Scalars("computewatch/co2e_grams")
    assert co2.value == pytest.approx(summary["carbon"]["total"]["value"], rel=1e-5)
    if summary.get("diagnosis", {}).get("findings"):
        (findings,) = acc.Tensors("computewatch/findings")
        assert summary["diagnosis"]["findings"][0]["title"] in (
            findings.tensor_proto.string_val[0].decode()
        )


def test_the_configurations_log_to_section_applies_to_track(tracker_env: Path) -> None:
    conf = tracker_env / "xdg" / "computewatch" / "config.toml"
    conf.parent.mkdir(parents=True)
    conf.write_text('[log_to]\ntrackers = ["tensorboard"]\n')
    with computewatch.track(name="cfg", interval=0.2, gpu_backend="none",
                            db=tracker_env / "cw.db") as run:  # fmt: skip
        train_until_ticks(run, tracker_env / "cw.db")
    acc = _events(tracker_env / "tb")
    assert "computewatch/system/cpu_utilization_percentage" in acc.Tags()["scalars"]
    assert acc.Scalars("computewatch/energy_kwh")
