"""Recording GPU readings to a trace and replaying it, on the fake NVML and a manual clock."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from computewatch.readings import Kind, Labels, Reading, labels
from computewatch.sources.nvidia import NvidiaSource
from computewatch.sources.replay import FORMAT, VERSION, ReplaySource, record
from computewatch.testing.fake_nvml import ManualClock, from_preset

PID = 4242
SECONDS, INTERVAL = 2.0, 0.5
FRAME_TIMES = [0.0, 0.5, 1.0, 1.5, 2.0]
SPAN = FRAME_TIMES[-1] + INTERVAL  # a lap: the last frame lasts one interval


def _record(preset: str = "1xH100-SXM") -> tuple[str, list[float], NvidiaSource]:
    """A trace of a fake GPU running one process of the monitored tree; returns the text and
    the sleeps that record() asked for."""
    clock = ManualClock()
    fake = from_preset(preset, clock=clock)
    for dev in fake.devices:
        dev.add_process(PID)
    src = NvidiaSource(fake, pids=lambda: {PID}, all_gpus=True, clock=clock)
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        clock.advance(seconds)

    out = io.StringIO()
    n = record([src], out, seconds=SECONDS, interval=INTERVAL, clock=clock, sleep=sleep)
    assert n == len(FRAME_TIMES)
    return out.getvalue(), sleeps, src


@pytest.fixture(scope="module")
def recorded() -> tuple[str, list[float], NvidiaSource]:
    return _record()


@pytest.fixture
def trace(tmp_path: Path, recorded: tuple[str, list[float], NvidiaSource]) -> Path:
    path = tmp_path / "h100.jsonl"
    path.write_text(recorded[0])
    return path


def _frames(text: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in text.splitlines()[1:]]


def _by_key(readings: list[Reading]) -> dict[tuple[str, Labels], Reading]:
    return {(r.name, r.labels): r for r in readings}


def _frame_readings(frame: dict[str, object]) -> dict[tuple[str, Labels], Reading]:
    rows = frame["readings"]
    assert isinstance(rows, list)
    return _by_key([Reading(n, labels(**lb), float(v), Kind(k)) for n, lb, v, k in rows])


def test_record_writes_a_header_and_one_frame_per_tick(recorded) -> None:
    text, sleeps, src = recorded
    lines = text.splitlines()
    assert len(lines) == 1 + len(FRAME_TIMES)
    header = json.loads(lines[0])
    assert header["format"] == FORMAT
    assert header["version"] == VERSION
    assert header["interval_seconds"] == INTERVAL
    assert isinstance(header["hostname"], str)
    assert isinstance(header["recorded_at"], float)
    [dev] = header["devices"]
    assert dev["uuid"] == src.devices[0].uuid
    assert dev["name"] == "NVIDIA H100 80GB HBM3"
    assert dev["simulated"] is True
    assert dev["capabilities"]["gpm"] is True
    frames = _frames(text)
    assert [f["t"] for f in frames] == FRAME_TIMES
    assert sleeps == [INTERVAL] * (len(FRAME_TIMES) - 1)  # paced on the clock, no drift
    for f in frames:
        names = {row[0] for row in f["readings"]}  # type: ignore[attr-defined]
        assert {"gpu_utilization_ratio", "gpu_power_watts", "gpu_energy_joules_total"} <= names


def test_record_leaves_out_per_process_readings(recorded) -> None:
    text, _, src = recorded
    assert PID in src._tree  # the source did see the process
    assert src.used_uuids() == {src.devices[0].uuid}
    for f in _frames(text):
        rows = f["readings"]
        assert rows
        assert not [r for r in rows if r[0].startswith("gpu_process_")]  # type: ignore[index]
        assert all(r[3] in (Kind.GAUGE, Kind.COUNTER) for r in rows)  # type: ignore[index]


def test_replay_plays_the_frame_of_the_elapsed_time(trace: Path, recorded) -> None:
    frames = _frames(recorded[0])
    clock = ManualClock(50.0)
    rs = ReplaySource(trace, clock=clock)
    for elapsed, expect in [
        (0.0, 0),
        (0.2, 0),
        (0.5, 1),
        (0.7, 1),
        (1.0, 2),
        (1.99, 3),
        (2.0, 4),
        (2.4, 4),
    ]:
        clock.now = 50.0 + elapsed
        assert _by_key(rs.read()) == _frame_readings(frames[expect]), elapsed


def test_replay_loops_with_counters_carrying_on(trace: Path, recorded) -> None:
    frames = [_frame_readings(f) for f in _frames(recorded[0])]
    counters = [k for k, r in frames[0].items() if r.kind == Kind.COUNTER]
    gauges = [k for k, r in frames[0].items() if r.kind == Kind.GAUGE]
    energy = next(k for k in counters if k[0] == "gpu_energy_joules_total")
    nvlink = next(k for k in counters if k[0] == "gpu_nvlink_transmit_bytes_total")
    assert frames[0][nvlink].value > 0  # cumulative since the (fake) driver loaded
    gain = {k: frames[-1][k].value - frames[0][k].value for k in counters}
    assert gain[energy] > 0 and gain[nvlink] > 0

    clock = ManualClock(0.0)
    rs = ReplaySource(trace, clock=clock)
    prev: dict[tuple[str, Labels], float] = {}
    step = 0.1
    for i in range(int(3 * SPAN / step) + 1):  # three laps and a bit
        clock.now = i * step + 1e-9
        now = _by_key(rs.read())
        lap, pos = divmod(clock.now, SPAN)
        frame = frames[max(j for j, t in enumerate(FRAME_TIMES) if t <= pos)]
        for k in gauges:  # gauges repeat exactly
            assert now[k].value == frame[k].value
        for k in counters:  # counters go on from where the last lap ended
            assert now[k].value == pytest.approx(frame[k].value + lap * gain[k])
            assert now[k].value >= prev.get(k, -1.0), (k, clock.now)
            prev[k] = now[k].value


def test_replay_after_a_missed_lap_still_counts_it(trace: Path, recorded) -> None:
    frames = [_frame_readings(f) for f in _frames(recorded[0])]
    energy = next(k for k in frames[0] if k[0] == "gpu_energy_joules_total")
    gain = frames[-1][energy].value - frames[0][energy].value
    clock = ManualClock(0.0)
    rs = ReplaySource(trace, clock=clock)
    rs.read()
    clock.now = 2 * SPAN + 0.1  # a slow reader: a whole lap went by unseen
    assert _by_key(rs.read())[energy].value == pytest.approx(frames[0][energy].value + 2 * gain)


def test_replay_without_loop_stops_after_one_lap(trace: Path) -> None:
    clock = ManualClock(0.0)
    rs = ReplaySource(trace, loop=False, clock=clock)
    assert rs.read()
    clock.now = SPAN + 0.1
    assert rs.read() == []


def test_replayed_devices_are_simulated_and_all_used(trace: Path, recorded) -> None:
    src = recorded[2]
    rs = ReplaySource(trace, clock=ManualClock())
    [dev] = rs.devices
    orig = src.devices[0]
    assert dev.uuid == orig.uuid
    assert dev.index == orig.index
    assert dev.name == orig.name
    assert dev.model == "H100-SXM"
    assert dev.memory_total_bytes == orig.memory_total_bytes
    assert dev.power_limit_watts == orig.power_limit_watts
    assert dev.simulated is True
    assert dev.capabilities["replayed_from"] == str(trace)
    assert dev.capabilities["gpm"] is True
    assert rs.simulated is True
    assert rs.used_uuids() == {orig.uuid}
    assert rs.notes == []
    rs.close()


def test_replay_of_several_devices(tmp_path: Path) -> None:
    text, _, src = _record("2xA100-80GB")
    path = tmp_path / "a100.jsonl"
    path.write_text(text)
    rs = ReplaySource(path, clock=ManualClock())
    uuids = {d.uuid for d in src.devices}
    assert {d.uuid for d in rs.devices} == uuids
    assert rs.used_uuids() == uuids
    assert {dict(r.labels)["gpu"] for r in rs.read()} == uuids
