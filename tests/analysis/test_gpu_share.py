"""A GPU shared with processes outside the run: the run is charged its share."""

from __future__ import annotations

from computewatch.analysis.summary import _gpu_share
from computewatch.sources.nvidia import NvidiaSource
from computewatch.testing import ManualClock, from_preset

MINE, THEIRS = 4242, 777


def _readings(other_sm: int) -> dict[str, float]:
    clock = ManualClock()
    fake = from_preset("1xA100-80GB", clock=clock)
    dev = fake.devices[0]
    dev.add_process(MINE, 4 << 30, sm_util=60)
    dev.add_process(THEIRS, 12 << 30, sm_util=other_sm)
    src = NvidiaSource(nvml=fake, pids=lambda: {MINE}, clock=clock)
    try:
        src.read()
        clock.advance(1.0)
        return {r.name: r.value for r in src.read() if r.name.startswith("gpu_other")}
    finally:
        src.close()


def test_other_processes_on_the_device_are_counted_not_attributed() -> None:
    r = _readings(other_sm=20)
    assert r["gpu_other_processes"] == 1
    assert r["gpu_other_processes_memory_used_bytes"] == 12 << 30
    assert r["gpu_other_processes_sm_utilization_ratio"] == 0.20


def test_share_by_sm_use_when_shared() -> None:
    share, rule = _gpu_share(
        {1: 0.6, 2: 0.6},
        {1: 4.0, 2: 4.0},
        {
            "gpu_other_processes": {1: 1, 2: 1},
            "gpu_other_processes_sm_utilization_ratio": {1: 0.2, 2: 0.2},
        },
    )
    assert share == 0.75  # 1.2 / (1.2 + 0.4)
    assert "SM use" in rule


def test_share_by_memory_without_sm_figures() -> None:
    share, rule = _gpu_share(
        {},
        {1: 4.0},
        {
            "gpu_other_processes": {1: 1},
            "gpu_other_processes_memory_used_bytes": {1: 12.0},
        },
    )
    assert share == 0.25  # 4 / (4 + 12)
    assert "memory" in rule


def test_alone_on_the_device_is_charged_whole() -> None:
    assert _gpu_share({1: 0.5}, {1: 1.0}, {"gpu_other_processes": {1: 0}}) == (
        1.0,
        "alone on the device: charged whole",
    )
    assert _gpu_share({}, {}, {})[0] == 1.0
