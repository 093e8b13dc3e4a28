"""Choosing the GPU backend: spec validation, fake presets, real backends that are missing here,
and replayed traces that cannot be read."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from computewatch.sources.gpus import BACKEND_CHOICES, GpuBackendError, check_spec, open_backend


@pytest.mark.parametrize(
    "spec",
    ["auto", "nvidia", "amd", "none", "fake:2xA100-80GB", "fake:H100-SXM", "replay:trace.jsonl"],
)
def test_check_spec_accepts_every_documented_form(spec: str) -> None:
    assert check_spec(spec) == spec


@pytest.mark.parametrize(
    "spec", ["", "cuda", "NVIDIA", "fake", "fake:", "replay", "replay:", "rocm:0", "auto:1"]
)
def test_check_spec_rejects_others_listing_the_choices(spec: str) -> None:
    with pytest.raises(GpuBackendError) as e:
        check_spec(spec)
    assert BACKEND_CHOICES in str(e.value)
    assert repr(spec) in str(e.value)


def test_a_backend_error_is_a_value_error() -> None:
    # track() and the CLI rely on it: an invalid spec is a plain bad value.
    assert issubclass(GpuBackendError, ValueError)


def test_fake_with_an_unknown_model_names_the_valid_models() -> None:
    with pytest.raises(GpuBackendError) as e:
        check_spec("fake:2xNOPE")
    msg = str(e.value)
    assert "NOPE" in msg
    for model in ("A100-80GB", "H100-SXM", "L4", "T4"):
        assert model in msg


def test_open_backend_none_has_no_sources() -> None:
    b = open_backend("none")
    assert b.sources == []
    assert b.skipped == []
    assert b.devices == []
    assert not b.simulated
    assert b.used_uuids() == set()
    b.close()


def test_fake_preset_gives_simulated_devices() -> None:
    b = open_backend("fake:2xA100-80GB", all_gpus=True)
    try:
        assert b.skipped == []
        assert len(b.sources) == 1
        assert b.simulated
        devs = b.devices
        assert [d.index for d in devs] == [0, 1]
        assert len({d.uuid for d in devs}) == 2
        assert all(d.simulated for d in devs)
        assert all(d.model == "A100-80GB" for d in devs)
        assert all(d.memory_total_bytes == 80 * 2**30 for d in devs)
        names = {r.name for r in b.sources[0].read()}
        assert {"gpu_utilization_ratio", "gpu_energy_joules_total"} <= names
    finally:
        b.close()


def test_fake_pids_on_every_device_make_them_used() -> None:
    me = os.getpid()
    b = open_backend("fake:2xA100-80GB", pids=lambda: {me}, fake_pids=[me])
    try:
        assert b.used_uuids() == set()  # nothing read yet
        readings = b.sources[0].read()
        assert b.used_uuids() == {d.uuid for d in b.devices}
        per_process = {
            dict(r.labels)["gpu"]
            for r in readings
            if r.name == "gpu_process_memory_used_bytes" and dict(r.labels)["pid"] == str(me)
        }
        assert per_process == {d.uuid for d in b.devices}
    finally:
        b.close()


def test_fake_devices_without_the_tree_pids_are_not_used() -> None:
    b = open_backend("fake:2xA100-80GB", pids=lambda: {999_999_999}, fake_pids=[4242])
    try:
        b.sources[0].read()
        assert b.used_uuids() == set()
    finally:
        b.close()


def test_each_open_gets_fresh_fake_devices() -> None:
    # fake_pids of one open must not leak into the next one (presets are built per call).
    first = open_backend("fake:1xL4", pids=lambda: {4242}, fake_pids=[4242])
    first.sources[0].read()
    first.close()
    second = open_backend("fake:1xL4", pids=lambda: {4242})
    try:
        second.sources[0].read()
        assert second.used_uuids() == set()
    finally:
        second.close()


def _gpus_here(vendor: str) -> int:
    """How many GPUs the vendor library itself finds here, asked without computewatch: 0 when
    the library, its driver or any GPU is missing (a CI machine without accelerators)."""
    try:
        if vendor == "nvidia":
            import pynvml

            pynvml.nvmlInit()
            try:
                return int(pynvml.nvmlDeviceGetCount())
            finally:
                pynvml.nvmlShutdown()
        import amdsmi

        amdsmi.amdsmi_init()
        try:
            return len(amdsmi.amdsmi_get_processor_handles())
        finally:
            amdsmi.amdsmi_shut_down()
    except Exception:  # ImportError, KeyError (no libamd_smi.so), the vendors' errors
        return 0


# Both branches are real checks: a machine without GPUs (CI's) checks the reasons given, a
# GPU machine checks that its GPUs are opened. Neither skips.


def test_nvidia_opens_nvml_gpus_or_says_why_not_with_the_nvml_reason() -> None:
    b = open_backend("nvidia", all_gpus=True)
    try:
        if n := _gpus_here("nvidia"):
            assert [s.name for s in b.sources] == ["nvidia"]
            assert len(b.devices) == n
            assert b.skipped == []
            return
        assert b.sources == []
        assert len(b.skipped) == 1
        name, why = b.skipped[0]
        assert name == "nvidia"
        assert "NVML" in why or "nvidia-ml-py" in why
    finally:
        b.close()


def test_auto_opens_the_gpus_here_or_says_why_for_nvidia_and_amd() -> None:
    b = open_backend("auto", all_gpus=True)
    try:
        if _gpus_here("nvidia"):
            assert [s.name for s in b.sources] == ["nvidia"]
            assert b.skipped == []
        elif _gpus_here("amd"):
            assert [s.name for s in b.sources] == ["amd"]
            assert [n for n, _ in b.skipped] == ["nvidia"]
        else:
            assert b.sources == []
            assert [n for n, _ in b.skipped] == ["nvidia", "amd", "tpu"]
        assert all(why for _, why in b.skipped)
    finally:
        b.close()


def test_replay_of_a_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "missing.jsonl"
    with pytest.raises(GpuBackendError) as e:
        open_backend(f"replay:{path}")
    assert str(path) in str(e.value)
    assert "No such file" in str(e.value)


def test_replay_of_a_file_that_is_not_a_trace(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("hello\n")
    with pytest.raises(GpuBackendError, match="not a computewatch GPU trace"):
        open_backend(f"replay:{path}")
    path.write_text('{"format": "something-else"}\n')
    with pytest.raises(GpuBackendError, match="not a computewatch GPU trace"):
        open_backend(f"replay:{path}")


def _header(**extra: object) -> str:
    header = {
        "format": "computewatch-gpu-trace",
        "version": 1,
        "recorded_at": 0.0,
        "hostname": "h",
        "interval_seconds": 1.0,
        "devices": [
            {
                "index": 0,
                "uuid": "GPU-1",
                "name": "Tesla T4",
                "model": "T4",
                "memory_total_bytes": 16 * 2**30,
                "power_limit_watts": 70.0,
                "capabilities": {},
            }
        ],
    }
    header.update(extra)
    return json.dumps(header) + "\n"


def test_replay_of_a_trace_with_a_bad_line_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    good = json.dumps({"t": 0.0, "readings": [["gpu_power_watts", {"gpu": "GPU-1"}, 50.0, 0]]})
    path.write_text(_header() + good + "\n" + '{"t": 1.0, "readings": [["x", {}]]}\n')
    with pytest.raises(GpuBackendError) as e:
        open_backend(f"replay:{path}")
    assert "line 3" in str(e.value)
    assert str(path) in str(e.value)


def test_replay_of_another_version_or_no_frames(tmp_path: Path) -> None:
    path = tmp_path / "v2.jsonl"
    path.write_text(_header(version=2))
    with pytest.raises(GpuBackendError, match="version 2"):
        open_backend(f"replay:{path}")
    path.write_text(_header())
    with pytest.raises(GpuBackendError, match="no readings"):
        open_backend(f"replay:{path}")


@pytest.mark.parametrize(
    "devices", [[{"uuid": "GPU-1"}], ["GPU-1"], {"uuid": "GPU-1"}], ids=["fields", "str", "dict"]
)
def test_replay_of_a_trace_with_bad_devices_in_its_header(tmp_path: Path, devices: object) -> None:
    path = tmp_path / "bad-header.jsonl"
    frame = json.dumps({"t": 0.0, "readings": []})
    path.write_text(_header(devices=devices) + frame + "\n")
    with pytest.raises(GpuBackendError, match="line 1"):
        open_backend(f"replay:{path}")


def test_auto_skips_a_vendor_without_device_files_before_loading_its_library(
    tmp_path: Path,
) -> None:
    b = open_backend("auto", dev_root=str(tmp_path))
    assert b.sources == []
    assert [n for n, _ in b.skipped] == ["nvidia", "amd", "tpu"]
    nvidia, amd, tpu = (why for _, why in b.skipped)
    assert f"no NVIDIA device file ({tmp_path}/nvidiactl, {tmp_path}/dxg)" in nvidia
    assert f"no AMD (ROCm) device file ({tmp_path}/kfd)" in amd
    assert f"no TPU device file ({tmp_path}/accel*, {tmp_path}/vfio/[0-9]*)" in tpu
    # no vendor library was loaded to find that out (a fresh interpreter's modules)
    code = (
        "import sys; from computewatch.sources.gpus import open_backend; "
        f"open_backend('auto', dev_root={str(tmp_path)!r}); "
        "print(sorted({'pynvml', 'amdsmi', 'grpc', 'computewatch.sources.tpu'} & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("files", "tried"),
    [
        (["nvidiactl"], "nvidia"),
        (["dxg"], "nvidia"),
        (["kfd"], "amd"),
        (["accel0"], "tpu"),
        (["vfio/vfio", "vfio/12"], "tpu"),
    ],
)
def test_auto_tries_the_library_of_a_vendor_whose_device_file_is_there(
    tmp_path: Path, files: list[str], tried: str
) -> None:
    for f in files:
        (tmp_path / f).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / f).touch()
    reasons = dict(open_backend("auto", dev_root=str(tmp_path)).skipped)
    if _gpus_here(tried):  # a machine with that vendor's devices opens them
        assert tried not in reasons
        return
    # the library was tried: its own reason, not the missing device file
    assert "device file" not in reasons[tried]
    for other in {"nvidia", "amd", "tpu"} - {tried}:
        assert "device file" in reasons.get(other, "device file")


def test_a_named_backend_always_tries_its_library(tmp_path: Path) -> None:
    b = open_backend("nvidia", dev_root=str(tmp_path))
    if _gpus_here("nvidia"):
        assert [s.name for s in b.sources] == ["nvidia"]
        b.close()
        return
    [(name, why)] = b.skipped
    assert name == "nvidia"
    assert "device file" not in why
    assert "NVML" in why or "nvidia-ml-py" in why
