"""The fake TPU VM speaks libtpu's metric service as tpu-info's own client reads it."""

from __future__ import annotations

from pathlib import Path

import grpc  # type: ignore[import-untyped]
import pytest
from tpu_info import device, metrics  # type: ignore[import-untyped]

from computewatch.testing.fake_tpu import DUTY_CYCLE, tpu_from_preset


def test_tpu_infos_client_reads_the_fake() -> None:
    fake = tpu_from_preset("4xTPU-v5e")
    try:
        fake.chips[2].duty_cycle_pct = 12.5
        usage = metrics.get_chip_usage(device.TpuChip.V5E, addr=fake.address)
        assert [u.device_id for u in usage] == [0, 1, 2, 3]
        assert usage[2].duty_cycle_pct == 12.5
        assert usage[0].total_memory == 16 << 30
        assert usage[1].memory_usage == fake.chips[1].hbm_used_bytes
        hbm = metrics.get_runtime_hbm_utilization(addr=fake.address)
        assert [d for d, _ in hbm] == [0, 1, 2, 3]
    finally:
        fake.close()


def test_scripted_errors_reach_the_client() -> None:
    fake = tpu_from_preset("TPU-v5p")
    try:
        fake.fail(DUTY_CYCLE, grpc.StatusCode.UNAVAILABLE, count=1)
        with pytest.raises(grpc.RpcError) as e:
            metrics.get_chip_usage(device.TpuChip.V5P, addr=fake.address)
        assert e.value.code() == grpc.StatusCode.UNAVAILABLE
        assert metrics.get_chip_usage(device.TpuChip.V5P, addr=fake.address)[0].device_id == 0
    finally:
        fake.close()


def test_sysfs_tree_as_tpu_info_reads_it(tmp_path: Path) -> None:
    fake = tpu_from_preset("2xTPU-v6e", start=False)
    fake.write_sysfs(tmp_path)
    base = tmp_path / "bus/pci/devices"
    for c in fake.chips:
        d = base / c.pci_address
        chip = device.TpuChip.from_pci_device_id(
            (d / "device").read_text().strip(), (d / "subsystem_device").read_text().strip()
        )
        assert chip == device.TpuChip.V6E
        assert (d / "iommu_group").resolve().name == str(c.iommu_group)
