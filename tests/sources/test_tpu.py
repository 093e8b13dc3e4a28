"""The TPU source through the fake TPU VM: a real gRPC server speaking libtpu's metric service."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import grpc  # type: ignore[import-untyped]
import pytest

from computewatch.catalog.tpu import TpuChipRow, tpu_rows
from computewatch.sources.base import SourceUnavailable
from computewatch.sources.gpus import GpuBackendError, check_spec, open_backend
from computewatch.sources.tpu import TpuChipInfo, TpuSource, discover_chips, scan_owners
from computewatch.testing.fake_tpu import (
    DUTY_CYCLE,
    HBM_BANDWIDTH,
    HBM_TOTAL,
    HBM_USAGE,
    FakeTpuChip,
    FakeTpuRuntime,
    tpu_from_preset,
)


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def fake() -> Iterator[FakeTpuRuntime]:
    f = tpu_from_preset("2xTPU-v5e")
    yield f
    f.close()


def _chips(f: FakeTpuRuntime) -> list[TpuChipInfo]:
    rows = tpu_rows()
    return [TpuChipInfo(c.index, c.pci_address, rows[c.model], c.dev_path) for c in f.chips]


def _values(src: TpuSource) -> dict[tuple[str, str], float]:
    return {
        (r.name, dict(r.labels)["gpu"]): r.value for r in src.read() if "pid" not in dict(r.labels)
    }


def test_discovery_reads_the_pci_tree(fake: FakeTpuRuntime, tmp_path: Path) -> None:
    fake.write_sysfs(tmp_path)
    other = tmp_path / "bus/pci/devices/0000:00:01.0"  # an Intel device: ignored
    other.mkdir()
    (other / "vendor").write_text("0x8086\n")
    (other / "device").write_text("0x1234\n")
    old = tmp_path / "bus/pci/devices/0000:00:09.0"  # a TPU v3: said, not read
    old.mkdir()
    (old / "vendor").write_text("0x1ae0\n")
    (old / "device").write_text("0x0027\n")
    chips, notes = discover_chips(str(tmp_path))
    assert [(c.pci_address, c.row.model, c.dev_path) for c in chips] == [
        ("0000:00:04.0", "TPU-v5e", "/dev/vfio/0"),
        ("0000:00:05.0", "TPU-v5e", "/dev/vfio/1"),
    ]
    assert len(notes) == 1 and "TPU v2/v3" in notes[0] and "no runtime metric service" in notes[0]
    src = TpuSource(fake.address, sysfs_root=str(tmp_path))
    try:
        assert [d.model for d in src.devices] == ["TPU-v5e", "TPU-v5e"]
        assert src.notes == notes
    finally:
        src.close()


def test_no_tpu_is_unavailable_with_the_reason(tmp_path: Path) -> None:
    with pytest.raises(SourceUnavailable, match="no Google TPU found"):
        TpuSource("127.0.0.1:1", sysfs_root=str(tmp_path))


def test_readings_in_the_gpu_names(fake: FakeTpuRuntime) -> None:
    fake.chips[0].duty_cycle_pct = 50.0
    fake.chips[0].hbm_used_bytes = 4 << 30
    clock = Clock()
    src = TpuSource(fake.address, _chips(fake), clock=clock, simulated=True)
    try:
        v = _values(src)
        u = "TPU-0000:00:04.0"
        assert v[("gpu_utilization_ratio", u)] == pytest.approx(0.5)
        assert v[("gpu_memory_used_bytes", u)] == 4 << 30
        assert v[("gpu_memory_total_bytes", u)] == 16 << 30
        assert ("tpu_hbm_bandwidth_utilization_ratio", u) in v
        # modelled energy: the first tick starts the integral; 10 s at 50 % duty next
        clock.t += 10
        v = _values(src)
        row = tpu_rows()["TPU-v5e"]
        assert v[("gpu_energy_joules_total", u)] == pytest.approx(row.watts(0.5) * 10)
        d = src.devices[0]
        assert d.simulated and d.capabilities["energy_counter"] is False
        assert "modelled" in str(d.capabilities["energy_counter_why"])
        assert d.capabilities["power"] is False
        assert fake.calls.count("ListSupportedMetrics") == 1
    finally:
        src.close()


def test_per_device_hbm_is_summed_per_chip() -> None:
    row = TpuChipRow("TPU-v5e", "0x0063", 2, 394, 65, 138, 0.5, "test", 2024)
    chip = FakeTpuChip(0, "TPU-v5e", "0000:00:04.0", "0x0063", 0, 16 << 30, 6 << 30, 40.0)
    f = FakeTpuRuntime([chip], per_chip=2)
    src = TpuSource(f.address, [TpuChipInfo(0, chip.pci_address, row, chip.dev_path)])
    try:
        v = _values(src)
        assert v[("gpu_memory_used_bytes", "TPU-0000:00:04.0")] == 6 << 30
        assert v[("gpu_memory_total_bytes", "TPU-0000:00:04.0")] == 16 << 30
        assert v[("gpu_utilization_ratio", "TPU-0000:00:04.0")] == pytest.approx(0.4)
    finally:
        src.close()
        f.close()


def test_older_libtpu_without_hbm_bandwidth() -> None:
    f = tpu_from_preset("TPU-v4")
    f.supported = {DUTY_CYCLE, HBM_USAGE, HBM_TOTAL}
    src = TpuSource(f.address, _chips(f))
    try:
        names = {n for n, _ in _values(src)}
        assert "tpu_hbm_bandwidth_utilization_ratio" not in names
        assert "gpu_utilization_ratio" in names
        cap = src.devices[0].capabilities
        assert cap["hbm_bandwidth"] is False and "does not offer" in str(cap["hbm_bandwidth_why"])
        assert HBM_BANDWIDTH not in f.calls
        assert src.devices[0].name == "Google TPU v4"
    finally:
        src.close()
        f.close()


def test_one_failing_metric_is_noted_and_the_rest_goes_on(fake: FakeTpuRuntime) -> None:
    fake.fail(HBM_USAGE, grpc.StatusCode.INTERNAL, count=None)
    src = TpuSource(fake.address, _chips(fake))
    try:
        names = {n for n, _ in _values(src)}
        assert "gpu_memory_used_bytes" not in names and "gpu_utilization_ratio" in names
        assert any("INTERNAL" in n for n in src.notes)
        fake.clear_failures()
        assert "gpu_memory_used_bytes" in {n for n, _ in _values(src)}
    finally:
        src.close()


def test_service_down_then_back(fake: FakeTpuRuntime) -> None:
    clock = Clock()
    src = TpuSource(fake.address, _chips(fake), clock=clock, timeout=2.0)
    try:
        _values(src)
        fake.stop()
        for _ in range(3):
            clock.t += 1
            assert src.read() == []  # no readings, no exception
        assert any("not answering" in n for n in src.notes)
        fake.start()
        names: set[str] = set()
        for _ in range(100):  # the channel reconnects within its 1 s backoff
            clock.t += 1
            names = {n for n, _ in _values(src)}
            if names:
                break
            time.sleep(0.05)
        assert "gpu_utilization_ratio" in names
        assert any("answered again" in n for n in src.notes)
    finally:
        src.close()


def test_attribution_to_the_process_holding_the_chip(fake: FakeTpuRuntime) -> None:
    fake.chips[1].add_process(4242)
    src = TpuSource(fake.address, _chips(fake), pids=lambda: {4242}, owners=fake.owners)
    try:
        procs = [r for r in src.read() if r.name == "gpu_process_memory_used_bytes"]
        assert [dict(r.labels) for r in procs] == [{"gpu": "TPU-0000:00:05.0", "pid": "4242"}]
        assert procs[0].value == fake.chips[1].hbm_used_bytes
        assert src.used_uuids() == {"TPU-0000:00:05.0"}
    finally:
        src.close()


def test_scan_owners_reads_fd_links(tmp_path: Path) -> None:
    fd = tmp_path / "77" / "fd"
    fd.mkdir(parents=True)
    os.symlink("/dev/vfio/3", fd / "9")
    os.symlink("/dev/null", fd / "1")
    os.symlink("/dev/accel0", fd / "10")
    assert scan_owners({77, 78}, str(tmp_path)) == {"/dev/vfio/3": 77, "/dev/accel0": 77}


def test_backend_presets() -> None:
    assert check_spec("fake:8xTPU-v5p") == "fake:8xTPU-v5p"
    assert check_spec("tpu") == "tpu"
    with pytest.raises(GpuBackendError, match="TPU-v5e"):
        check_spec("fake:4xTPU-v9")
    b = open_backend("fake:4xTPU-v5e", pids=lambda: {5}, fake_pids=[5])
    try:
        assert b.simulated and [s.name for s in b.sources] == ["tpu"]
        assert len(b.devices) == 4 and all(d.model == "TPU-v5e" for d in b.devices)
        b.sources[0].read()
        assert len(b.used_uuids()) == 4
    finally:
        b.close()


def test_tpu_visible_chips(fake: FakeTpuRuntime, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TPU_VISIBLE_CHIPS", "1,7")
    src = TpuSource(fake.address, _chips(fake))
    try:
        assert [d.uuid for d in src.devices] == ["TPU-0000:00:05.0"]
        assert {u for _, u in _values(src)} == {"TPU-0000:00:05.0"}
        assert any("'7' is no chip here" in n for n in src.notes)
    finally:
        src.close()
    every = TpuSource(fake.address, _chips(fake), all_gpus=True)  # the agent: every chip
    assert len(every.devices) == 2
    every.close()
    monkeypatch.setenv("TPU_VISIBLE_CHIPS", "9")
    with pytest.raises(SourceUnavailable, match="no TPU chip matches"):
        TpuSource(fake.address, _chips(fake))
