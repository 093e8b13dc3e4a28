"""Fake devices that follow the job's state file: its readings replace the preset's, a busy
counter becomes utilization over each read's interval, the processes' memory follows it, and
a missing or torn file keeps what was read last."""

from __future__ import annotations

from pathlib import Path

from computewatch.testing import ManualClock, from_preset
from computewatch.testing.job_state import STATE_ENV, write_state


def test_a_preset_follows_the_jobs_state_file(tmp_path: Path) -> None:
    path = tmp_path / "gpu.json"
    clock = ManualClock()
    nvml = from_preset("1xA100-80GB", clock=clock, state_file=path)
    nvml.nvmlInit()
    h = nvml.nvmlDeviceGetHandleByIndex(0)
    nvml.device(0).add_process(4242)
    # No file yet: the preset's busy device.
    assert nvml.nvmlDeviceGetUtilizationRates(h).gpu >= 50
    write_state(path, {"sm_clock_mhz": 900, "clock_events": 0x20, "busy_seconds_total": 0.0,
                       "process_memory_bytes": 0})  # fmt: skip
    assert nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_SM) == 900
    assert nvml.nvmlDeviceGetCurrentClocksEventReasons(h) == 0x20
    assert nvml.nvmlDeviceGetUtilizationRates(h).gpu == 0  # the counter starts at 0
    assert [p.usedGpuMemory for p in nvml.nvmlDeviceGetComputeRunningProcesses(h)] == [0]
    clock.advance(1.0)
    write_state(path, {"busy_seconds_total": 0.25, "process_memory_bytes": 2 << 30})
    assert nvml.nvmlDeviceGetUtilizationRates(h).gpu == 25  # 0.25 s busy in 1 s
    assert [p.usedGpuMemory for p in nvml.nvmlDeviceGetComputeRunningProcesses(h)] == [2 << 30]
    # Fields the file no longer holds come back from the preset.
    assert nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_SM) != 900
    # A torn write keeps the readings read last.
    path.write_text('{"busy_seconds_total": ')
    clock.advance(1.0)
    assert nvml.nvmlDeviceGetUtilizationRates(h).gpu == 0  # no growth since: idle


def test_the_environment_names_the_file(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "gpu.json"
    write_state(path, {"temperature_c": 91})
    monkeypatch.setenv(STATE_ENV, str(path))
    nvml = from_preset("1xA100-80GB")
    nvml.nvmlInit()
    h = nvml.nvmlDeviceGetHandleByIndex(0)
    assert nvml.nvmlDeviceGetTemperature(h, nvml.NVML_TEMPERATURE_GPU) == 91
