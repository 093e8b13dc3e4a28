"""The AMD source, driven entirely through the package's fake amdsmi."""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Collection, Iterable
from pathlib import Path

import pytest

from computewatch.readings import Kind, Reading, labels
from computewatch.sources.amd import (
    INSTALL_HINT,
    AmdSource,
    find_by_market_name,
    rocm_uuid_from_amdsmi_uuid,
)
from computewatch.sources.base import Source, SourceUnavailable
from computewatch.testing import fake_amdsmi as fa
from computewatch.testing.fake_amdsmi import FakeAmdDevice, FakeAmdSmi, amd_from_preset, amd_uuid
from computewatch.testing.fake_nvml import ManualClock

S0, S1, S2 = 0x1111_2222_3333_4444, 0x1111_2222_3333_5555, 0x2222_3333_4444_6666
U0, U1, U2 = (amd_uuid(s, 0x74A1) for s in (S0, S1, S2))
TIME_RE = r"\d\d:\d\d:\d\d"
ENV_VARS = ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")


@pytest.fixture(autouse=True)
def _no_visibility_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ENV_VARS:
        monkeypatch.delenv(var, raising=False)


def source(
    *devices: FakeAmdDevice,
    clock: ManualClock | None = None,
    legacy: bool = False,
    **kw: object,
) -> tuple[FakeAmdSmi, ManualClock, AmdSource]:
    """A source over the given fake devices, every GPU visible."""
    clock = clock or ManualClock()
    fake = FakeAmdSmi(list(devices), clock, legacy=legacy)
    kw.setdefault("all_gpus", True)
    src = AmdSource(fake, clock=clock, **kw)  # type: ignore[arg-type]
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


def scripted_device(serial: int = S0, **kw: object) -> FakeAmdDevice:
    d = FakeAmdDevice(
        "AMD Instinct MI300X OAM",
        serial=serial,
        vram_total=192 * 2**30,
        power_cap_w=750,
        energy_start_uj=5e12,
        **kw,  # type: ignore[arg-type]
    )
    d.script("gfx_activity", 87)
    d.script("umc_activity", 41)
    d.script("vram_used_bytes", 30 * 2**30)
    d.script("power_w", 412)
    d.script("power_cap_uw", 650_000_000)
    d.script("hotspot_c", 63)
    d.script("gfx_clock_mhz", 1755)
    d.script("mem_clock_mhz", 1300)
    return d


# -- the contract -----------------------------------------------------------------------------
def test_is_a_source_and_describes_devices() -> None:
    mi250 = FakeAmdDevice("AMD Instinct MI250X", serial=S1, device_id=0x740C,
                          vram_total=64 * 2**30, power_cap_w=500,
                          power_field="average_socket_power")  # fmt: skip
    fake, _, src = source(scripted_device(), mi250)
    assert isinstance(src, Source)
    assert src.name == "amd"
    d0, d1 = src.devices
    assert (d0.index, d0.uuid, d0.name, d0.model) == (0, U0, "AMD Instinct MI300X OAM", "MI300X")
    assert d0.memory_total_bytes == 192 * 2**30
    assert d0.power_limit_watts == 650.0
    assert d0.mig_parent_uuid is None and d0.simulated is True
    assert (d1.model, d1.memory_total_bytes, d1.power_limit_watts) == ("MI250X", 64 * 2**30, 500)
    assert d0.capabilities["energy_counter"] is True
    assert d0.capabilities["per_process"] is False  # no pids callable
    assert "shared" not in d0.capabilities
    assert d1.capabilities["shared"] is True and "0 W" in str(d1.capabilities["shared_why"])
    assert fake.init_count == 1 and fake.init_flags == [fa.AmdSmiInitFlags.INIT_AMD_GPUS]
    src.close()
    src.close()
    assert fake.init_count == 0 and fake.shutdown_count == 1
    with pytest.raises(ValueError, match="closed"):
        src.read()


def test_every_field_in_si_units() -> None:
    _, clock, src = source(scripted_device())
    r = src.read()
    g = {"gpu": U0}
    assert value(r, "gpu_utilization_ratio", **g) == 0.87
    assert value(r, "gpu_memory_utilization_ratio", **g) == 0.41
    assert value(r, "gpu_memory_used_bytes", **g) == 30 * 2**30  # MB (MiB) to bytes
    assert value(r, "gpu_memory_total_bytes", **g) == 192 * 2**30
    assert value(r, "gpu_power_watts", **g) == 412.0
    assert value(r, "gpu_power_limit_watts", **g) == 650.0  # from µW
    assert value(r, "gpu_energy_joules_total", method="counter", **g) == 0.0  # rebased
    assert value(r, "gpu_temperature_celsius", **g) == 63
    assert value(r, "gpu_sm_clock_hertz", **g) == 1755e6  # the GFX clock
    assert value(r, "gpu_memory_clock_hertz", **g) == 1300e6
    assert len(r) == 10
    kinds = {x.name: x.kind for x in r}
    assert kinds["gpu_energy_joules_total"] is Kind.COUNTER
    assert kinds["gpu_power_watts"] is Kind.GAUGE
    assert src.devices[0].capabilities["power_why"] == (
        "amdsmi_get_power_info()['current_socket_power'], W"
    )
    clock.advance(2.0)
    r2 = src.read()
    # 412 W for 2 s, counted in 15.259 µJ steps (the fake truncates to whole counts)
    assert value(r2, "gpu_energy_joules_total", method="counter", gpu=U0) == pytest.approx(
        824.0, abs=2e-5
    )


def test_older_binding_shapes_give_the_same_readings() -> None:
    dev = scripted_device(power_field="average_socket_power").add_process(11, 5 << 30)
    _, clock, src = source(dev, legacy=True, pids=lambda: {11})
    src.read()
    clock.advance(1.0)
    r = src.read()
    assert value(r, "gpu_power_watts", gpu=U0) == 412.0
    assert src.devices[0].capabilities["power_why"] == (
        "amdsmi_get_power_info()['average_socket_power'], W"
    )
    assert value(r, "gpu_energy_joules_total", method="counter", gpu=U0) == pytest.approx(
        412.0, abs=2e-5
    )  # from the "power" key of amdsmi before 6.2.1
    assert value(r, "gpu_sm_clock_hertz", gpu=U0) == 1755e6  # from "cur_clk"
    assert value(r, "gpu_process_memory_used_bytes", gpu=U0, pid=11) == 5 << 30  # via handles


def test_power_from_socket_power_when_the_others_are_na() -> None:
    dev = scripted_device()
    _, _, src = source(dev)
    dev.power_field = "average_socket_power"
    dev.script("power_w", 300)
    fake_info = src._mod.amdsmi_get_power_info

    def only_socket(h: FakeAmdDevice) -> dict[str, object]:
        info: dict[str, object] = fake_info(h)
        info["average_socket_power"] = 0xFFFFFFFF  # an unconverted UINT32_MAX: no value
        return info

    src._mod.amdsmi_get_power_info = only_socket
    assert value(src.read(), "gpu_power_watts", gpu=U0) == 300.0
    assert "'socket_power'" in str(src.devices[0].capabilities["power_why"])


# -- error translation ------------------------------------------------------------------------
def test_not_supported_is_absent_with_reason_and_not_retried() -> None:
    dev = scripted_device(unsupported={"amdsmi_get_clock_info", "amdsmi_get_power_cap_info"})
    _, _, src = source(dev)
    for _ in range(3):
        r = src.read()
        assert not names(r) & {"gpu_sm_clock_hertz", "gpu_memory_clock_hertz"}
        assert "gpu_power_limit_watts" not in names(r)
        assert "gpu_power_watts" in names(r)
    caps = src.devices[0].capabilities
    assert caps["sm_clock"] is False and "not supported" in str(caps["sm_clock_why"])
    assert "AMDSMI_STATUS_NOT_SUPPORTED - Feature not supported" in str(caps["sm_clock_why"])
    assert caps["memory_clock"] is False and caps["power_limit"] is False
    assert dev.calls["amdsmi_get_clock_info"] == 2  # once for each clock, then never again
    assert src.devices[0].power_limit_watts is None
    assert src.notes == []


def test_temperature_falls_back_from_hotspot_to_edge() -> None:
    dev = scripted_device().script("hotspot_c", None).script("edge_c", 51)
    _, _, src = source(dev)
    for _ in range(3):
        assert value(src.read(), "gpu_temperature_celsius", gpu=U0) == 51
    assert dev.calls["amdsmi_get_temp_metric"] == 1 + 3  # hotspot once, then edge
    both = scripted_device(S1).script("hotspot_c", None)  # MI300X: no edge sensor either
    _, _, src2 = source(both)
    src2.read()
    assert "gpu_temperature_celsius" not in names(src2.read())
    assert src2.devices[0].capabilities["temperature"] is False


def test_no_permission_is_absent_with_its_reason() -> None:
    dev = scripted_device()
    dev.fail("amdsmi_get_gpu_activity", fa.AMDSMI_STATUS_NO_PERM, at_call=2)
    _, _, src = source(dev)
    assert "gpu_utilization_ratio" in names(src.read())
    for _ in range(2):
        assert "gpu_utilization_ratio" not in names(src.read())
    caps = src.devices[0].capabilities
    assert caps["activity"] is False
    assert "permission denied" in str(caps["activity_why"])
    assert dev.calls["amdsmi_get_gpu_activity"] == 2


def test_other_errors_skip_the_field_for_one_tick() -> None:
    dev = scripted_device()
    dev.fail("amdsmi_get_power_info", fa.AMDSMI_STATUS_RETRY, at_call=2, count=1)
    dev.fail("amdsmi_get_temp_metric", fa.AMDSMI_STATUS_BUSY, at_call=1, count=1)
    dev.fail("amdsmi_get_gpu_vram_usage", fa.AMDSMI_STATUS_TIMEOUT, at_call=2, count=1)  # 1: setup
    _, _, src = source(dev)
    r1, r2, r3 = src.read(), src.read(), src.read()
    assert "gpu_power_watts" in names(r1) and "gpu_power_watts" not in names(r2)
    assert "gpu_power_watts" in names(r3)
    assert "gpu_temperature_celsius" not in names(r1)
    assert "gpu_temperature_celsius" in names(r2)
    assert "gpu_memory_used_bytes" not in names(r1) and "gpu_memory_used_bytes" in names(r2)
    assert "temperature" not in src.devices[0].capabilities
    assert "gpu_utilization_ratio" in names(r2)  # the rest of the device is read


def test_na_values_skip_a_tick_and_three_in_a_row_disable() -> None:
    dev = scripted_device()
    dev.script("gfx_clock_mhz", [None, 1500, None, None, None, 1600])
    dev.script("umc_activity", None)  # MI300X firmware without UMC activity
    _, _, src = source(dev)
    seen = ["gpu_sm_clock_hertz" in names(src.read()) for _ in range(6)]
    assert seen == [False, True, False, False, False, False]  # disabled after three N/A
    caps = src.devices[0].capabilities
    assert caps["sm_clock"] is False
    assert "the GFX clock as N/A (3 reads in a row)" in str(caps["sm_clock_why"])
    r = src.read()
    assert "gpu_utilization_ratio" in names(r)
    assert "gpu_memory_utilization_ratio" not in names(r)
    assert caps["memory_utilization"] is False and "umc_activity" in str(
        caps["memory_utilization_why"]
    )
    assert "activity" not in caps  # the field itself goes on
    dev.script("umc_activity", 20)
    assert value(src.read(), "gpu_memory_utilization_ratio", gpu=U0) == 0.2
    assert caps["memory_utilization"] is True


def test_out_of_range_sentinels_are_na() -> None:
    dev = scripted_device().script("gfx_activity", 0xFFFF).script("power_w", 0xFFFF)
    _, _, src = source(dev)
    r = src.read()
    assert "gpu_utilization_ratio" not in names(r)  # activity over 100 % is no value
    assert "gpu_power_watts" not in names(r)


def test_a_non_amdsmi_exception_disables_only_that_field() -> None:
    fake, _, src = source(scripted_device(S0), scripted_device(S1))

    def broken(processor_handle: FakeAmdDevice) -> dict[str, int]:
        raise TypeError("c_uint32 expected")

    fake.amdsmi_get_gpu_vram_usage = broken  # type: ignore[method-assign]
    for _ in range(2):
        r = src.read()
        assert "gpu_memory_used_bytes" not in names(r)
        assert "gpu_power_watts" in names(r, U0) and "gpu_power_watts" in names(r, U1)
    assert "TypeError: c_uint32 expected" in str(src.devices[0].capabilities["memory_why"])
    assert src.notes == [f"GPU {U0}: memory disabled, it failed with TypeError: c_uint32 expected"]


def test_gpu_lost_mid_run_is_noted_once_and_others_continue() -> None:
    a, b = scripted_device(S0), scripted_device(S1)
    _, clock, src = source(a, b)
    assert names(src.read(), U0) and names(src.read(), U1)
    a.fail("amdsmi_get_gpu_vram_usage", fa.AMDSMI_STATUS_NOT_FOUND)
    a.lose()
    clock.advance(1)
    r = src.read()
    assert not names(r, U0)  # the first call of the tick failed
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
    assert len(src.devices) == 2  # still described


def test_gpu_lost_between_fields_keeps_what_was_read() -> None:
    a = scripted_device(S0)
    _, _, src = source(a)
    src.read()
    a.fail("amdsmi_get_power_info", fa.AMDSMI_STATUS_NOT_FOUND)
    a.fail("amdsmi_get_gpu_asic_info", fa.AMDSMI_STATUS_NOT_FOUND)
    r = src.read()
    assert names(r) == {
        "gpu_utilization_ratio",
        "gpu_memory_utilization_ratio",
        "gpu_memory_used_bytes",
        "gpu_memory_total_bytes",
    }
    assert src.devices[0].capabilities["lost"] is True


def test_not_found_on_one_field_of_a_live_gpu_only_skips_it() -> None:
    dev = scripted_device()
    dev.fail("amdsmi_get_temp_metric", fa.AMDSMI_STATUS_NOT_FOUND, at_call=2, count=1)
    _, _, src = source(dev)
    r1, r2, r3 = src.read(), src.read(), src.read()
    assert "gpu_temperature_celsius" in names(r1) and "gpu_temperature_celsius" in names(r3)
    assert "gpu_temperature_celsius" not in names(r2)
    assert "gpu_power_watts" in names(r2)
    assert "lost" not in src.devices[0].capabilities and src.notes == []
    assert dev.calls["amdsmi_get_gpu_asic_info"] == 1 + 1  # setup, then the one check


@pytest.mark.parametrize(
    ("code", "text"),
    [
        (fa.AMDSMI_STATUS_DRIVER_NOT_LOADED, "AMDSMI_STATUS_DRIVER_NOT_LOADED - Driver not loaded"),
        (fa.AMDSMI_STATUS_INIT_ERROR, "AMDSMI_STATUS_INIT_ERROR - Initialization error"),
        (fa.AMDSMI_STATUS_NO_PERM, "AMDSMI_STATUS_NO_PERM - Permission Denied"),
    ],
)
def test_init_failure_is_source_unavailable_with_amdsmi_text(code: int, text: str) -> None:
    fake = FakeAmdSmi([FakeAmdDevice()]).fail("amdsmi_init", code)
    with pytest.raises(SourceUnavailable) as info:
        AmdSource(fake, all_gpus=True)
    assert str(info.value) == f"amdsmi could not start: {text}"
    assert fake.init_count == 0


def test_no_gpu_is_source_unavailable_and_shuts_amdsmi_down() -> None:
    fake = FakeAmdSmi([])
    with pytest.raises(SourceUnavailable, match="found no AMD GPU"):
        AmdSource(fake, all_gpus=True)
    assert fake.init_count == 0


def test_listing_failure_is_source_unavailable() -> None:
    fake = FakeAmdSmi([FakeAmdDevice()]).fail("amdsmi_get_processor_handles", fa.AMDSMI_STATUS_IO)
    with pytest.raises(SourceUnavailable, match="could not list GPUs: AMDSMI_STATUS_IO"):
        AmdSource(fake, all_gpus=True)
    assert fake.init_count == 0


def test_missing_package_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "amdsmi", None)  # makes `import amdsmi` fail
    with pytest.raises(SourceUnavailable) as info:
        AmdSource()
    assert str(info.value) == INSTALL_HINT
    assert "pip install 'computewatch[amd]'" in INSTALL_HINT


def test_package_without_its_library_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # What amdsmi 7 does without libamd_smi.so: print where it looked, then KeyError.
    pkg = tmp_path / "amdsmi"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(
        "print('/opt/rocm/lib/libamd_smi.so: cannot open shared object file')\n"
        "raise KeyError('libamd_smi.so')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "amdsmi", raising=False)
    with pytest.raises(SourceUnavailable) as info:
        AmdSource()
    assert "could not load libamd_smi.so" in str(info.value)
    assert "cannot open shared object file" in str(info.value)
    assert capsys.readouterr().out == ""  # the package's print does not reach the user's stdout
    monkeypatch.delitem(sys.modules, "amdsmi", raising=False)


def test_a_gpu_that_cannot_be_opened_is_skipped_with_a_note() -> None:
    bad = FakeAmdDevice(serial=S1).fail("amdsmi_get_gpu_device_uuid", fa.AMDSMI_STATUS_NO_PERM)
    _, _, src = source(scripted_device(), bad)
    assert [d.uuid for d in src.devices] == [U0]
    assert src.notes == [
        "GPU 1 could not be opened and is not monitored: AMDSMI_STATUS_NO_PERM - Permission Denied"
    ]


def test_functions_missing_from_the_binding_are_explained() -> None:
    clock = ManualClock()
    fake = FakeAmdSmi([scripted_device()], clock, missing={"amdsmi_get_clock_info"})
    src = AmdSource(fake, all_gpus=True, clock=clock, pids=lambda: {1})
    caps = src.devices[0].capabilities
    assert caps["sm_clock"] is False
    assert "this amdsmi has no amdsmi_get_clock_info()" in str(caps["sm_clock_why"])
    assert "gpu_sm_clock_hertz" not in names(src.read())
    fake2 = FakeAmdSmi([scripted_device()], clock, missing={"amdsmi_get_gpu_process_list"})
    caps2 = AmdSource(fake2, all_gpus=True, pids=lambda: {1}).devices[0].capabilities
    assert caps2["per_process"] is False


# -- energy -----------------------------------------------------------------------------------
def counter_values(src: AmdSource, clock: ManualClock, steps: Iterable[float]) -> list[float]:
    out = []
    for dt in steps:
        clock.advance(dt)
        out.append(value(src.read(), "gpu_energy_joules_total", gpu=U0, method="counter"))
    return out


def test_energy_counter_in_joules_rebased_at_the_first_read() -> None:
    dev = scripted_device(counter_resolution=10.0)  # µJ per count
    dev.script("energy_accumulator", [7_000_000, 7_000_000, 7_500_000, 9_000_000])
    _, clock, src = source(dev)  # setup probes the counter once (first value)
    assert counter_values(src, clock, [1, 1, 1]) == [0.0, 5.0, 20.0]


def test_energy_counter_restarted_from_zero_counts_on() -> None:
    dev = scripted_device(counter_resolution=10.0)
    dev.script("energy_accumulator", [0, 9_000_000, 9_050_000, 20_000, 70_000])
    _, clock, src = source(dev)
    # 9.05e6 -> 2e4 counts: a restart (driver reload, GPU reset) 0.2 J since
    assert counter_values(src, clock, [1, 1, 1, 1]) == [0.0, 0.5, 0.7, 1.2]


def test_energy_counter_32_bit_wrap_is_counted() -> None:
    top = 2**32 - 1_000
    dev = scripted_device(counter_resolution=15.259).script(
        "energy_accumulator", [top - 5_000, top - 5_000, top, 4_000, 9_000]
    )
    _, clock, src = source(dev)
    j = 15.259e-6
    got = counter_values(src, clock, [1, 1, 1, 1])
    assert got == pytest.approx([0.0, 5_000 * j, (5_000 + 5_000) * j, (15_000) * j])


def test_energy_counter_glitches_are_ignored_then_resynchronised() -> None:
    # amdsmi#115: an MI250X accumulator stepping back by ~14 M counts (hundreds of J)
    base = 4_750_896_266
    seq = [base, base, base + 10_000, base - 13_952_475, base + 20_000, base + 30_000]
    seq += [base - 20_000_000] * 4
    dev = scripted_device(counter_resolution=15.3).script("energy_accumulator", seq)
    _, clock, src = source(dev)
    j = 15.3e-6
    got = counter_values(src, clock, [1] * 9)
    expected = [0.0, 10_000 * j, 10_000 * j, 20_000 * j, 30_000 * j]  # the step back ignored
    expected += [30_000 * j] * 4  # stays off: three reads ignored, then counted from there
    assert got == pytest.approx(expected)
    assert any("amdsmi#115" in n for n in src.notes)
    assert any("counting resumes" in n for n in src.notes)
    assert src.devices[0].capabilities["energy_counter"] is True


def test_polled_energy_is_the_trapezoid_of_power_over_time() -> None:
    dev = scripted_device(unsupported={"amdsmi_get_energy_count"})
    dev.script("power_w", [100, 200, 300, 300])
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


def test_polled_energy_when_the_binding_lacks_the_counter() -> None:
    clock = ManualClock()
    fake = FakeAmdSmi([scripted_device()], clock, missing={"amdsmi_get_energy_count"})
    src = AmdSource(fake, all_gpus=True, clock=clock)
    assert "amdsmi_get_energy_count missing" in str(
        src.devices[0].capabilities["energy_counter_why"]
    )
    assert value(src.read(), "gpu_energy_joules_total", gpu=U0, method="polled") == 0.0


def test_energy_counter_turning_unsupported_switches_to_polled_without_a_jump() -> None:
    dev = scripted_device().script("power_w", 100)
    _, clock, src = source(dev)
    src.read()
    clock.advance(1.0)
    first = value(src.read(), "gpu_energy_joules_total", gpu=U0, method="counter")
    assert first == pytest.approx(100.0, abs=2e-5)
    dev.fail("amdsmi_get_energy_count", fa.AMDSMI_STATUS_NOT_SUPPORTED)
    clock.advance(1.0)
    assert value(src.read(), "gpu_energy_joules_total", gpu=U0, method="polled") == first
    clock.advance(1.0)
    assert value(src.read(), "gpu_energy_joules_total", gpu=U0, method="polled") == first + 100
    assert src.devices[0].capabilities["energy_counter"] is False


def test_a_counter_standing_still_under_load_switches_to_polled() -> None:
    # amdsmi#38: an accumulator that never moves while the board draws power
    dev = scripted_device().script("energy_accumulator", 8_152_136).script("power_w", 200)
    _, clock, src = source(dev)
    got = []
    for _ in range(5):
        clock.advance(1.0)
        got.append(by_key(src.read()))
    counted = [("gpu_energy_joules_total", labels(gpu=U0, method="counter")) in r for r in got]
    assert counted == [True, True, True, False, False]
    polled = got[4][("gpu_energy_joules_total", labels(gpu=U0, method="polled"))].value
    assert polled == 200.0  # one second at 200 W after the switch
    why = str(src.devices[0].capabilities["energy_counter_why"])
    assert "stood still over 3 reads at 200 W" in why


def test_an_energy_counter_without_values_switches_to_polled() -> None:
    dev = scripted_device().script("energy_accumulator", 0xFFFFFFFFFFFFFFFF).script("power_w", 50)
    _, clock, src = source(dev)
    got = []
    for _ in range(4):
        clock.advance(1.0)
        got.append(
            by_key(src.read()).get(("gpu_energy_joules_total", labels(gpu=U0, method="polled")))
        )
    assert [g is not None for g in got] == [False, False, True, True]
    assert got[3] is not None and got[3].value == 50.0
    assert "energy accumulator as N/A (3 reads in a row)" in str(
        src.devices[0].capabilities["energy_counter_why"]
    )


def test_an_idle_board_with_a_still_counter_keeps_the_counter() -> None:
    dev = scripted_device().script("energy_accumulator", 1_000).script("power_w", 0)
    _, clock, src = source(dev)
    for _ in range(5):
        clock.advance(1.0)
        assert value(src.read(), "gpu_energy_joules_total", gpu=U0, method="counter") == 0.0


def test_no_energy_at_all_without_counter_or_power() -> None:
    dev = scripted_device(unsupported={"amdsmi_get_energy_count", "amdsmi_get_power_info"})
    _, _, src = source(dev)
    for _ in range(2):
        assert "gpu_energy_joules_total" not in names(src.read())
    assert "neither an energy counter nor power" in str(
        src.devices[0].capabilities["energy_polled_why"]
    )


# -- per-process attribution ------------------------------------------------------------------
def test_per_process_attribution_of_the_tree_and_its_children(tmp_path: Path) -> None:
    for pid in (999, 11, 12):
        (tmp_path / str(pid)).mkdir()
    d0, d1, d2 = scripted_device(S0), scripted_device(S1), scripted_device(S2)
    d0.add_process(11, 4 * 2**30).add_process(999, 1 * 2**30)
    d1.add_process(12, 2 * 2**30, gtt_bytes=1 << 20)
    d2.add_process(999, 1 * 2**30)
    tree: set[int] = {10, 11}  # the root 10 uses no GPU; its child 11 does

    def pids() -> Collection[int]:
        return tree

    _, _, src = source(d0, d1, d2, pids=pids, procfs_root=str(tmp_path))
    assert src.devices[0].capabilities["per_process"] is True
    r = src.read()
    assert value(r, "gpu_process_memory_used_bytes", gpu=U0, pid=11) == 4 * 2**30
    assert "gpu_process_memory_used_bytes" not in names(r, U1)  # 12 not in the tree yet
    assert not [x for x in r if dict(x.labels).get("pid") == "999"]  # not ours
    assert src.used_uuids() == {U0}
    tree.add(12)  # a new child
    r = src.read()
    assert value(r, "gpu_process_memory_used_bytes", gpu=U1, pid=12) == 2 * 2**30  # VRAM only
    assert src.used_uuids() == {U0, U1}
    assert not src.pid_namespace_mismatch
    tree.discard(11)
    src.read()
    assert src.used_uuids() == {U0, U1}  # "so far"


def test_container_pid_namespace_mismatch_falls_back_to_whole_devices(tmp_path: Path) -> None:
    a, b = scripted_device(S0), scripted_device(S1)
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


def test_a_failing_pids_callable_does_not_stop_gpu_readings() -> None:
    def pids() -> Collection[int]:
        raise RuntimeError("tree gone")

    _, _, src = source(scripted_device(), pids=pids)
    assert "gpu_power_watts" in names(src.read())
    src.read()
    assert src.notes == ["could not list the monitored PIDs: tree gone"]


def test_process_list_not_permitted_keeps_the_device() -> None:
    dev = scripted_device().add_process(5)
    dev.fail("amdsmi_get_gpu_process_list", fa.AMDSMI_STATUS_NO_PERM)
    _, _, src = source(dev, pids=lambda: {5})
    for _ in range(2):
        r = src.read()
        assert "gpu_process_memory_used_bytes" not in names(r)
        assert "gpu_power_watts" in names(r)
    assert src.devices[0].capabilities["processes"] is False


def test_legacy_process_that_ends_between_list_and_info_is_skipped() -> None:
    dev = scripted_device().add_process(5, 1 << 30).add_process(6, 2 << 30)
    fake, _, src = source(dev, legacy=True, pids=lambda: {5, 6})
    listing = fake.amdsmi_get_gpu_process_list

    def with_a_ghost(processor_handle: FakeAmdDevice) -> list[int]:
        return [*listing(processor_handle), 77]  # 77 ended before its info was asked

    fake.amdsmi_get_gpu_process_list = with_a_ghost  # type: ignore[method-assign]
    r = src.read()
    assert value(r, "gpu_process_memory_used_bytes", gpu=U0, pid=6) == 2 << 30
    assert "processes" not in src.devices[0].capabilities


# -- ROCR_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES -----------------------------------------------
def three() -> list[FakeAmdDevice]:
    return [FakeAmdDevice(serial=S0), FakeAmdDevice(serial=S1), FakeAmdDevice(serial=S2)]


R0, R1, R2 = (f"GPU-{s:016X}" for s in (S0, S1, S2))


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("1", [U1]),
        ("2,0", [U0, U2]),  # reported in amdsmi order
        (" 0 , 2 ", [U0, U2]),
        ("1,7,0", [U1]),  # 7 is invalid: it and everything after it are ignored
        ("1,1,2", [U1]),  # a repeat ends the list too (ROCr)
        (R2, [U2]),
        (R2.lower(), [U2]),  # ROCr compares in upper case
        ("GPU-2222", [U2]),  # a unique prefix
        ("GPU-1111,2", []),  # ambiguous prefix: invalid from the start
        ("0,GPU-nope,1", [U0]),
        (f"{R1},0", [U0, U1]),
        ("-1", []),
        ("GPU-", []),  # ROCr wants 5 to 20 characters
    ],
)
def test_rocr_visible_devices(spec: str, expected: list[str]) -> None:
    fake = FakeAmdSmi(three(), ManualClock())
    if not expected:
        with pytest.raises(SourceUnavailable, match="no GPU matches visible_devices"):
            AmdSource(fake, visible_devices=spec)
        assert fake.init_count == 0
        return
    src = AmdSource(fake, visible_devices=spec)
    assert [d.uuid for d in src.devices] == expected
    assert {dict(r.labels)["gpu"] for r in src.read()} == set(expected)
    invalid = any("matches no GPU or repeats one" in n for n in src.notes)
    assert invalid == (spec in ("1,7,0", "1,1,2", "0,GPU-nope,1"))


@pytest.mark.parametrize("spec", ["", "  "])
def test_an_empty_list_hides_every_gpu(spec: str) -> None:
    with pytest.raises(SourceUnavailable, match="empty string: no GPU is visible"):
        AmdSource(FakeAmdSmi(three()), visible_devices=spec)


def test_visibility_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROCR_VISIBLE_DEVICES", "2")
    assert [d.uuid for d in AmdSource(FakeAmdSmi(three())).devices] == [U2]
    assert len(AmdSource(FakeAmdSmi(three()), all_gpus=True).devices) == 3
    monkeypatch.delenv("ROCR_VISIBLE_DEVICES")
    monkeypatch.setenv("HIP_VISIBLE_DEVICES", "1")
    assert [d.uuid for d in AmdSource(FakeAmdSmi(three())).devices] == [U1]
    monkeypatch.delenv("HIP_VISIBLE_DEVICES")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")  # HIP honours it when HIP_... is unset
    assert [d.uuid for d in AmdSource(FakeAmdSmi(three())).devices] == [U0]
    monkeypatch.setenv("HIP_VISIBLE_DEVICES", "2")  # and prefers HIP_VISIBLE_DEVICES
    assert [d.uuid for d in AmdSource(FakeAmdSmi(three())).devices] == [U2]
    monkeypatch.setenv("ROCR_VISIBLE_DEVICES", "")
    with pytest.raises(SourceUnavailable, match="ROCR_VISIBLE_DEVICES is set to an empty"):
        AmdSource(FakeAmdSmi(three()))
    monkeypatch.setenv("ROCR_VISIBLE_DEVICES", "x")
    with pytest.raises(SourceUnavailable, match="no GPU matches ROCR_VISIBLE_DEVICES='x'"):
        AmdSource(FakeAmdSmi(three()))


def test_hip_selects_among_the_gpus_rocr_left(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROCR_VISIBLE_DEVICES", "2,0")  # the job's HIP device 0 is GPU 2
    monkeypatch.setenv("HIP_VISIBLE_DEVICES", "0")
    assert [d.uuid for d in AmdSource(FakeAmdSmi(three())).devices] == [U2]
    monkeypatch.setenv("HIP_VISIBLE_DEVICES", "1,2")  # 2 is beyond what ROCR left
    src = AmdSource(FakeAmdSmi(three()))
    assert [d.uuid for d in src.devices] == [U0]
    assert any(n.startswith("HIP_VISIBLE_DEVICES='1,2': entry '2'") for n in src.notes)


def test_ordinals_follow_rocms_numbering_not_amdsmis() -> None:
    devs = three()
    for d, hip_id in zip(devs, (2, 0, 1), strict=True):
        d.hip_id = hip_id
    src = AmdSource(FakeAmdSmi(devs), visible_devices="0")
    assert [d.uuid for d in src.devices] == [U1]  # ROCm's GPU 0 is amdsmi's second
    assert src.notes == []


def test_without_enumeration_info_ordinals_assume_amdsmis_order() -> None:
    fake = FakeAmdSmi(three(), legacy=True)
    src = AmdSource(fake, visible_devices="1")
    assert [d.uuid for d in src.devices] == [U1]
    assert any("amdsmi's order is assumed" in n for n in src.notes)
    by_uuid = AmdSource(FakeAmdSmi(three(), legacy=True), visible_devices=R2)  # asic_serial
    assert [d.uuid for d in by_uuid.devices] == [U2]
    assert by_uuid.notes == []


# -- names and identities ---------------------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "model"),
    [
        ("AMD Instinct MI300X", "MI300X"),
        ("AMD Instinct MI300X OAM", "MI300X"),
        ("amd instinct mi300x", "MI300X"),
        ("AMD INSTINCT MI250X", "MI250X"),
        ("Aldebaran/MI200 [Instinct MI250X/MI250]", None),  # one PCI id for both: no guess
        ("AMD Instinct MI300A", None),
        ("AMD Radeon RX 7900 XTX", None),
        ("0x74a1", None),  # amdsmi's fallback when it has no name
    ],
)
def test_find_by_market_name(name: str, model: str | None) -> None:
    acc = find_by_market_name(name)
    assert (acc.model if acc else None) == model


def test_rocm_uuid_from_amdsmi_uuid() -> None:
    serial = 0xABCDEF0123456789
    assert rocm_uuid_from_amdsmi_uuid(amd_uuid(serial, 0x74A1)) == "GPU-ABCDEF0123456789"
    assert rocm_uuid_from_amdsmi_uuid(amd_uuid(serial, 0x740C, 3).upper()) == (
        "GPU-ABCDEF0123456789"
    )
    assert rocm_uuid_from_amdsmi_uuid("GPU-5a5a") is None
    assert rocm_uuid_from_amdsmi_uuid(amd_uuid(0, 0x74A1)) is None  # no serial


def test_rocm_uuid_falls_back_to_the_amdsmi_uuid() -> None:
    dev = FakeAmdDevice(serial=S2)
    fake = FakeAmdSmi([dev], legacy=True)

    def no_serial(processor_handle: FakeAmdDevice) -> dict[str, str]:
        return {"market_name": "AMD Instinct MI300X", "asic_serial": "N/A"}

    fake.amdsmi_get_gpu_asic_info = no_serial  # type: ignore[method-assign]
    src = AmdSource(fake, visible_devices="GPU-22223333")
    assert [d.uuid for d in src.devices] == [U2]


def test_presets_through_the_source() -> None:
    clock = ManualClock()
    src = AmdSource(amd_from_preset("2xMI250X", clock=clock), all_gpus=True, clock=clock)
    assert [d.model for d in src.devices] == ["MI250X"] * 4
    for _ in range(3):
        clock.advance(1.0)
        r = src.read()
    powers = [value(r, "gpu_power_watts", gpu=d.uuid) for d in src.devices]
    assert powers[1] == powers[3] == 0.0 and powers[0] > 90 and powers[2] > 90
    energy = [
        value(r, "gpu_energy_joules_total", gpu=d.uuid, method="counter") for d in src.devices
    ]
    assert energy[0] > 0 and energy[1] == 0.0
    temps = {value(r, "gpu_temperature_celsius", gpu=d.uuid) for d in src.devices}
    assert all(35 <= t <= 90 for t in temps)


# -- cost -------------------------------------------------------------------------------------
def test_tick_cost_on_eight_fake_mi300x_with_four_processes_each() -> None:
    """The budget is 2 ms of CPU per tick (fake included); CI machines get 10x headroom."""
    clock = ManualClock()
    fake = amd_from_preset("8xMI300X", clock=clock)
    pids = set()
    for i, d in enumerate(fake.devices):
        for k in range(4):
            d.add_process(1000 + 10 * i + k, 1 << 30)
            pids.add(1000 + 10 * i + k)
    src = AmdSource(fake, all_gpus=True, pids=lambda: pids, clock=clock)
    for _ in range(20):
        clock.advance(0.5)
        src.read()
    n = 300
    t0 = time.thread_time()
    for _ in range(n):
        clock.advance(0.5)
        r = src.read()
    per_tick = (time.thread_time() - t0) / n
    # 10 device readings + 2 about other processes + 4 processes on each GPU
    assert len(r) == 8 * (12 + 4)
    assert per_tick < 0.02, f"{per_tick * 1e3:.2f} ms per tick"


def test_with_the_real_package_it_starts_or_says_why() -> None:
    """Without an AMD GPU (or its library) the real amdsmi fails: a clear SourceUnavailable."""
    try:
        src = AmdSource(all_gpus=True)
    except SourceUnavailable as e:
        assert str(e) == INSTALL_HINT or str(e).startswith(
            ("amdsmi could not", "amdsmi is installed but", "amdsmi found no AMD GPU")
        )
    else:  # an AMD GPU machine: one tick must work
        try:
            assert src.read()
        finally:
            src.close()
