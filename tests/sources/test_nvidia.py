"""The NVIDIA source, driven entirely through the package's fake NVML."""

from __future__ import annotations

import re
import sys
from collections.abc import Collection, Iterable, Sequence
from pathlib import Path
from typing import Any

import pytest

from computewatch.readings import Kind, Reading, labels
from computewatch.sources.base import Source, SourceUnavailable
from computewatch.sources.nvidia import (
    CLOCK_EVENT_REASONS,
    INSTALL_HINT,
    NvidiaSource,
    decode_clock_events,
    parse_visible_devices,
)
from computewatch.testing import fake_nvml as fm
from computewatch.testing.fake_nvml import FakeDevice, FakeNVML, ManualClock, from_preset

U0 = "GPU-11111111-2222-3333-4444-000000000000"
U1 = "GPU-11111111-2222-3333-4444-000000000001"
U2 = "GPU-22222222-2222-3333-4444-000000000002"
TIME_RE = r"\d\d:\d\d:\d\d"


def source(
    *devices: FakeDevice,
    clock: ManualClock | None = None,
    visible: str | None = "",
    all_gpus: bool | None = None,
    **kw: object,
) -> tuple[FakeNVML, ManualClock, NvidiaSource]:
    """A source over the given fake devices; every GPU visible unless told otherwise."""
    clock = clock or ManualClock()
    fake = FakeNVML(list(devices), clock)
    if all_gpus is None:
        all_gpus = visible == ""
    src = NvidiaSource(
        fake,
        visible_devices=None if visible == "" else visible,
        all_gpus=all_gpus,
        clock=clock,
        **kw,  # type: ignore[arg-type]
    )
    return fake, clock, src


def by_key(readings: Iterable[Reading]) -> dict[tuple[str, tuple[tuple[str, str], ...]], Reading]:
    out = {}
    for r in readings:
        key = (r.name, r.labels)
        assert key not in out, f"duplicate series {key}"
        out[key] = r
    return out


def value(readings: Iterable[Reading], name: str, **lbl: object) -> float:
    return by_key(readings)[(name, labels(**lbl))].value


def names(readings: Iterable[Reading], uuid: str | None = None) -> set[str]:
    return {r.name for r in readings if uuid is None or dict(r.labels).get("gpu") == uuid}


def scripted_device(uuid: str = U0) -> FakeDevice:
    d = FakeDevice(
        "NVIDIA H100 80GB HBM3",
        uuid,
        memory_total=80 * 2**30,
        memory_reserved=512 << 20,
        power_limit_mw=700_000,
        nvlink_links=18,
        energy_start_mj=5_000_000,
    )
    d.script("gpu_util_percent", 87)
    d.script("mem_util_percent", 41)
    d.script("memory_used_bytes", 30 * 2**30)
    d.script("power_mw", 412_345)
    d.script("power_limit_mw", 650_000)
    d.script("temperature_c", 63)
    d.script("sm_clock_mhz", 1755)
    d.script("mem_clock_mhz", 2619)
    d.script("clock_events", 0x4 | 0x20)
    d.script("pcie_tx_kbps", 1000)
    d.script("pcie_rx_kbps", 2500)
    d.script("ecc_corrected", 3)
    d.script("ecc_uncorrected", 1)
    d.script("fan_percent", 35)
    d.script("nvlink_tx_kib", 2048)
    d.script("nvlink_rx_kib", 4096)
    return d


# -- the contract -----------------------------------------------------------------------------
def test_is_a_source_and_describes_devices() -> None:
    fake, _, src = source(scripted_device(), FakeDevice("NVIDIA L4", U1, power_limit_mw=72_000))
    assert isinstance(src, Source)
    assert src.name == "nvidia"
    d0, d1 = src.devices
    assert (d0.index, d0.uuid, d0.name, d0.model) == (0, U0, "NVIDIA H100 80GB HBM3", "H100-SXM")
    assert d0.memory_total_bytes == 80 * 2**30
    assert d0.power_limit_watts == 650.0
    assert d0.mig_parent_uuid is None and d0.simulated is True
    assert (d1.model, d1.power_limit_watts) == ("L4", 72.0)
    assert d0.capabilities["energy_counter"] is True
    assert d0.capabilities["nvlink"] is True and d1.capabilities["nvlink"] is False
    assert "no NVLink" in str(d1.capabilities["nvlink_why"])
    assert d0.capabilities["per_process"] is False  # no pids callable
    assert fake.init_count == 1
    src.close()
    src.close()
    assert fake.init_count == 0 and fake.shutdown_count == 1
    with pytest.raises(ValueError, match="closed"):
        src.read()


def test_unknown_model_is_none() -> None:
    _, _, src = source(FakeDevice("NVIDIA GeForce RTX 4090", U0))
    assert src.devices[0].model is None


def test_every_field_in_si_units() -> None:
    _, clock, src = source(scripted_device())
    r = src.read()
    g = {"gpu": U0}
    assert value(r, "gpu_utilization_ratio", **g) == 0.87
    assert value(r, "gpu_memory_utilization_ratio", **g) == 0.41
    assert value(r, "gpu_memory_used_bytes", **g) == 30 * 2**30  # v2: without the reserved part
    assert value(r, "gpu_memory_total_bytes", **g) == 80 * 2**30
    assert value(r, "gpu_power_watts", **g) == 412.345
    assert value(r, "gpu_power_limit_watts", **g) == 650.0
    assert value(r, "gpu_energy_joules_total", method="counter", **g) == 0.0  # rebased
    assert value(r, "gpu_temperature_celsius", **g) == 63
    assert value(r, "gpu_sm_clock_hertz", **g) == 1755e6
    assert value(r, "gpu_memory_clock_hertz", **g) == 2619e6
    assert value(r, "gpu_clock_event_reasons", **g) == 0x24
    assert value(r, "gpu_pcie_transmit_bytes_per_second", **g) == 1000 * 1024
    assert value(r, "gpu_pcie_receive_bytes_per_second", **g) == 2500 * 1024
    assert value(r, "gpu_nvlink_transmit_bytes_total", **g) == 2048 * 1024
    assert value(r, "gpu_nvlink_receive_bytes_total", **g) == 4096 * 1024
    assert value(r, "gpu_ecc_errors_total", type="corrected", **g) == 3
    assert value(r, "gpu_ecc_errors_total", type="uncorrected", **g) == 1
    assert value(r, "gpu_xid_errors_total", **g) == 0
    assert value(r, "gpu_fan_ratio", **g) == 0.35
    kinds = {x.name: x.kind for x in r}
    for name in ("gpu_energy_joules_total", "gpu_nvlink_transmit_bytes_total",
                 "gpu_ecc_errors_total", "gpu_xid_errors_total"):  # fmt: skip
        assert kinds[name] is Kind.COUNTER
    assert kinds["gpu_power_watts"] is Kind.GAUGE
    # no GPM (not scripted as a GPM device), no per-process without pids
    assert not any(n.startswith(("gpu_sm_active", "gpu_process_")) for n in names(r))
    clock.advance(2.0)
    r2 = src.read()
    # energy counter: 412.345 W for 2 s on the fake's integral
    assert value(r2, "gpu_energy_joules_total", method="counter", gpu=U0) == pytest.approx(824.69)


def test_memory_falls_back_to_v1_on_an_older_driver() -> None:
    dev = scripted_device()
    dev.missing.add("nvmlDeviceGetMemoryInfo_v2")
    _, _, src = source(dev)
    r = src.read()
    # v1 "used" counts the driver's reserved memory too
    assert value(r, "gpu_memory_used_bytes", gpu=U0) == 30 * 2**30 + (512 << 20)
    r = src.read()
    assert value(r, "gpu_memory_total_bytes", gpu=U0) == 80 * 2**30
    assert dev.calls["nvmlDeviceGetMemoryInfo"] == 1 + 1 + 2  # setup, v2 try, then v1 twice


def test_temperature_and_clock_event_fallbacks() -> None:
    dev = scripted_device()
    dev.missing |= {"nvmlDeviceGetTemperature", "nvmlDeviceGetCurrentClocksEventReasons"}
    _, _, src = source(dev)
    for _ in range(2):
        r = src.read()
        assert value(r, "gpu_temperature_celsius", gpu=U0) == 63
        assert value(r, "gpu_clock_event_reasons", gpu=U0) == 0x24
    assert dev.calls["nvmlDeviceGetTemperature"] == 1  # tried once, then V
    assert dev.calls["nvmlDeviceGetTemperatureV"] == 2
    assert dev.calls["nvmlDeviceGetCurrentClocksThrottleReasons"] == 2


# -- error translation ------------------------------------------------------------------------
def test_not_supported_is_absent_with_reason_and_not_retried() -> None:
    dev = scripted_device()
    dev.script("fan_percent", None)  # passively cooled
    dev.unsupported.add("nvmlDeviceGetTotalEccErrors")
    _, _, src = source(dev)
    for _ in range(3):
        r = src.read()
        assert "gpu_fan_ratio" not in names(r)
        assert "gpu_ecc_errors_total" not in names(r)
        assert "gpu_power_watts" in names(r)
    caps = src.devices[0].capabilities
    assert caps["fan"] is False and "not supported" in str(caps["fan_why"])
    assert caps["ecc"] is False and "Not Supported" in str(caps["ecc_why"])
    assert dev.calls["nvmlDeviceGetFanSpeed"] == 1
    assert dev.calls["nvmlDeviceGetTotalEccErrors"] == 1
    assert src.notes == []


def test_no_permission_is_absent_with_its_reason() -> None:
    dev = scripted_device()
    dev.fail("nvmlDeviceGetPcieThroughput", fm.NVML_ERROR_NO_PERMISSION, at_call=3)
    _, _, src = source(dev)
    assert "gpu_pcie_transmit_bytes_per_second" in names(src.read())  # calls 1 and 2 (tx, rx)
    for _ in range(2):
        assert "gpu_pcie_transmit_bytes_per_second" not in names(src.read())
    caps = src.devices[0].capabilities
    assert caps["pcie"] is False
    assert "permission denied" in str(caps["pcie_why"])
    assert dev.calls["nvmlDeviceGetPcieThroughput"] == 3


def test_other_errors_skip_the_field_for_one_tick() -> None:
    dev = scripted_device()
    dev.fail("nvmlDeviceGetPowerUsage", fm.NVML_ERROR_UNKNOWN, at_call=2, count=1)
    dev.fail("nvmlDeviceGetTemperature", fm.NVML_ERROR_TIMEOUT, at_call=1, count=1)
    _, _, src = source(dev)
    r1, r2, r3 = src.read(), src.read(), src.read()
    assert "gpu_power_watts" in names(r1) and "gpu_power_watts" not in names(r2)
    assert "gpu_power_watts" in names(r3)
    assert "gpu_temperature_celsius" not in names(r1)
    assert "gpu_temperature_celsius" in names(r2)
    assert "power" not in src.devices[0].capabilities
    assert "gpu_utilization_ratio" in names(r2)  # the rest of the device is read


def test_a_non_nvml_exception_disables_only_that_field() -> None:
    fake, _, src = source(scripted_device(U0), scripted_device(U1))

    def broken(handle: FakeDevice) -> int:
        raise TypeError("c_uint expected")

    fake.nvmlDeviceGetFanSpeed = broken  # type: ignore[method-assign]
    for _ in range(2):
        r = src.read()
        assert "gpu_fan_ratio" not in names(r)
        assert "gpu_power_watts" in names(r, U0) and "gpu_power_watts" in names(r, U1)
    assert "TypeError: c_uint expected" in str(src.devices[0].capabilities["fan_why"])
    assert src.notes == [f"GPU {U0}: fan disabled, it failed with TypeError: c_uint expected"]


def test_gpu_lost_mid_run_is_noted_once_and_others_continue() -> None:
    a, b = scripted_device(U0), scripted_device(U1)
    _, clock, src = source(a, b)
    assert names(src.read(), U0) and names(src.read(), U1)
    a.fail("nvmlDeviceGetMemoryInfo", fm.NVML_ERROR_GPU_IS_LOST)
    clock.advance(1)
    r = src.read()
    got = names(r, U0)
    assert got == {"gpu_utilization_ratio", "gpu_memory_utilization_ratio"}  # read before loss
    assert "gpu_power_watts" in names(r, U1)
    for _ in range(3):
        r = src.read()
        assert not names(r, U0)
        assert "gpu_power_watts" in names(r, U1)
    assert len(src.notes) == 1
    assert re.fullmatch(rf"GPU {U0} was lost at {TIME_RE}; its data stops there", src.notes[0])
    assert src.devices[0].capabilities["lost"] is True
    calls = a.total_calls
    src.read()
    assert a.total_calls == calls  # a lost device is not called again


@pytest.mark.parametrize(
    ("code", "text"),
    [
        (fm.NVML_ERROR_DRIVER_NOT_LOADED, "Driver Not Loaded"),
        (fm.NVML_ERROR_LIBRARY_NOT_FOUND, "NVML Shared Library Not Found"),
        (fm.NVML_ERROR_UNINITIALIZED, "Uninitialized"),
        (fm.NVML_ERROR_NO_PERMISSION, "Insufficient Permissions"),
    ],
)
def test_init_failure_is_source_unavailable_with_nvml_text(code: int, text: str) -> None:
    fake = FakeNVML([FakeDevice()]).fail("nvmlInit", code)
    with pytest.raises(SourceUnavailable, match=f"NVML could not start: {text}"):
        NvidiaSource(fake, all_gpus=True)
    assert fake.init_count == 0


def test_no_gpu_is_source_unavailable_and_shuts_nvml_down() -> None:
    fake = FakeNVML([])
    with pytest.raises(SourceUnavailable, match="found no NVIDIA GPU"):
        NvidiaSource(fake, all_gpus=True)
    assert fake.init_count == 0


def test_missing_binding_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` fail
    with pytest.raises(SourceUnavailable) as info:
        NvidiaSource()
    assert str(info.value) == INSTALL_HINT
    assert "pip install 'computewatch[nvidia]'" in INSTALL_HINT


def test_a_gpu_that_cannot_be_opened_is_skipped_with_a_note() -> None:
    bad = FakeDevice(uuid=U1).fail("nvmlDeviceGetHandleByIndex", fm.NVML_ERROR_NO_PERMISSION)
    _, _, src = source(scripted_device(), bad)
    assert [d.uuid for d in src.devices] == [U0]
    assert src.notes == ["GPU 1 could not be opened and is not monitored: Insufficient Permissions"]


# -- energy -----------------------------------------------------------------------------------
def test_energy_counter_rebased_and_follows_a_driver_reset() -> None:
    dev = scripted_device().script("energy_mj", [9_000_000, 9_000_000, 9_500_000, 200_000, 700_000])
    _, _, src = source(dev)  # setup probes the counter once (first value)
    seen = [
        value(src.read(), "gpu_energy_joules_total", gpu=U0, method="counter") for _ in range(4)
    ]
    assert seen == [0.0, 500.0, 500.0, 1000.0]


def test_polled_energy_is_the_trapezoid_of_power_over_time() -> None:
    dev = scripted_device(U0).script("power_mw", [100_000, 200_000, 300_000, 300_000])
    dev.unsupported.add("nvmlDeviceGetTotalEnergyConsumption")  # pre-Volta
    _, clock, src = source(dev)
    caps = src.devices[0].capabilities
    assert caps["energy_counter"] is False
    assert "integral of polled power" in str(caps["energy_counter_why"])
    energies = []
    for dt in (0.0, 1.0, 2.0, 1.0):
        clock.advance(dt)
        r = src.read()
        energies.append(value(r, "gpu_energy_joules_total", gpu=U0, method="polled"))
        assert ("gpu_energy_joules_total", labels(gpu=U0, method="counter")) not in by_key(r)
    # by hand: 0; (100+200)/2*1 = 150; +(200+300)/2*2 = 500; +(300+300)/2*1 = 300
    assert energies == [0.0, 150.0, 650.0, 950.0]


def test_polled_energy_skips_a_tick_without_power() -> None:
    dev = scripted_device().script("power_mw", 100_000)
    dev.unsupported.add("nvmlDeviceGetTotalEnergyConsumption")
    dev.fail("nvmlDeviceGetPowerUsage", fm.NVML_ERROR_UNKNOWN, at_call=2, count=1)
    _, clock, src = source(dev)
    got = []
    for _ in range(3):
        clock.advance(1.0)
        got.append(
            by_key(src.read()).get(("gpu_energy_joules_total", labels(gpu=U0, method="polled")))
        )
    assert got[0] is not None and got[0].value == 0.0
    assert got[1] is None
    assert got[2] is not None and got[2].value == 200.0  # 100 W over the 2 s since the last read


def test_energy_counter_turning_unsupported_switches_to_polled_without_a_jump() -> None:
    dev = scripted_device().script("power_mw", 100_000)
    _, clock, src = source(dev)
    src.read()
    clock.advance(1.0)
    assert value(src.read(), "gpu_energy_joules_total", gpu=U0, method="counter") == 100.0
    dev.fail("nvmlDeviceGetTotalEnergyConsumption", fm.NVML_ERROR_NOT_SUPPORTED)
    clock.advance(1.0)
    assert value(src.read(), "gpu_energy_joules_total", gpu=U0, method="polled") == 100.0
    clock.advance(1.0)
    assert value(src.read(), "gpu_energy_joules_total", gpu=U0, method="polled") == 200.0
    assert src.devices[0].capabilities["energy_counter"] is False


def test_no_energy_at_all_without_counter_or_power() -> None:
    dev = scripted_device().script("power_mw", None)
    dev.unsupported.add("nvmlDeviceGetTotalEnergyConsumption")
    _, _, src = source(dev)
    for _ in range(2):
        assert "gpu_energy_joules_total" not in names(src.read())
    assert "neither an energy counter nor power" in str(
        src.devices[0].capabilities["energy_polled_why"]
    )


# -- MIG --------------------------------------------------------------------------------------
def mig_machine() -> tuple[FakeDevice, FakeDevice, FakeDevice, FakeDevice]:
    parent = FakeDevice("NVIDIA A100-SXM4-80GB", U0)
    a = parent.add_mig_instance(10 * 2**30, profile="1g.10gb")
    b = parent.add_mig_instance(20 * 2**30, profile="2g.20gb")
    a.script("memory_used_bytes", 3 * 2**30)
    other = FakeDevice("NVIDIA A100-SXM4-80GB", U1)
    return parent, a, b, other


def test_mig_instances_are_devices_with_a_parent_label() -> None:
    parent, a, b, other = mig_machine()
    a.add_process(501, 2 * 2**30, sm_util=30)
    _, _, src = source(parent, other, pids=lambda: {501})
    uuids = [d.uuid for d in src.devices]
    assert uuids == [U0, a.uuid, b.uuid, U1]
    info_a = src.devices[1]
    assert (info_a.mig_parent_uuid, info_a.mig_index, info_a.index) == (U0, 0, 0)
    assert info_a.name.endswith("MIG 1g.10gb")
    assert info_a.memory_total_bytes == 10 * 2**30
    assert src.devices[0].capabilities["mig"] is True
    r = src.read()
    assert value(r, "gpu_memory_used_bytes", gpu=a.uuid, parent=U0) == 3 * 2**30
    assert value(r, "gpu_memory_total_bytes", gpu=b.uuid, parent=U0) == 20 * 2**30
    assert value(r, "gpu_process_memory_used_bytes", gpu=a.uuid, parent=U0, pid=501) == 2 * 2**30
    for x in r:
        lbl = dict(x.labels)
        if lbl["gpu"].startswith("MIG-"):
            assert lbl["parent"] == U0, x
        else:
            assert "parent" not in lbl
    # whole-GPU figures stay on the parent; no utilization in MIG mode
    assert "gpu_power_watts" in names(r, U0)
    assert "gpu_utilization_ratio" not in names(r, U0)
    assert "gpu_utilization_ratio" in names(r, U1)
    assert src.used_uuids() == {a.uuid}
    assert src.devices[0].capabilities["per_process"] is False
    assert "parent GPU" in str(info_a.capabilities["energy_counter_why"])
    assert "gpu_energy_joules_total" not in names(r, a.uuid)
    assert "gpu_energy_joules_total" in names(r, U0)
    src.read()
    assert info_a.capabilities["temperature"] is False  # tried in both forms, then dropped
    assert info_a.capabilities["utilization"] is False


def test_parent_lost_takes_its_mig_instances_with_it() -> None:
    parent, _, _, other = mig_machine()
    _, _, src = source(parent, other)
    src.read()
    parent.lose()
    src.read()
    assert len(src.notes) == 3
    assert all("was lost at" in n for n in src.notes)
    r = src.read()
    assert names(r) == names(r, U1)


# -- per-process attribution ------------------------------------------------------------------
def test_per_process_attribution_of_the_tree_and_its_children(tmp_path: Path) -> None:
    for pid in (999, 11, 12):
        (tmp_path / str(pid)).mkdir()
    d0, d1, d2 = scripted_device(U0), scripted_device(U1), scripted_device(U2)
    d0.add_process(11, 4 * 2**30, sm_util=80).add_process(999, 1 * 2**30, sm_util=10)
    d1.add_process(12, 2 * 2**30, sm_util=20).add_process(12 + 1000, None, graphics=True)
    d2.add_process(999, 1 * 2**30)
    tree: set[int] = {10, 11}  # the root 10 uses no GPU; its child 11 does

    def pids() -> Collection[int]:
        return tree

    _, clock, src = source(d0, d1, d2, pids=pids, procfs_root=str(tmp_path))
    r = src.read()
    assert value(r, "gpu_process_memory_used_bytes", gpu=U0, pid=11) == 4 * 2**30
    assert value(r, "gpu_process_sm_utilization_ratio", gpu=U0, pid=11) == 0.8
    assert "gpu_process_memory_used_bytes" not in names(r, U1)  # 12 not in the tree yet
    assert not [x for x in r if dict(x.labels).get("pid") == "999"]  # not ours
    assert src.used_uuids() == {U0}
    tree.add(12)  # a new child
    r = src.read()  # the clock did not move: no new utilization sample
    assert value(r, "gpu_process_memory_used_bytes", gpu=U1, pid=12) == 2 * 2**30
    assert ("gpu_process_sm_utilization_ratio", labels(gpu=U0, pid=11)) not in by_key(r)
    clock.advance(1.0)
    r = src.read()
    assert value(r, "gpu_process_sm_utilization_ratio", gpu=U1, pid=12) == 0.2
    assert src.used_uuids() == {U0, U1}
    assert not src.pid_namespace_mismatch
    tree.discard(11)
    src.read()
    assert src.used_uuids() == {U0, U1}  # "so far"


def test_process_utilization_averages_samples_since_the_last_time_stamp() -> None:
    dev = scripted_device()
    dev.add_process(11, 1 << 30, sm_util=40)
    fake, clock, src = source(dev, pids=lambda: {11})
    src.read()
    # two NVML samples in one tick window: 40 then 60
    clock.advance(0.5)
    fake.nvmlInit()
    extra = fake.nvmlDeviceGetProcessUtilization(dev, 0)
    fake.nvmlShutdown()
    dev.processes[11].sm_util = 60
    clock.advance(0.5)
    original = fake.nvmlDeviceGetProcessUtilization

    def with_history(handle: FakeDevice, timeStamp: int) -> list[object]:
        return [*extra, *original(handle, timeStamp)]

    fake.nvmlDeviceGetProcessUtilization = with_history  # type: ignore[method-assign, assignment]
    r = src.read()
    assert value(r, "gpu_process_sm_utilization_ratio", gpu=U0, pid=11) == 0.5


def test_container_pid_namespace_mismatch_falls_back_to_whole_devices(tmp_path: Path) -> None:
    a, b = scripted_device(U0), scripted_device(U1)
    a.add_process(48213, 8 * 2**30)  # the host PID of our process; not visible in here
    _, _, src = source(a, b, pids=lambda: {1, 7}, procfs_root=str(tmp_path))
    src.read()
    assert not src.pid_namespace_mismatch  # one tick is not enough
    r = src.read()
    assert src.pid_namespace_mismatch
    assert src.used_uuids() == {U0}  # the device with processes, not the idle one
    assert not any(n.startswith("gpu_process_") for n in names(r))
    src.read()
    notes = [n for n in src.notes if "PID namespace" in n]
    assert len(notes) == 1
    assert "--pid=host" in notes[0] and "whole-device" in notes[0]


def test_foreign_processes_visible_here_are_not_a_namespace_mismatch(tmp_path: Path) -> None:
    (tmp_path / "777").mkdir()
    dev = scripted_device().add_process(777)
    _, _, src = source(dev, pids=lambda: {1}, procfs_root=str(tmp_path))
    for _ in range(3):
        src.read()
    assert not src.pid_namespace_mismatch
    assert src.used_uuids() == set()


def test_a_failing_pids_callable_does_not_stop_gpu_readings() -> None:
    def pids() -> Collection[int]:
        raise RuntimeError("tree gone")

    _, _, src = source(scripted_device(), pids=pids)
    assert "gpu_power_watts" in names(src.read())
    src.read()
    assert src.notes == ["could not list the monitored PIDs: tree gone"]


def test_process_utilization_not_supported_keeps_memory() -> None:
    dev = scripted_device().add_process(5)
    dev.unsupported.add("nvmlDeviceGetProcessUtilization")
    _, _, src = source(dev, pids=lambda: {5})
    for _ in range(2):
        r = src.read()
        assert "gpu_process_memory_used_bytes" in names(r)
        assert "gpu_process_sm_utilization_ratio" not in names(r)
    assert src.devices[0].capabilities["process_utilization"] is False


# -- CUDA_VISIBLE_DEVICES ---------------------------------------------------------------------
def three() -> list[FakeDevice]:
    return [FakeDevice(uuid=U0), FakeDevice(uuid=U1), FakeDevice(uuid=U2)]


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("1", [U1]),
        ("2,0", [U0, U2]),  # reported in NVML order
        (" 0 , 2 ", [U0, U2]),
        ("1,7,0", [U1]),  # 7 is invalid: it and everything after it are ignored
        ("1,1", [U1]),
        (U2, [U2]),
        ("GPU-22", [U2]),  # a unique prefix
        ("GPU-1111,2", []),  # ambiguous prefix: invalid from the start
        ("0,GPU-nope,1", [U0]),
        (f"{U1},0", [U0, U1]),
    ],
)
def test_cuda_visible_devices(spec: str, expected: list[str]) -> None:
    fake = FakeNVML(three(), ManualClock())
    if not expected:
        with pytest.raises(SourceUnavailable, match="no GPU matches"):
            NvidiaSource(fake, visible_devices=spec)
        assert fake.init_count == 0
        return
    src = NvidiaSource(fake, visible_devices=spec)
    assert [d.uuid for d in src.devices] == expected
    assert names(src.read()) and {dict(r.labels)["gpu"] for r in src.read()} == set(expected)
    invalid = any("matches no GPU" in n for n in src.notes)
    assert invalid == (spec in ("1,7,0", "0,GPU-nope,1"))


@pytest.mark.parametrize("spec", ["", "  ", "-1"])
def test_cuda_visible_devices_hiding_every_gpu(spec: str) -> None:
    with pytest.raises(SourceUnavailable, match="CUDA_VISIBLE_DEVICES"):
        NvidiaSource(FakeNVML(three()), visible_devices=spec)


def test_cuda_visible_devices_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2")
    assert [d.uuid for d in NvidiaSource(FakeNVML(three())).devices] == [U2]
    assert len(NvidiaSource(FakeNVML(three()), all_gpus=True).devices) == 3
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert len(NvidiaSource(FakeNVML(three())).devices) == 3


def test_cuda_visible_devices_mig_uuids() -> None:
    parent, _, b, other = mig_machine()
    fake = FakeNVML([parent, other], ManualClock())
    src = NvidiaSource(fake, visible_devices=b.uuid)
    assert [d.uuid for d in src.devices] == [U0, b.uuid]  # the parent comes for whole-GPU data
    assert src.devices[0].capabilities["shared"] is True
    old_style = f"MIG-{U0}/1/0"  # before R470: MIG-<GPU uuid>/<GPU instance>/<compute instance>
    src2 = NvidiaSource(FakeNVML([*mig_machine()[:1]]), visible_devices=old_style)
    assert [d.mig_index for d in src2.devices] == [None, 0]
    src3 = NvidiaSource(FakeNVML([*mig_machine()[:1]]), visible_devices="0")
    assert len(src3.devices) == 3  # a whole GPU brings all its instances


def test_indices_on_mixed_gpus_warn_about_cuda_device_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)
    devs = [FakeDevice("NVIDIA L4", U0), FakeDevice("NVIDIA H100 80GB HBM3", U1)]
    src = NvidiaSource(FakeNVML(devs), visible_devices="1")
    assert any("CUDA_DEVICE_ORDER=PCI_BUS_ID" in n for n in src.notes)
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    devs = [FakeDevice("NVIDIA L4", U0), FakeDevice("NVIDIA H100 80GB HBM3", U1)]
    assert NvidiaSource(FakeNVML(devs), visible_devices="1").notes == []


def test_parse_visible_devices() -> None:
    assert parse_visible_devices(None) is None
    assert parse_visible_devices("") == []
    assert parse_visible_devices("0, GPU-ab ,MIG-x") == ["0", "GPU-ab", "MIG-x"]


# -- GPM, XID, NVLink, clock events -----------------------------------------------------------
def test_gpm_metrics_on_an_h100_preset() -> None:
    clock = ManualClock()
    fake = from_preset("2xH100-SXM", clock=clock)
    src = NvidiaSource(fake, all_gpus=True, clock=clock)
    assert all(d.capabilities["gpm"] is True for d in src.devices)
    first = src.read()
    assert "gpu_sm_active_ratio" not in names(first)  # needs two samples
    clock.advance(1.0)
    r = src.read()
    gpm = {"gpu_sm_active_ratio", "gpu_sm_occupancy_ratio", "gpu_tensor_active_ratio",
           "gpu_dram_active_ratio"}  # fmt: skip
    for d in src.devices:
        assert gpm <= names(r, d.uuid)
    for x in r:
        if x.name in gpm:
            assert 0.0 <= x.value <= 1.0
    src.close()
    assert all(d.gpm_prev is None for d in src._all)  # samples freed


def test_gpm_values_come_from_the_sample_pair() -> None:
    dev = scripted_device()
    dev.gpm = True
    dev.script("gpm_tensor_active_percent", [10.0, 55.0])
    dev.script("gpm_sm_active_percent", 90.0)
    dev.script("gpm_dram_active_percent", None)
    _, clock, src = source(dev)
    src.read()
    clock.advance(1.0)
    r = src.read()
    assert value(r, "gpu_tensor_active_ratio", gpu=U0) == 0.55
    assert value(r, "gpu_sm_active_ratio", gpu=U0) == 0.9
    assert "gpu_dram_active_ratio" not in names(r)


def test_no_gpm_on_an_a100_preset() -> None:
    clock = ManualClock()
    src = NvidiaSource(from_preset("A100-80GB", clock=clock), all_gpus=True, clock=clock)
    caps = src.devices[0].capabilities
    assert caps["gpm"] is False and "before Hopper" in str(caps["gpm_why"])
    for _ in range(3):
        clock.advance(1)
        assert not names(src.read()) & {"gpu_sm_active_ratio", "gpu_tensor_active_ratio"}


def test_xid_events_counted_and_noted_once_per_code() -> None:
    a, b = scripted_device(U0), scripted_device(U1)
    _, _, src = source(a, b)
    src.read()
    a.xid(79).xid(79)
    b.xid(48)
    r = src.read()
    assert value(r, "gpu_xid_errors_total", gpu=U0) == 2
    assert value(r, "gpu_xid_errors_total", gpu=U1) == 1
    a.xid(79)
    assert value(src.read(), "gpu_xid_errors_total", gpu=U0) == 3
    assert len(src.notes) == 2
    assert re.fullmatch(rf"GPU {U0} reported XID 79 at {TIME_RE}", src.notes[0])


def test_xid_events_unsupported_are_absent_with_reason() -> None:
    dev = scripted_device()
    dev.unsupported.add("nvmlDeviceRegisterEvents")
    _, _, src = source(dev)
    assert "gpu_xid_errors_total" not in names(src.read())
    caps = src.devices[0].capabilities
    assert caps["xid_events"] is False and "cannot register" in str(caps["xid_events_why"])


def test_nvlink_absent_on_a_pcie_card() -> None:
    clock = ManualClock()
    src = NvidiaSource(from_preset("2xH100-PCIe", clock=clock), all_gpus=True, clock=clock)
    assert not {n for n in names(src.read()) if n.startswith("gpu_nvlink")}
    assert src.devices[0].capabilities["nvlink"] is False


def test_nvlink_counters_turning_unsupported() -> None:
    dev = scripted_device().script("nvlink_tx_kib", [1, None]).script("nvlink_rx_kib", [1, None])
    _, _, src = source(dev)
    assert "gpu_nvlink_receive_bytes_total" in names(src.read())
    assert "gpu_nvlink_receive_bytes_total" not in names(src.read())
    assert src.devices[0].capabilities["nvlink"] is False


# -- the per-tick field-value batch --------------------------------------------------------------
class FieldLog(FakeNVML):
    """The fake, logging the field ids of each nvmlDeviceGetFieldValues call; ``codes`` gives
    a field id the status NVML answers for it from the next call on (0: answered)."""

    def __init__(self, devices: list[FakeDevice], clock: ManualClock) -> None:
        super().__init__(devices, clock)
        self.asked: list[list[int]] = []
        self.codes: dict[int, int] = {}

    def nvmlDeviceGetFieldValues(
        self, handle: FakeDevice, fieldIds: Sequence[int | tuple[int, int]]
    ) -> list[Any]:
        values = super().nvmlDeviceGetFieldValues(handle, fieldIds)
        self.asked.append([i[0] if isinstance(i, tuple) else i for i in fieldIds])
        for v in values:
            code = self.codes.get(v.fieldId, 0)
            if code and v.nvmlReturn == 0:
                v.nvmlReturn = code
        return values


def field_log() -> tuple[FieldLog, NvidiaSource, FakeDevice]:
    dev = scripted_device().script("memory_temperature_c", 71).script("pcie_replays", 2)
    clock = ManualClock()
    fake = FieldLog([dev], clock)
    return fake, NvidiaSource(fake, all_gpus=True, clock=clock), dev


ROW_REMAP = [fm.NVML_FI_DEV_REMAPPED_COR, fm.NVML_FI_DEV_REMAPPED_UNC,
             fm.NVML_FI_DEV_REMAPPED_PENDING, fm.NVML_FI_DEV_REMAPPED_FAILURE]  # fmt: skip
NVLINK = [fm.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, fm.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX]


def test_field_values_and_nvlink_are_one_call_per_gpu_per_tick() -> None:
    fake, src, dev = field_log()
    before = dev.calls["nvmlDeviceGetFieldValues"]
    for _ in range(3):
        r = src.read()
    assert dev.calls["nvmlDeviceGetFieldValues"] - before == 3
    assert sorted(fake.asked[-1]) == sorted(
        [fm.NVML_FI_DEV_MEMORY_TEMP, fm.NVML_FI_DEV_PCIE_REPLAY_COUNTER, *ROW_REMAP, *NVLINK]
    )
    assert value(r, "gpu_nvlink_transmit_bytes_total", gpu=U0) == 2048 * 1024
    assert value(r, "gpu_memory_temperature_celsius", gpu=U0) == 71
    assert value(r, "gpu_pcie_replays_total", gpu=U0) == 2


def test_nvml_calls_per_gpu_per_tick() -> None:
    """What one tick asks NVML of an A100 running processes of the tree: one call per figure,
    the field values in one (a budget, so that a new reading adds its call knowingly)."""
    clock = ManualClock()
    fake = from_preset("1xA100-80GB", clock=clock)
    dev = fake.devices[0]
    dev.add_process(4000, 1 << 30, sm_util=40)
    src = NvidiaSource(fake, all_gpus=True, pids=lambda: {4000}, clock=clock)
    src.read()
    before = dev.total_calls
    for _ in range(4):
        clock.advance(1.0)
        src.read()
    # utilization, memory, power, power limit, energy, temperature, 2 clocks, clock events,
    # 2 PCIe, the field values (NVLink's among them), encoder, decoder, 2 ECC, compute and
    # graphics processes, process utilization; not the fan (refused on the first tick)
    assert (dev.total_calls - before) / 4 == 19


class ConstantLog(FakeNVML):
    """The fake, counting the module constants (NVML_*) looked up on it."""

    looked_up = 0

    def __getattr__(self, name: str) -> Any:
        ConstantLog.looked_up += 1
        return super().__getattr__(name)


def test_the_constants_a_tick_passes_are_looked_up_once() -> None:
    clock = ManualClock()
    fake = ConstantLog([scripted_device()], clock)
    src = NvidiaSource(fake, all_gpus=True, clock=clock)
    src.read()
    before = ConstantLog.looked_up
    for _ in range(3):
        assert "gpu_ecc_errors_total" in names(src.read())
    assert ConstantLog.looked_up == before


def test_a_refused_field_leaves_the_batch_and_the_rest_is_read() -> None:
    fake, src, _ = field_log()
    src.read()
    fake.codes[fm.NVML_FI_DEV_MEMORY_TEMP] = fm.NVML_ERROR_NOT_SUPPORTED
    fake.codes[fm.NVML_FI_DEV_REMAPPED_FAILURE] = fm.NVML_ERROR_NO_PERMISSION
    r = src.read()
    assert "gpu_memory_temperature_celsius" not in names(r)
    assert "gpu_row_remap_failure" not in names(r)
    assert value(r, "gpu_row_remap_pending", gpu=U0) == 0
    asked = len(fake.asked)
    for _ in range(2):
        r = src.read()
    for ids in fake.asked[asked:]:
        assert fm.NVML_FI_DEV_MEMORY_TEMP not in ids
        assert fm.NVML_FI_DEV_REMAPPED_FAILURE not in ids
        assert fm.NVML_FI_DEV_PCIE_REPLAY_COUNTER in ids
    assert value(r, "gpu_pcie_replays_total", gpu=U0) == 2
    caps = src.devices[0].capabilities
    assert caps["memory_temperature"] is False
    assert "not supported" in str(caps["memory_temperature_why"])
    assert caps["row_remap"] is True  # three of its four fields are still read
    assert "gpu_row_remap_failure permission denied" in str(caps["row_remap_why"])
    assert src.notes == []


def test_a_transient_field_error_skips_it_for_one_tick() -> None:
    fake, src, _ = field_log()
    src.read()
    fake.codes[fm.NVML_FI_DEV_PCIE_REPLAY_COUNTER] = fm.NVML_ERROR_UNKNOWN
    assert "gpu_pcie_replays_total" not in names(src.read())
    del fake.codes[fm.NVML_FI_DEV_PCIE_REPLAY_COUNTER]
    assert "gpu_pcie_replays_total" in names(src.read())
    assert src.devices[0].capabilities["pcie_replays"] is True


def test_a_field_saying_the_gpu_is_lost_loses_it() -> None:
    fake, src, _ = field_log()
    src.read()
    fake.codes[fm.NVML_FI_DEV_PCIE_REPLAY_COUNTER] = fm.NVML_ERROR_GPU_IS_LOST
    src.read()
    assert src.read() == []
    assert src.devices[0].capabilities["lost"] is True
    assert any("was lost" in n for n in src.notes)


def test_the_whole_batch_refused_says_why_on_each_capability() -> None:
    _, src, dev = field_log()
    dev.fail("nvmlDeviceGetFieldValues", fm.NVML_ERROR_NOT_SUPPORTED)
    before = dev.calls["nvmlDeviceGetFieldValues"]
    for _ in range(3):
        r = src.read()
    assert dev.calls["nvmlDeviceGetFieldValues"] - before == 1
    assert "gpu_utilization_ratio" in names(r)
    caps = src.devices[0].capabilities
    for feature in ("memory_temperature", "pcie_replays", "row_remap", "nvlink"):
        assert caps[feature] is False, feature
        assert "not supported" in str(caps[f"{feature}_why"]), feature
    assert "fields" not in caps


def test_decode_clock_events() -> None:
    assert decode_clock_events(0) == []
    assert decode_clock_events(0x1) == ["gpu_idle"]
    assert decode_clock_events(0x4 | 0x40) == ["sw_power_cap", "hw_thermal_slowdown"]
    every = decode_clock_events(0x1FF)
    assert every == [
        "gpu_idle", "applications_clocks_setting", "sw_power_cap", "hw_slowdown", "sync_boost",
        "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown",
        "display_clock_setting",
    ]  # fmt: skip
    assert decode_clock_events(0x4 | (1 << 20)) == ["sw_power_cap", "bit_20"]
    assert decode_clock_events(36.0) == ["sw_power_cap", "sw_thermal_slowdown"]  # from the store


def test_clock_event_bits_are_pynvml_constants() -> None:
    pynvml = pytest.importorskip("pynvml")
    camel = {
        "gpu_idle": "GpuIdle", "applications_clocks_setting": "ApplicationsClocksSetting",
        "sw_power_cap": "SwPowerCap", "hw_slowdown": "HwSlowdown", "sync_boost": "SyncBoost",
        "sw_thermal_slowdown": "SwThermalSlowdown", "hw_thermal_slowdown": "HwThermalSlowdown",
        "hw_power_brake_slowdown": "HwPowerBrakeSlowdown",
        "display_clock_setting": "DisplayClockSetting", "board_limit": "BoardLimit",
        "reliability": "Reliability",
    }  # fmt: skip
    for bit, name in CLOCK_EVENT_REASONS:
        const = getattr(pynvml, f"nvmlClocksEventReason{camel[name]}", None)
        if const is None:
            const = getattr(pynvml, f"nvmlClocksThrottleReason{camel[name]}")
        assert const == bit, name


# -- many GPUs and processes ---------------------------------------------------------------------


def test_every_tick_on_eight_fake_gpus_with_four_processes_each() -> None:
    """Every tick gives the same readings. What a tick costs (2 ms of CPU at most) is measured
    by benchmarks/bench_gpu.py, not here: a loaded CI machine makes any timing a coin toss."""
    clock = ManualClock()
    fake = from_preset("8xH100-SXM", clock=clock)
    pids = set()
    for i, d in enumerate(fake.devices):
        for k in range(4):
            d.add_process(1000 + 10 * i + k, 1 << 30)
            pids.add(1000 + 10 * i + k)
    src = NvidiaSource(fake, all_gpus=True, pids=lambda: pids, clock=clock)
    counts = []
    for _ in range(50):
        clock.advance(0.5)
        counts.append(len(src.read()))
    # 33 device readings + 3 about other processes + 4 processes x 2 on each GPU; the five GPM
    # ratios (graphics engine, SM active, occupancy, tensor, DRAM) need two GPM samples, so the
    # first tick lacks them.
    assert counts == [8 * (36 + 8 - 5)] + [8 * (36 + 8)] * 49


def test_with_the_real_binding_it_starts_or_says_why() -> None:
    """On a machine without a GPU the real pynvml fails to init: a clear SourceUnavailable."""
    pytest.importorskip("pynvml")
    try:
        src = NvidiaSource(all_gpus=True)
    except SourceUnavailable as e:
        assert str(e).startswith(("NVML could not start", "NVML found no NVIDIA GPU"))
    else:  # a GPU machine: one tick must work
        try:
            assert src.read()
        finally:
            src.close()
