"""The fake amdsmi: presets, scripting, errors, result shapes, and its contract with amdsmi."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import re
from pathlib import Path
from typing import Any

import pytest

from computewatch.testing import fake_amdsmi as fa
from computewatch.testing.fake_amdsmi import FakeAmdDevice, FakeAmdSmi, amd_from_preset, amd_uuid
from computewatch.testing.fake_nvml import ManualClock

AMD_UUID_RE = re.compile(r"^[0-9a-f]{8}-0000-1000-80[0-9a-f]{2}-[0-9a-f]{12}$")
T = fa.AmdSmiTemperatureType
M = fa.AmdSmiTemperatureMetric
CLK = fa.AmdSmiClkType


def started(*devices: FakeAmdDevice, clock: ManualClock | None = None, **kw: Any) -> FakeAmdSmi:
    fake = FakeAmdSmi(list(devices), clock or ManualClock(), **kw)
    fake.amdsmi_init(fa.AmdSmiInitFlags.INIT_AMD_GPUS)
    return fake


# -- presets ----------------------------------------------------------------------------------
def test_preset_count_and_model() -> None:
    fake = amd_from_preset("8xMI300X")
    fake.amdsmi_init()
    handles = fake.amdsmi_get_processor_handles()
    assert len(handles) == 8
    h = handles[3]
    asic = fake.amdsmi_get_gpu_asic_info(h)
    assert asic["market_name"] == "AMD Instinct MI300X"
    assert asic["device_id"] == "0x74a1"
    assert asic["target_graphics_version"] == "gfx942"
    assert fake.amdsmi_get_gpu_vram_usage(h)["vram_total"] == 192 * 1024  # MB
    assert fake.amdsmi_get_power_cap_info(h)["power_cap"] == 750_000_000  # µW
    assert fake.simulated is True


@pytest.mark.parametrize(
    ("preset", "count", "name"),
    [
        ("MI300X", 1, "AMD Instinct MI300X"),
        ("2xmi300x", 2, "AMD Instinct MI300X"),
        (" 4 x MI250X ", 8, "AMD Instinct MI250X"),  # packages: two GCDs each
        ("1×MI250X", 2, "AMD Instinct MI250X"),
    ],
)
def test_preset_parsing(preset: str, count: int, name: str) -> None:
    fake = amd_from_preset(preset)
    assert len(fake.devices) == count
    assert {d.market_name for d in fake.devices} == {name}


@pytest.mark.parametrize("preset", ["8xH100-SXM", "2xMI999", "x y", "8xMI300"])
def test_preset_unknown_lists_amd_models(preset: str) -> None:
    with pytest.raises(ValueError, match="MI250X, MI300X"):
        amd_from_preset(preset)


@pytest.mark.parametrize("preset", ["0xMI300X", "65xMI300X"])
def test_preset_count_out_of_range(preset: str) -> None:
    with pytest.raises(ValueError, match="count must be 1 to 64"):
        amd_from_preset(preset)


def test_preset_identity_is_deterministic_from_seed() -> None:
    a = [d.uuid for d in amd_from_preset("8xMI300X", seed=1).devices]
    b = [d.uuid for d in amd_from_preset("8xMI300X", seed=1).devices]
    c = [d.uuid for d in amd_from_preset("8xMI300X", seed=2).devices]
    assert a == b
    assert a != c
    assert len(set(a)) == 8
    assert all(AMD_UUID_RE.match(u) for u in a)
    assert all(u[4:8] == "74a1" for u in a)  # the PCI device id sits in the UUID
    mi250 = [d.uuid for d in amd_from_preset("MI250X").devices]
    assert len(set(mi250) | set(a)) == 10


def test_amd_uuid_layout_is_amdsmi_uuid_gen() -> None:
    # amd_smi_uuid.cc: time_low = serial[63:56] | index | device id; then 0000, 1000,
    # 80 | serial[55:48], serial[47:0].
    assert amd_uuid(0x0123456789ABCDEF, 0x74A1) == "01ff74a1-0000-1000-8023-456789abcdef"
    assert amd_uuid(0x0123456789ABCDEF, 0x74A1, 0) == "010074a1-0000-1000-8023-456789abcdef"


def test_preset_mi300x_behaves_like_a_busy_device() -> None:
    clock = ManualClock()
    fake = amd_from_preset("4xMI300X", seed=7, clock=clock)
    fake.amdsmi_init()
    for h in fake.devices:
        cap_w = fake.amdsmi_get_power_cap_info(h)["power_cap"] / 1e6
        utils = []
        for _ in range(50):
            clock.advance(0.25)
            act = fake.amdsmi_get_gpu_activity(h)
            vram = fake.amdsmi_get_gpu_vram_usage(h)
            power = fake.amdsmi_get_power_info(h)
            assert 0 <= act["gfx_activity"] <= 100
            assert 0 < vram["vram_used"] < vram["vram_total"]
            assert power["average_socket_power"] == "N/A"  # MI300: current power only
            assert 0.18 * cap_w - 1 <= power["current_socket_power"] <= cap_w
            assert power["socket_power"] == power["current_socket_power"]
            hot = fake.amdsmi_get_temp_metric(h, T.HOTSPOT, M.CURRENT)
            assert 35 <= hot <= 90
            utils.append(act["gfx_activity"])
        assert len(set(utils)) > 3  # it varies
        assert 60 <= sum(utils) / len(utils) <= 100
        with pytest.raises(fa.AmdSmiLibraryException) as info:  # no edge sensor on MI300
            fake.amdsmi_get_temp_metric(h, T.EDGE, M.CURRENT)
        assert info.value.get_error_code() == fa.AMDSMI_STATUS_NOT_SUPPORTED


def test_preset_mi250x_reports_package_power_on_the_first_gcd() -> None:
    clock = ManualClock()
    fake = amd_from_preset("MI250X", clock=clock)
    fake.amdsmi_init()
    first, second = fake.devices
    assert first.vram_total == second.vram_total == 64 * 2**30  # half of the 128 GiB package
    e0 = [fake.amdsmi_get_energy_count(h)["energy_accumulator"] for h in fake.devices]
    clock.advance(10.0)
    p = [fake.amdsmi_get_power_info(h) for h in fake.devices]
    assert p[0]["current_socket_power"] == "N/A"  # MI200: average power
    assert 90 <= p[0]["average_socket_power"] <= 500
    assert p[1]["average_socket_power"] == 0
    e1 = [fake.amdsmi_get_energy_count(h)["energy_accumulator"] for h in fake.devices]
    assert e1[0] > e0[0] and e1[1] == e0[1]
    assert fake.amdsmi_get_temp_metric(first, T.EDGE, M.CURRENT) > 30


def test_preset_energy_counter_grows_with_power() -> None:
    clock = ManualClock()
    fake = amd_from_preset("MI300X", clock=clock)
    fake.amdsmi_init()
    h = fake.devices[0]
    first = fake.amdsmi_get_energy_count(h)
    assert first["energy_accumulator"] > 2**32  # since the driver loaded, not since we started
    clock.advance(10.0)
    second = fake.amdsmi_get_energy_count(h)
    joules = (second["energy_accumulator"] - first["energy_accumulator"]) * 15.259e-6
    assert 10 * 135 <= joules <= 10 * 750  # between idle and the cap for 10 s
    assert second["timestamp"] - first["timestamp"] == 10_000_000_000  # ns


# -- scripting --------------------------------------------------------------------------------
def test_energy_counter_is_the_integral_of_power_over_the_fake_clock() -> None:
    clock = ManualClock(start=0.0)
    dev = FakeAmdDevice(counter_resolution=10.0).script("power_w", lambda t: 100 + 10 * t)
    fake = started(dev, clock=clock)
    c0 = fake.amdsmi_get_energy_count(dev)
    assert c0["counter_resolution"] == 10.0
    clock.advance(10.0)
    c1 = fake.amdsmi_get_energy_count(dev)
    # integral of 100 + 10 t W over 0..10 s = 1500 J = 1.5e9 µJ = 1.5e8 counts of 10 µJ
    assert c1["energy_accumulator"] - c0["energy_accumulator"] == 150_000_000


def test_script_constant_sequence_callable_and_none() -> None:
    clock = ManualClock(start=0.0)
    dev = FakeAmdDevice()
    dev.script("hotspot_c", 55)
    dev.script("gfx_activity", [10, 20, 30])
    dev.script("gfx_clock_mhz", lambda t: 1000 + t)
    dev.script("umc_activity", None)
    dev.script("vram_c", None)
    fake = started(dev, clock=clock)
    assert fake.amdsmi_get_temp_metric(dev, T.HOTSPOT, M.CURRENT) == 55
    assert fake.amdsmi_get_temp_metric(dev, T.JUNCTION, M.CURRENT) == 55  # an alias
    activity = [fake.amdsmi_get_gpu_activity(dev) for _ in range(4)]
    assert [a["gfx_activity"] for a in activity] == [10, 20, 30, 30]
    assert activity[0]["umc_activity"] == "N/A"  # None in a dict: amdsmi's N/A
    clock.advance(5)
    assert fake.amdsmi_get_clock_info(dev, CLK.GFX)["clk"] == 1005
    with pytest.raises(fa.AmdSmiLibraryException) as info:  # None for a bare number
        fake.amdsmi_get_temp_metric(dev, T.VRAM, M.CURRENT)
    assert info.value.get_error_code() == fa.AMDSMI_STATUS_NOT_SUPPORTED
    with pytest.raises(ValueError, match="scriptable fields"):
        dev.script("no_such_field", 1)


def test_vram_is_reported_in_mb() -> None:
    dev = FakeAmdDevice(vram_total=8 * 2**30).script("vram_used_bytes", 3 * 2**30 + 12345)
    fake = started(dev)
    assert fake.amdsmi_get_gpu_vram_usage(dev) == {"vram_total": 8192, "vram_used": 3072}


def test_power_info_shapes() -> None:
    dev = FakeAmdDevice(power_field="average_socket_power", power_cap_w=500)
    dev.script("power_w", 321.4)
    fake = started(dev)
    p = fake.amdsmi_get_power_info(dev)
    assert p["socket_power"] == p["average_socket_power"] == 321
    assert p["current_socket_power"] == "N/A"
    assert p["power_limit"] == 500
    cap = fake.amdsmi_get_power_cap_info(dev)
    assert cap["power_cap"] == cap["max_power_cap"] == 500_000_000
    with pytest.raises(ValueError, match="power_field"):
        FakeAmdDevice(power_field="watts")


def test_clock_types_and_unsupported_ones() -> None:
    dev = FakeAmdDevice().script("mem_clock_mhz", 1300)
    fake = started(dev)
    info = fake.amdsmi_get_clock_info(dev, CLK.MEM)
    assert set(info) == {"clk", "min_clk", "max_clk", "clk_locked", "clk_deep_sleep"}
    assert info["clk"] == 1300
    with pytest.raises(fa.AmdSmiLibraryException):
        fake.amdsmi_get_clock_info(dev, CLK.DCLK0)


# -- errors -----------------------------------------------------------------------------------
def test_library_exception_is_built_like_amdsmis() -> None:
    e = fa.AmdSmiLibraryException(fa.AMDSMI_STATUS_NO_PERM)
    assert isinstance(e, fa.AmdSmiException)
    assert e.get_error_code() == e.err_code == 10
    assert e.get_error_info() == "AMDSMI_STATUS_NO_PERM - Permission Denied"
    assert e.get_error_info(detailed=False) == "AMDSMI_STATUS_NO_PERM"
    assert str(e) == "Error code:\n\t10 | AMDSMI_STATUS_NO_PERM - Permission Denied"
    assert fa.AmdSmiLibraryException(-2).get_error_code() == 2  # amdsmi takes abs()
    assert "UNKNOWN" in fa.AmdSmiLibraryException(4242).get_error_info()
    assert fa.AmdSmiRetryException().get_error_code() == fa.AMDSMI_STATUS_RETRY
    fake = FakeAmdSmi()
    assert fake.AmdSmiLibraryException is fa.AmdSmiLibraryException
    assert fake.amdsmi_wrapper.AMDSMI_STATUS_NOT_SUPPORTED == 2
    assert fake.amdsmi_wrapper.AMDSMI_STATUS_NOT_FOUND == 31
    with pytest.raises(AttributeError):
        _ = fake.amdsmi_wrapper.AMDSMI_NO_SUCH_CONSTANT


def test_retry_and_timeout_raise_their_subclasses() -> None:
    dev = FakeAmdDevice()
    dev.fail("amdsmi_get_gpu_activity", fa.AMDSMI_STATUS_RETRY, count=1)
    dev.fail("amdsmi_get_power_info", fa.AMDSMI_STATUS_TIMEOUT, count=1)
    fake = started(dev)
    with pytest.raises(fa.AmdSmiRetryException):
        fake.amdsmi_get_gpu_activity(dev)
    with pytest.raises(fa.AmdSmiTimeoutException):
        fake.amdsmi_get_power_info(dev)
    fake.amdsmi_get_gpu_activity(dev)  # transient


def test_wrong_argument_types_raise_parameter_exceptions() -> None:
    dev = FakeAmdDevice()
    fake = started(dev)
    with pytest.raises(fa.AmdSmiParameterException):
        fake.amdsmi_get_gpu_activity(object())  # type: ignore[arg-type]
    with pytest.raises(fa.AmdSmiParameterException):
        fake.amdsmi_get_temp_metric(dev, 1, M.CURRENT)  # type: ignore[arg-type]
    with pytest.raises(fa.AmdSmiParameterException):
        fake.amdsmi_init(2)  # type: ignore[arg-type]
    other = started(FakeAmdDevice())
    with pytest.raises(fa.AmdSmiParameterException):
        other.amdsmi_get_gpu_activity(dev)  # a handle of another library instance


def test_calls_before_init_raise_not_init() -> None:
    fake = FakeAmdSmi([FakeAmdDevice()])
    with pytest.raises(fa.AmdSmiLibraryException) as info:
        fake.amdsmi_get_processor_handles()
    assert info.value.get_error_code() == fa.AMDSMI_STATUS_NOT_INIT
    fake.amdsmi_init()
    assert len(fake.amdsmi_get_processor_handles()) == 1
    assert fake.init_flags == [fa.AmdSmiInitFlags.INIT_AMD_GPUS]
    fake.amdsmi_shut_down()
    assert (fake.init_count, fake.shutdown_count) == (0, 1)
    with pytest.raises(fa.AmdSmiLibraryException):
        fake.amdsmi_get_power_info(fake.devices[0])


def test_fail_from_the_nth_call_after_n_and_transient() -> None:
    dev = FakeAmdDevice().fail("amdsmi_get_power_info", fa.AMDSMI_STATUS_NO_PERM, at_call=3)
    fake = started(dev)
    fake.amdsmi_get_power_info(dev)
    fake.amdsmi_get_power_info(dev)
    for _ in range(2):
        with pytest.raises(fa.AmdSmiLibraryException, match="Permission Denied"):
            fake.amdsmi_get_power_info(dev)
    fake.amdsmi_get_gpu_activity(dev)  # other functions unaffected
    dev.fail("amdsmi_get_gpu_activity", fa.AMDSMI_STATUS_BUSY, after=2, count=1)
    fake.amdsmi_get_gpu_activity(dev)  # call 2 still fine
    with pytest.raises(fa.AmdSmiLibraryException, match="busy"):
        fake.amdsmi_get_gpu_activity(dev)
    fake.amdsmi_get_gpu_activity(dev)
    with pytest.raises(ValueError, match="not both"):
        dev.fail("x", 1, after=1, at_call=1)


def test_wildcard_failure_counts_every_call_on_the_device() -> None:
    dev = FakeAmdDevice().fail("*", fa.AMDSMI_STATUS_IO, at_call=3)
    fake = started(dev)
    fake.amdsmi_get_power_info(dev)
    fake.amdsmi_get_gpu_device_uuid(dev)
    with pytest.raises(fa.AmdSmiLibraryException):
        fake.amdsmi_get_gpu_asic_info(dev)
    assert dev.calls == {
        "amdsmi_get_power_info": 1,
        "amdsmi_get_gpu_device_uuid": 1,
        "amdsmi_get_gpu_asic_info": 1,
    }


def test_a_lost_device_fails_every_call_with_not_found() -> None:
    dev = FakeAmdDevice()
    fake = started(dev)
    fake.amdsmi_get_gpu_activity(dev)
    dev.lose()
    for call in (
        lambda: fake.amdsmi_get_gpu_activity(dev),
        lambda: fake.amdsmi_get_gpu_asic_info(dev),
        lambda: fake.amdsmi_get_temp_metric(dev, T.HOTSPOT, M.CURRENT),
    ):
        with pytest.raises(fa.AmdSmiLibraryException) as info:
            call()
        assert info.value.get_error_code() == fa.AMDSMI_STATUS_NOT_FOUND


def test_unsupported_functions_per_device() -> None:
    dev = FakeAmdDevice(unsupported={"amdsmi_get_energy_count"})
    fake = started(dev)
    with pytest.raises(fa.AmdSmiLibraryException, match="not supported"):
        fake.amdsmi_get_energy_count(dev)


def test_library_level_failures() -> None:
    fake = FakeAmdSmi([FakeAmdDevice()]).fail("amdsmi_init", fa.AMDSMI_STATUS_DRIVER_NOT_LOADED)
    with pytest.raises(fa.AmdSmiLibraryException, match="Driver not loaded"):
        fake.amdsmi_init()
    assert fake.init_count == 0


# -- processes, identity, versions ------------------------------------------------------------
def test_process_list_dicts() -> None:
    dev = FakeAmdDevice().add_process(10, 3 << 30, gtt_bytes=1 << 20, name="train.py")
    dev.add_process(11)
    fake = started(dev)
    procs = fake.amdsmi_get_gpu_process_list(dev)
    assert [p["pid"] for p in procs] == [10, 11]
    p = procs[0]
    assert p["name"] == "train.py"
    assert p["memory_usage"] == {"gtt_mem": 1 << 20, "cpu_mem": 0, "vram_mem": 3 << 30}
    assert p["mem"] == (3 << 30) + (1 << 20)
    assert p["cu_occupancy"] == "N/A"
    dev.remove_process(10)
    assert [p["pid"] for p in fake.amdsmi_get_gpu_process_list(dev)] == [11]


def test_identity_and_enumeration_info() -> None:
    a = FakeAmdDevice(serial=0xABCDEF0123456789)
    b = FakeAmdDevice(uuid="custom-uuid", hip_id=0)
    fake = started(a, b, cpu_nodes=2)
    assert fake.amdsmi_get_gpu_device_uuid(a) == amd_uuid(0xABCDEF0123456789, 0x74A1)
    assert fake.amdsmi_get_gpu_device_uuid(b) == "custom-uuid"
    assert fake.amdsmi_get_gpu_asic_info(a)["asic_serial"] == "0xABCDEF0123456789"
    ea, eb = fake.amdsmi_get_gpu_enumeration_info(a), fake.amdsmi_get_gpu_enumeration_info(b)
    assert (ea["hip_id"], ea["hsa_id"], ea["hip_uuid"]) == (0, 2, "GPU-abcdef0123456789")
    assert (eb["hip_id"], eb["hsa_id"]) == (0, 2)  # scripted: ROCm numbers it first too
    with pytest.raises(ValueError, match="another FakeAmdSmi"):
        FakeAmdSmi([a])


def test_legacy_shapes() -> None:
    dev = FakeAmdDevice().add_process(10, 2 << 30)
    fake = started(dev, legacy=True)
    assert "energy_accumulator" not in fake.amdsmi_get_energy_count(dev)
    assert "power" in fake.amdsmi_get_energy_count(dev)  # the name before amdsmi 6.2.1
    assert set(fake.amdsmi_get_clock_info(dev, CLK.GFX)) == {"cur_clk", "min_clk", "max_clk"}
    assert "socket_power" not in fake.amdsmi_get_power_info(dev)
    assert not hasattr(fake, "amdsmi_get_gpu_enumeration_info")
    assert getattr(fake, "amdsmi_get_gpu_enumeration_info", None) is None
    assert fake.amdsmi_get_gpu_process_list(dev) == [10]
    info = fake.amdsmi_get_gpu_process_info(dev, 10)
    assert info["memory_usage"]["vram_mem"] == 2 << 30
    with pytest.raises(fa.AmdSmiLibraryException):
        fake.amdsmi_get_gpu_process_info(dev, 99)
    modern = started(FakeAmdDevice())
    assert not hasattr(modern, "amdsmi_get_gpu_process_info")  # removed from later bindings
    assert hasattr(modern, "amdsmi_get_gpu_enumeration_info")


def test_hide_functions() -> None:
    fake = FakeAmdSmi([FakeAmdDevice()], missing={"amdsmi_get_energy_count"})
    assert not hasattr(fake, "amdsmi_get_energy_count")
    fake.hide("amdsmi_get_clock_info")
    assert not hasattr(fake, "amdsmi_get_clock_info")
    assert not hasattr(fake, "amdsmi_get_energy_count")
    assert hasattr(FakeAmdSmi([FakeAmdDevice()]), "amdsmi_get_energy_count")  # per instance
    assert isinstance(fake, FakeAmdSmi)
    with pytest.raises(ValueError, match="not a function"):
        fake.hide("nvmlInit")


# -- the contract with the real package -------------------------------------------------------
# amdsmi cannot be imported without libamd_smi.so (its wrapper loads the library at import), so
# the contract is read from the installed package's source where the import fails.
class _Static:
    """amdsmi's functions, status constants and enums, read from its source with ``ast``."""

    def __init__(self, package_dir: Path) -> None:
        wrapper = ast.parse((package_dir / "amdsmi_wrapper.py").read_text())
        self.constants: dict[str, int] = {}
        for node in wrapper.body:
            if (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, int)
            ):
                self.constants[node.targets[0].id] = node.value.value
        interface = ast.parse((package_dir / "amdsmi_interface.py").read_text())
        self.functions: dict[str, list[str]] = {}
        self.enums: dict[str, dict[str, int]] = {}
        for node in interface.body:
            if isinstance(node, ast.FunctionDef):
                self.functions[node.name] = [a.arg for a in node.args.args]
            elif isinstance(node, ast.ClassDef):
                members: dict[str, int] = {}
                for item in node.body:
                    if (
                        isinstance(item, ast.Assign)
                        and isinstance(item.targets[0], ast.Name)
                        and isinstance(item.value, ast.Attribute)
                        and item.value.attr in self.constants
                    ):
                        members[item.targets[0].id] = self.constants[item.value.attr]
                self.enums[node.name] = members


def amdsmi_contract() -> tuple[dict[str, list[str]], dict[str, int], dict[str, dict[str, int]]]:
    """(function -> parameter names, AMDSMI_STATUS_* -> value, enum -> member -> value) of the
    installed amdsmi, imported when it can be and read from its source when not; or a skip."""
    try:
        amdsmi = importlib.import_module("amdsmi")
    except ModuleNotFoundError:
        pytest.skip("amdsmi is not installed")
    except Exception:  # KeyError without libamd_smi.so: read the source instead
        spec = importlib.util.find_spec("amdsmi")
        assert spec is not None and spec.submodule_search_locations
        static = _Static(Path(next(iter(spec.submodule_search_locations))))
        return static.functions, static.constants, static.enums
    functions = {
        name: list(inspect.signature(getattr(amdsmi, name)).parameters)
        for name in dir(amdsmi)
        if name.startswith("amdsmi_") and callable(getattr(amdsmi, name))
    }
    constants = {
        k: v for k, v in vars(amdsmi.amdsmi_wrapper).items() if k.startswith("AMDSMI_STATUS_")
    }
    enums = {
        name: {m: int(v) for m, v in getattr(amdsmi, name).__members__.items()} for name in ENUMS
    }
    return functions, constants, enums


ENUMS = ("AmdSmiInitFlags", "AmdSmiClkType", "AmdSmiTemperatureType",
         "AmdSmiTemperatureMetric", "AmdSmiMemoryType")  # fmt: skip


def _fake_functions() -> dict[str, inspect.Signature]:
    return {
        name: inspect.signature(getattr(FakeAmdSmi, name))
        for name in dir(FakeAmdSmi)
        if name.startswith("amdsmi_") and callable(getattr(FakeAmdSmi, name))
    }


def test_contract_functions_match_amdsmi() -> None:
    functions, _, _ = amdsmi_contract()
    for name, sig in _fake_functions().items():
        real = functions.get(name)
        if real is None and name == "amdsmi_get_gpu_process_info":
            continue  # only in bindings before ROCm 6.1, as the fake's legacy mode
        assert real is not None, f"amdsmi has no {name}"
        fake_params = [p for p in sig.parameters if p != "self"]
        assert fake_params == real, f"{name}: {fake_params} != {real}"


def test_contract_constants_and_enums_match_amdsmi() -> None:
    _, constants, enums = amdsmi_contract()
    for name, value in vars(fa).items():
        if name.startswith("AMDSMI_STATUS_"):
            assert constants[name] == value, name
    for enum_name in ENUMS:
        real, fake = enums[enum_name], getattr(fa, enum_name)
        for member in fake.__members__:
            assert real[member] == int(getattr(fake, member)), (enum_name, member)
