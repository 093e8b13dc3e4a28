"""``computewatch devices`` as a library: what can be measured here, and recording a trace."""

from __future__ import annotations

import glob
import io
import json
from pathlib import Path

import pytest

from computewatch.sources.devices import DEVICES_SCHEMA_VERSION, describe, record_trace
from computewatch.sources.gpus import GpuBackendError
from computewatch.sources.rapl import rapl_status
from computewatch.sources.replay import FORMAT, ReplaySource
from computewatch.testing.fake_nvml import ManualClock


def test_describe_two_h100s() -> None:
    info = describe("fake:2xH100-SXM")
    assert info["schema_version"] == DEVICES_SCHEMA_VERSION
    assert info["gpu_backend"] == "fake:2xH100-SXM"
    assert info["gpu_backends_skipped"] == []
    assert info["simulated"] is True
    host = info["host"]
    assert host["logical_cpus"] >= 1
    assert host["allowed_cores"] > 0
    assert isinstance(host["hostname"], str)
    ce = info["cpu_energy"]
    assert ce["backend"] == "rapl"
    assert isinstance(ce["available"], bool)
    assert isinstance(ce["detail"], str) and ce["detail"]
    gpus = info["gpus"]
    assert [g["index"] for g in gpus] == [0, 1]
    assert len({g["uuid"] for g in gpus}) == 2
    for g in gpus:
        assert g["name"] == "NVIDIA H100 80GB HBM3"
        assert g["model"] == "H100-SXM"
        assert g["simulated"] is True
        assert g["backend"] in info["gpu_backends_used"]
        caps = g["capabilities"]
        for feature in ("energy_counter", "gpm", "per_process"):
            assert caps[feature] is True, feature
            assert caps[f"{feature}_why"], feature
    json.dumps(info)  # all of it serialises as is


def test_cpu_energy_says_whether_rapl_is_readable_here() -> None:
    # Both branches are real checks; a CI machine (a VM, no powercap) takes the second one.
    readable = False
    for energy in glob.glob("/sys/class/powercap/intel-rapl*:*/energy_uj"):
        try:
            with open(energy, "rb") as f:
                readable = readable or bool(f.read().strip())
        except OSError:
            pass
    ok, detail = rapl_status()
    ce = describe("none")["cpu_energy"]
    assert ce == {"backend": "rapl", "available": ok, "detail": detail}
    if not readable:  # no energy counter can be read: RAPL must not claim one
        assert not ok, detail
    if ok:
        assert "package" in detail
    else:
        assert "RAPL" in detail or "powercap" in detail


def test_describe_an_a100_says_why_there_is_no_gpm() -> None:
    [g] = describe("fake:1xA100-80GB")["gpus"]
    caps = g["capabilities"]
    assert caps["gpm"] is False
    assert "Hopper" in str(caps["gpm_why"])
    assert caps["energy_counter"] is True


def test_describe_none_has_no_gpus() -> None:
    info = describe("none")
    assert info["gpus"] == []
    assert info["gpu_backends_used"] == []
    assert info["gpu_backends_skipped"] == []
    assert info["simulated"] is False


def test_describe_rejects_a_bad_spec() -> None:
    with pytest.raises(GpuBackendError):
        describe("fake:1xNOPE")


def test_record_trace_without_a_gpu_says_so() -> None:
    with pytest.raises(ValueError, match="no GPU"):
        record_trace(io.StringIO(), gpu_backend="none", seconds=1.0, interval=0.5)


def test_record_trace_of_a_fake_gpu_replays(tmp_path: Path) -> None:
    path = tmp_path / "t4.jsonl"
    with open(path, "w") as f:
        n, ticks = record_trace(f, gpu_backend="fake:1xT4", seconds=0.1, interval=0.05)
    assert n == 1
    assert ticks >= 2
    lines = path.read_text().splitlines()
    assert len(lines) == 1 + ticks
    assert json.loads(lines[0])["format"] == FORMAT
    rs = ReplaySource(path, clock=ManualClock())
    [dev] = rs.devices
    assert dev.name == "Tesla T4"
    assert dev.simulated is True
    assert rs.read()
