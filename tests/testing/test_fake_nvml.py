"""The fake NVML: presets, scripting, errors, and its contract with nvidia-ml-py's pynvml."""

from __future__ import annotations

import inspect
import re

import pytest

from computewatch.testing import fake_nvml as fm
from computewatch.testing.fake_nvml import FakeDevice, FakeNVML, ManualClock, from_preset

UUID_RE = re.compile(r"^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def started(*devices: FakeDevice, clock: ManualClock | None = None) -> FakeNVML:
    fake = FakeNVML(list(devices), clock or ManualClock())
    fake.nvmlInit()
    return fake


# -- presets ----------------------------------------------------------------------------------
def test_preset_count_and_model() -> None:
    fake = from_preset("8xH100-SXM")
    fake.nvmlInit()
    assert fake.nvmlDeviceGetCount() == 8
    h = fake.nvmlDeviceGetHandleByIndex(3)
    assert fake.nvmlDeviceGetName(h) == "NVIDIA H100 80GB HBM3"
    assert fake.nvmlDeviceGetMemoryInfo(h).total == 80 * 2**30
    assert fake.nvmlDeviceGetEnforcedPowerLimit(h) == 700_000
    assert fake.nvmlDeviceGetArchitecture(h) == fm.NVML_DEVICE_ARCH_HOPPER
    assert fake.simulated is True


@pytest.mark.parametrize(
    ("preset", "count", "name"),
    [
        ("H100-SXM", 1, "NVIDIA H100 80GB HBM3"),
        ("2xa100-80gb", 2, "NVIDIA A100-SXM4-80GB"),
        (" 4 x L4 ", 4, "NVIDIA L4"),
        ("3xT4", 3, "Tesla T4"),
        ("1xH200-SXM", 1, "NVIDIA H200"),
    ],
)
def test_preset_parsing(preset: str, count: int, name: str) -> None:
    fake = from_preset(preset)
    assert len(fake.devices) == count
    assert {d.name for d in fake.devices} == {name}


@pytest.mark.parametrize("preset", ["8xH999", "2xMI300X", "x y", "8xTPU-v5p"])
def test_preset_unknown_lists_valid_models(preset: str) -> None:
    with pytest.raises(ValueError, match=r"H100-SXM.*") as info:
        from_preset(preset)
    assert "A100-80GB" in str(info.value)


@pytest.mark.parametrize("preset", ["0xH100-SXM", "65xH100-SXM"])
def test_preset_count_out_of_range(preset: str) -> None:
    with pytest.raises(ValueError, match="count must be 1 to 64"):
        from_preset(preset)


def test_preset_identity_is_deterministic_from_seed() -> None:
    a = [d.uuid for d in from_preset("8xH100-SXM", seed=1).devices]
    b = [d.uuid for d in from_preset("8xH100-SXM", seed=1).devices]
    c = [d.uuid for d in from_preset("8xH100-SXM", seed=2).devices]
    assert a == b
    assert a != c
    assert len(set(a)) == 8
    assert all(UUID_RE.match(u) for u in a)
    buses = [d.pci_bus_id for d in from_preset("8xH100-SXM").devices]
    assert len(set(buses)) == 8
    assert all(re.match(r"^00000000:[0-9A-F]{2}:00\.0$", b) for b in buses)


def test_preset_behaves_like_a_busy_device() -> None:
    clock = ManualClock()
    fake = from_preset("4xA100-80GB", seed=7, clock=clock)
    fake.nvmlInit()
    for h in fake.devices:
        limit = fake.nvmlDeviceGetEnforcedPowerLimit(h)
        utils = []
        for _ in range(50):
            clock.advance(0.25)
            u = fake.nvmlDeviceGetUtilizationRates(h)
            mem = fake.nvmlDeviceGetMemoryInfo(h, fm.nvmlMemory_v2)
            power = fake.nvmlDeviceGetPowerUsage(h)
            assert 0 <= u.gpu <= 100
            assert 0 < mem.used < mem.total
            assert mem.used + mem.reserved + mem.free == mem.total
            assert 0.1 * limit <= power <= limit
            assert 30 <= fake.nvmlDeviceGetTemperature(h, fm.NVML_TEMPERATURE_GPU) <= 80
            utils.append(u.gpu)
        assert len(set(utils)) > 3  # it varies
        assert 60 <= sum(utils) / len(utils) <= 100
    # Ampere: no GPM; Hopper: GPM
    assert fake.nvmlGpmQueryDeviceSupport(fake.devices[0]).isSupportedDevice == 0
    hopper = from_preset("H100-SXM")
    hopper.nvmlInit()
    assert hopper.nvmlGpmQueryDeviceSupport(hopper.devices[0]).isSupportedDevice == 1


def test_preset_energy_counter_grows_with_power() -> None:
    clock = ManualClock()
    fake = from_preset("H100-SXM", clock=clock)
    fake.nvmlInit()
    h = fake.devices[0]
    e0 = fake.nvmlDeviceGetTotalEnergyConsumption(h)
    assert e0 > 1e9  # a counter since the driver loaded, not since we started
    clock.advance(10.0)
    e1 = fake.nvmlDeviceGetTotalEnergyConsumption(h)
    # 10 s between idle (70 W) and the limit (700 W)
    assert 10 * 70_000 <= e1 - e0 <= 10 * 700_000


# -- scripting --------------------------------------------------------------------------------
def test_energy_counter_is_the_integral_of_power_over_the_fake_clock() -> None:
    clock = ManualClock()
    dev = FakeDevice().script("power_mw", 250_000)
    fake = started(dev, clock=clock)
    e0 = fake.nvmlDeviceGetTotalEnergyConsumption(dev)
    clock.advance(4.0)
    assert fake.nvmlDeviceGetTotalEnergyConsumption(dev) - e0 == 1_000_000  # 250 W x 4 s, mJ


def test_energy_counter_integrates_a_ramp_exactly() -> None:
    clock = ManualClock(start=0.0)
    dev = FakeDevice().script("power_mw", lambda t: 100_000 + 10_000 * t)  # 100 W + 10 W/s
    fake = started(dev, clock=clock)
    e0 = fake.nvmlDeviceGetTotalEnergyConsumption(dev)
    clock.advance(10.0)
    # integral of 100 + 10 t over 0..10 s = 1000 + 500 J
    assert fake.nvmlDeviceGetTotalEnergyConsumption(dev) - e0 == 1_500_000


def test_script_constant_sequence_callable_and_none() -> None:
    clock = ManualClock(start=0.0)
    dev = FakeDevice()
    dev.script("temperature_c", 55)
    dev.script("gpu_util_percent", [10, 20, 30])
    dev.script("sm_clock_mhz", lambda t: 1000 + t)
    dev.script("fan_percent", None)
    fake = started(dev, clock=clock)
    assert fake.nvmlDeviceGetTemperature(dev, fm.NVML_TEMPERATURE_GPU) == 55
    assert [fake.nvmlDeviceGetUtilizationRates(dev).gpu for _ in range(4)] == [10, 20, 30, 30]
    clock.advance(5)
    assert fake.nvmlDeviceGetClockInfo(dev, fm.NVML_CLOCK_SM) == 1005
    with pytest.raises(fake.NVMLError_NotSupported):
        fake.nvmlDeviceGetFanSpeed(dev)
    with pytest.raises(ValueError, match="scriptable fields"):
        dev.script("no_such_field", 1)


def test_memory_info_v1_and_v2_shapes() -> None:
    dev = FakeDevice(memory_total=1000, memory_reserved=50).script("memory_used_bytes", 300)
    fake = started(dev)
    v1 = fake.nvmlDeviceGetMemoryInfo(dev)
    assert (v1.total, v1.used, v1.free) == (1000, 350, 650)  # v1 "used" includes reserved
    v2 = fake.nvmlDeviceGetMemoryInfo(dev, fm.nvmlMemory_v2)
    assert (v2.total, v2.reserved, v2.used, v2.free) == (1000, 50, 300, 650)
    dev.missing.add("nvmlDeviceGetMemoryInfo_v2")
    with pytest.raises(fake.NVMLError_FunctionNotFound):
        fake.nvmlDeviceGetMemoryInfo(dev, fm.nvmlMemory_v2)


# -- errors -----------------------------------------------------------------------------------
def test_error_classes_map_codes_like_pynvml() -> None:
    e = fm.NVMLError(fm.NVML_ERROR_NOT_SUPPORTED)
    assert type(e) is fm.NVMLError_NotSupported
    assert isinstance(e, fm.NVMLError)
    assert e.value == 3
    assert str(e) == "Not Supported"
    assert fm.NVMLError_GpuIsLost().value == fm.NVML_ERROR_GPU_IS_LOST
    assert str(fm.NVMLError_LibraryNotFound()) == "NVML Shared Library Not Found"
    assert fm.NVMLError(12345).value == 12345
    assert type(fm.NVMLError(12345)) is fm.NVMLError
    fake = FakeNVML()
    assert fake.NVMLError_NoPermission is fm.NVMLError_NoPermission
    assert fake.NVML_ERROR_NO_PERMISSION == 4
    with pytest.raises(AttributeError):
        _ = fake.NVML_NO_SUCH_CONSTANT


def test_calls_before_init_raise_uninitialized() -> None:
    fake = FakeNVML([FakeDevice()])
    with pytest.raises(fake.NVMLError_Uninitialized):
        fake.nvmlDeviceGetCount()
    fake.nvmlInit()
    assert fake.nvmlDeviceGetCount() == 1
    fake.nvmlShutdown()
    with pytest.raises(fake.NVMLError_Uninitialized):
        fake.nvmlDeviceGetPowerUsage(fake.devices[0])


def test_fail_from_the_nth_call_on() -> None:
    dev = FakeDevice().fail("nvmlDeviceGetPowerUsage", fm.NVML_ERROR_NO_PERMISSION, at_call=3)
    fake = started(dev)
    fake.nvmlDeviceGetPowerUsage(dev)
    fake.nvmlDeviceGetPowerUsage(dev)
    for _ in range(3):
        with pytest.raises(fake.NVMLError_NoPermission):
            fake.nvmlDeviceGetPowerUsage(dev)
    fake.nvmlDeviceGetTemperature(dev, fm.NVML_TEMPERATURE_GPU)  # other functions unaffected


def test_fail_after_n_calls_and_transient_count() -> None:
    dev = FakeDevice()
    fake = started(dev)
    fake.nvmlDeviceGetPowerUsage(dev)
    dev.fail("nvmlDeviceGetPowerUsage", fm.NVML_ERROR_UNKNOWN, after=2, count=1)
    fake.nvmlDeviceGetPowerUsage(dev)  # call 2 still fine
    with pytest.raises(fake.NVMLError_Unknown):
        fake.nvmlDeviceGetPowerUsage(dev)  # call 3 fails
    fake.nvmlDeviceGetPowerUsage(dev)  # and only that one
    dev.fail("nvmlDeviceGetFanSpeed", fm.NVML_ERROR_TIMEOUT)  # default: from the next call
    with pytest.raises(fake.NVMLError_Timeout):
        fake.nvmlDeviceGetFanSpeed(dev)
    with pytest.raises(ValueError, match="not both"):
        dev.fail("x", 1, after=1, at_call=1)


def test_gpu_is_lost_fails_every_later_call() -> None:
    dev = FakeDevice().fail("nvmlDeviceGetUtilizationRates", fm.NVML_ERROR_GPU_IS_LOST, at_call=2)
    fake = started(dev)
    fake.nvmlDeviceGetUtilizationRates(dev)
    with pytest.raises(fake.NVMLError_GpuIsLost):
        fake.nvmlDeviceGetUtilizationRates(dev)
    with pytest.raises(fake.NVMLError_GpuIsLost):
        fake.nvmlDeviceGetPowerUsage(dev)
    assert dev.lost


def test_wildcard_failure_counts_every_call_on_the_device() -> None:
    dev = FakeDevice().fail("*", fm.NVML_ERROR_NO_PERMISSION, at_call=3)
    fake = started(dev)
    fake.nvmlDeviceGetPowerUsage(dev)
    fake.nvmlDeviceGetUUID(dev)
    with pytest.raises(fake.NVMLError_NoPermission):
        fake.nvmlDeviceGetName(dev)
    assert dev.calls == {
        "nvmlDeviceGetPowerUsage": 1,
        "nvmlDeviceGetUUID": 1,
        "nvmlDeviceGetName": 1,
    }


def test_library_level_failures() -> None:
    fake = FakeNVML([FakeDevice()]).fail("nvmlInit", fm.NVML_ERROR_DRIVER_NOT_LOADED)
    with pytest.raises(fake.NVMLError_DriverNotLoaded, match="Driver Not Loaded"):
        fake.nvmlInit()


# -- processes, MIG, events, GPM, fields ------------------------------------------------------
def test_processes_and_process_utilization() -> None:
    clock = ManualClock()
    dev = FakeDevice().add_process(10, 1 << 30, sm_util=40).add_process(11, None, graphics=True)
    fake = started(dev, clock=clock)
    compute = fake.nvmlDeviceGetComputeRunningProcesses(dev)
    graphics = fake.nvmlDeviceGetGraphicsRunningProcesses(dev)
    assert [(p.pid, p.usedGpuMemory) for p in compute] == [(10, 1 << 30)]
    assert [(p.pid, p.usedGpuMemory) for p in graphics] == [(11, None)]
    samples = fake.nvmlDeviceGetProcessUtilization(dev, 0)
    assert {s.pid: s.smUtil for s in samples} == {10: 40, 11: 50}
    ts = samples[0].timeStamp
    assert ts == int(clock() * 1e6)
    with pytest.raises(fake.NVMLError_NotFound):  # nothing newer than ts
        fake.nvmlDeviceGetProcessUtilization(dev, ts)
    clock.advance(1)
    assert fake.nvmlDeviceGetProcessUtilization(dev, ts)[0].timeStamp > ts


def test_mig_instances() -> None:
    parent = FakeDevice("NVIDIA A100-SXM4-80GB")
    a = parent.add_mig_instance(10 * 2**30, profile="1g.10gb")
    b = parent.add_mig_instance(20 * 2**30, profile="2g.20gb")
    a.add_process(7)
    fake = started(parent)
    assert a.uuid.startswith("MIG-") and a.uuid != b.uuid
    assert fake.nvmlDeviceGetMigMode(parent) == [1, 1]
    assert fake.nvmlDeviceGetMaxMigDeviceCount(parent) == 7
    assert fake.nvmlDeviceGetMigDeviceHandleByIndex(parent, 1) is b
    with pytest.raises(fake.NVMLError_NotFound):
        fake.nvmlDeviceGetMigDeviceHandleByIndex(parent, 2)
    assert fake.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(a) is parent
    assert fake.nvmlDeviceIsMigDeviceHandle(a) == 1
    assert fake.nvmlDeviceGetGpuInstanceId(b) == 2
    assert fake.nvmlDeviceGetMemoryInfo(a).total == 10 * 2**30
    assert fake.nvmlDeviceGetName(b) == "NVIDIA A100-SXM4-80GB MIG 2g.20gb"
    with pytest.raises(fake.NVMLError_NotSupported):
        fake.nvmlDeviceGetUtilizationRates(a)
    with pytest.raises(fake.NVMLError_NotSupported):
        fake.nvmlDeviceGetUtilizationRates(parent)  # no whole-GPU utilization in MIG mode
    assert [p.pid for p in fake.nvmlDeviceGetComputeRunningProcesses(a)] == [7]
    procs = fake.nvmlDeviceGetComputeRunningProcesses(parent)
    assert [(p.pid, p.gpuInstanceId) for p in procs] == [(7, 1)]
    assert fake.nvmlDeviceGetHandleByUUID(b.uuid) is b


def test_xid_events() -> None:
    dev = FakeDevice()
    fake = started(dev)
    es = fake.nvmlEventSetCreate()
    fake.nvmlDeviceRegisterEvents(dev, fm.nvmlEventTypeXidCriticalError, es)
    with pytest.raises(fake.NVMLError_Timeout):
        fake.nvmlEventSetWait(es, 0)
    dev.xid(79)
    ev = fake.nvmlEventSetWait(es, 0)
    assert (ev.device, ev.eventType, ev.eventData) == (dev, fm.nvmlEventTypeXidCriticalError, 79)
    fake.nvmlEventSetFree(es)
    other = FakeDevice(unsupported={"nvmlDeviceRegisterEvents"})
    fake2 = started(other)
    with pytest.raises(fake2.NVMLError_NotSupported):
        fake2.nvmlDeviceRegisterEvents(
            other, fm.nvmlEventTypeXidCriticalError, fake2.nvmlEventSetCreate()
        )


def test_gpm_samples_and_metrics() -> None:
    clock = ManualClock()
    dev = FakeDevice(gpm=True).script("gpm_sm_active_percent", [40.0, 60.0])
    fake = started(dev, clock=clock)
    s1, s2 = fake.nvmlGpmSampleAlloc(), fake.nvmlGpmSampleAlloc()
    fake.nvmlGpmSampleGet(dev, s1)
    clock.advance(1)
    fake.nvmlGpmSampleGet(dev, s2)
    get = fake.c_nvmlGpmMetricsGet_t()
    get.version = fm.NVML_GPM_METRICS_GET_VERSION
    get.numMetrics = 2
    get.sample1, get.sample2 = s1, s2
    get.metrics[0].metricId = fm.NVML_GPM_METRIC_SM_UTIL
    get.metrics[1].metricId = 999
    fake.nvmlGpmMetricsGet(get)
    assert (get.metrics[0].nvmlReturn, get.metrics[0].value) == (0, 60.0)
    assert get.metrics[1].nvmlReturn == fm.NVML_ERROR_NOT_SUPPORTED
    no_gpm = FakeDevice()
    fake2 = started(no_gpm)
    assert fake2.nvmlGpmQueryDeviceSupport(no_gpm).isSupportedDevice == 0
    with pytest.raises(fake2.NVMLError_NotSupported):
        fake2.nvmlGpmSampleGet(no_gpm, fake2.nvmlGpmSampleAlloc())


def test_nvlink_field_values() -> None:
    dev = FakeDevice(nvlink_links=12).script("nvlink_tx_kib", 1200).script("nvlink_rx_kib", 600)
    fake = started(dev)
    link_count, tx, rx, per_link, bogus = fake.nvmlDeviceGetFieldValues(
        dev,
        [
            fm.NVML_FI_DEV_NVLINK_LINK_COUNT,
            (fm.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, 0xFFFFFFFF),
            (fm.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, 0xFFFFFFFF),
            (fm.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, 0),
            4242,
        ],
    )
    assert link_count.value.uiVal == 12
    assert (tx.nvmlReturn, tx.value.ullVal) == (0, 1200)
    assert rx.value.ullVal == 600
    assert per_link.value.ullVal == 100
    assert bogus.nvmlReturn == fm.NVML_ERROR_NOT_SUPPORTED


def test_pci_info_is_bytes_like_pynvml() -> None:
    dev = FakeDevice(pci_bus_id="00000000:3A:00.0")
    fake = started(dev)
    info = fake.nvmlDeviceGetPciInfo(dev)
    assert info.busId == b"00000000:3A:00.0"
    assert (info.bus, info.device) == (0x3A, 0)
    assert fake.nvmlDeviceGetHandleByPciBusId("00000000:3a:00.0") is dev


def test_default_identities_are_unique() -> None:
    fake = FakeNVML([FakeDevice(), FakeDevice(), FakeDevice("NVIDIA L4", uuid="GPU-abc")])
    uuids = [d.uuid for d in fake.devices]
    assert len(set(uuids)) == 3
    assert uuids[2] == "GPU-abc"
    with pytest.raises(ValueError, match="another FakeNVML"):
        FakeNVML([fake.devices[0]])


# -- the contract with the real binding -------------------------------------------------------
def _fake_functions() -> dict[str, inspect.Signature]:
    return {
        name: inspect.signature(getattr(FakeNVML, name))
        for name in dir(FakeNVML)
        if name.startswith("nvml") and callable(getattr(FakeNVML, name))
    }


def test_contract_functions_match_pynvml() -> None:
    pynvml = pytest.importorskip("pynvml")
    for name, sig in _fake_functions().items():
        real = getattr(pynvml, name, None)
        assert real is not None, f"pynvml has no {name}"
        fake_params = [p for p in sig.parameters if p != "self"]
        real_params = list(inspect.signature(real).parameters)
        assert fake_params == real_params, f"{name}: {fake_params} != {real_params}"


def test_contract_errors_and_constants_match_pynvml() -> None:
    pynvml = pytest.importorskip("pynvml")
    for name, value in vars(fm).items():
        if name.startswith("NVMLError_"):
            real = getattr(pynvml, name)
            assert real().value == value().value, name
        elif name.startswith(("NVML_", "nvml")) and isinstance(value, int):
            assert getattr(pynvml, name) == value, name
    for name in dir(pynvml):
        if name.startswith("NVMLError_") and name not in ("NVMLError_Unknown",):
            assert hasattr(FakeNVML, name), f"the fake lacks {name}"
