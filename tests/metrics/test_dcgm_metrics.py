"""The DCGM exporter's fields in the agent's export: GPM ratios on Hopper, NVML's sampled values
elsewhere (labelled by method), clocks, throttle seconds, XID, ECC, PCIe and NVLink, per GPU
and per job; over a recorded procfs tree and the package's fake NVML."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from computewatch.fleet.attribution import Attributor, TeamMap
from computewatch.fleet.node import NodeOptions, NodeSampler
from computewatch.metrics.exposition import render
from computewatch.metrics.families import FAMILIES
from computewatch.metrics.model import MetricSample
from computewatch.sources.nvidia import NvidiaSource
from computewatch.testing import FakeDevice, FakeNVML, ManualClock, from_preset

SLURM = "0::/system.slice/n1_slurmstepd.scope/job_7/step_0/user/task_0\n"
DOCS = Path(__file__).resolve().parents[2] / "docs"


def _proc(root: Path, pid: int, name: str) -> None:
    d = root / str(pid)
    d.mkdir(parents=True)
    fields = ["S", "1", str(pid), str(pid), "0", "-1", "0", *["0"] * 4, "10", "0", "0", "0"]
    fields += ["20", "0", "1", "0", "100", "1000000", "256"] + ["0"] * 30
    (d / "stat").write_text(f"{pid} ({name}) " + " ".join(fields) + "\n")
    (d / "status").write_text(f"Name:\t{name}\nUid:\t1000\t1000\t1000\t1000\n")
    (d / "cgroup").write_text(SLURM)
    (d / "cmdline").write_bytes(name.encode() + b"\0")
    (d / "environ").write_bytes(b"")


def _node(tmp: Path, fake: FakeNVML, clock: ManualClock) -> NodeSampler:
    root = tmp / "proc"
    root.mkdir()
    (root / "loadavg").write_text("0.00 0.00 0.00 1/100 100\n")
    _proc(root, 100, "train")
    opts = NodeOptions(node="n1", procfs_root=str(root), filesystems=())
    att = Attributor(str(root), TeamMap(), user_name=lambda u: "alice")
    node = NodeSampler(opts, att, clock=clock)
    node.gpus = [NvidiaSource(fake, pids=node.pids_view, all_gpus=True, procfs_root=str(root))]
    return node


def find(samples: list[MetricSample], name: str, **labels: str) -> list[MetricSample]:
    return [
        s for s in samples if s.name == name and all(s.label(k) == v for k, v in labels.items())
    ]


def one(samples: list[MetricSample], name: str, **labels: str) -> float:
    hits = find(samples, name, **labels)
    assert len(hits) == 1, (name, labels, hits)
    return hits[0].value


def test_hopper_exports_gpm_clocks_throttle_xid_ecc_pcie_nvlink(tmp_path: Path) -> None:
    clock = ManualClock(0.0)
    fake = from_preset("H100-SXM", clock=clock)
    dev = fake.devices[0]
    dev.script("gpm_sm_active_percent", 30.0)
    dev.script("gpm_tensor_active_percent", 12.0)
    dev.script("gpm_sm_occupancy_percent", 20.0)
    dev.script("gpm_dram_active_percent", 40.0)
    dev.script("sm_clock_mhz", 1755)
    dev.script("mem_clock_mhz", 2619)
    dev.script("clock_events", 0x4 | 0x20)  # sw power cap + sw thermal slowdown
    dev.script("ecc_corrected", 3)
    dev.script("ecc_uncorrected", 1)
    dev.script("pcie_tx_kbps", 1000)
    dev.script("pcie_rx_kbps", 2000)
    dev.add_process(100, 8 << 30, sm_util=70)
    node = _node(tmp_path, fake, clock)
    try:
        node.sample()
        clock.advance(2.0)
        dev.xid(79)
        s = node.sample()
        clock.advance(3.0)
        s = node.sample()
    finally:
        node.close()
    g = {"gpu": dev.uuid}
    assert one(s, "computewatch_gpu_sm_active_ratio", method="gpm", **g) == pytest.approx(0.30)
    assert one(s, "computewatch_gpu_tensor_active_ratio", method="gpm", **g) == pytest.approx(0.12)
    assert one(s, "computewatch_gpu_sm_occupancy_ratio", **g) == pytest.approx(0.20)
    assert one(s, "computewatch_gpu_dram_active_ratio", method="gpm", **g) == pytest.approx(0.40)
    assert one(s, "computewatch_gpu_sm_clock_hertz", **g) == 1755e6
    assert one(s, "computewatch_gpu_memory_clock_hertz", **g) == 2619e6
    assert one(s, "computewatch_gpu_throttle_seconds_total", reason="sw_power_cap", **g) == 5.0
    assert one(s, "computewatch_gpu_throttle_seconds_total", reason="sw_thermal_slowdown", **g) == 5
    assert one(s, "computewatch_gpu_throttle_seconds_total", reason="hw_slowdown", **g) == 0.0
    assert one(s, "computewatch_gpu_ecc_errors_total", type="corrected", **g) == 3
    assert one(s, "computewatch_gpu_ecc_errors_total", type="uncorrected", **g) == 1
    assert one(s, "computewatch_gpu_xid_errors_total", **g) == 1
    assert one(s, "computewatch_gpu_pcie_transmit_bytes_per_second", **g) == 1000 * 1024
    assert one(s, "computewatch_gpu_pcie_receive_bytes_per_second", **g) == 2000 * 1024
    assert one(s, "computewatch_gpu_nvlink_transmit_bytes_total", **g) > 0
    assert one(s, "computewatch_gpu_power_limit_watts", **g) > 0
    job = {"job": "7", "node": "n1"}
    assert one(s, "computewatch_job_gpu_xid_errors_total", **job) == 1
    assert one(s, "computewatch_job_gpu_sm_active_ratio", **job, **g) == pytest.approx(0.70)


def test_without_gpm_sm_and_dram_activity_come_from_nvml_samples(tmp_path: Path) -> None:
    clock = ManualClock(0.0)
    dev = FakeDevice("NVIDIA A100-SXM4-80GB")
    dev.script("gpu_util_percent", 95)
    dev.script("mem_util_percent", 35)
    dev.add_process(100, 4 << 30, sm_util=15)
    fake = FakeNVML([dev], clock)
    node = _node(tmp_path, fake, clock)
    try:
        node.sample()
        clock.advance(1.0)
        s = node.sample()
    finally:
        node.close()
    g = {"gpu": dev.uuid}
    assert not find(s, "computewatch_gpu_sm_active_ratio", method="gpm")
    assert not find(s, "computewatch_gpu_tensor_active_ratio")  # no GPM: not made up
    sm = one(s, "computewatch_gpu_sm_active_ratio", method="nvml_process_samples", **g)
    assert sm == pytest.approx(0.15)
    dram = one(s, "computewatch_gpu_dram_active_ratio", method="nvml_sampled", **g)
    assert dram == pytest.approx(0.35)


def test_every_family_is_documented_and_promtool_accepts_the_exposition(tmp_path: Path) -> None:
    clock = ManualClock(0.0)
    fake = from_preset("2xH100-SXM", clock=clock)
    fake.devices[0].add_process(100, 1 << 30)
    node = _node(tmp_path, fake, clock)
    try:
        node.sample()
        clock.advance(1.0)
        s = node.sample()
    finally:
        node.close()
    body, _ = render(s)
    r = subprocess.run(
        ["promtool", "check", "metrics"], input=body, capture_output=True, timeout=60, check=False
    )
    assert r.returncode == 0, r.stdout + r.stderr
    mapping = (DOCS / "observability.md").read_text()
    metrics_md = (DOCS / "metrics.md").read_text()
    for f in FAMILIES:
        if f.name.startswith(("computewatch_gpu_", "computewatch_job_gpu_")):
            base = f.name
            assert f"`{base}`" in metrics_md or base in metrics_md, base
    for name in (
        "computewatch_gpu_sm_active_ratio",
        "computewatch_gpu_tensor_active_ratio",
        "computewatch_gpu_xid_errors_total",
        "computewatch_gpu_throttle_seconds_total",
    ):
        assert name in mapping
    for dcgm in (
        "DCGM_FI_PROF_SM_ACTIVE",
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "DCGM_FI_DEV_XID_ERRORS",
    ):
        assert dcgm in mapping


def test_busy_but_idle_alert_fires_on_low_sm_activity_under_high_utilization() -> None:
    from computewatch.alerts import FIRING, Engine, builtin_rules

    gpu = {"gpu": "GPU-0", "gpu_index": "0", "gpu_model": "H100", "node": "n1"}

    def tick(sm: float) -> list[MetricSample]:
        lbl = tuple(sorted(gpu.items()))
        return [
            MetricSample("computewatch_gpu_utilization_ratio", lbl, 0.97),
            MetricSample("computewatch_gpu_allocated", lbl, 1.0),
            MetricSample(
                "computewatch_gpu_sm_active_ratio",
                tuple(sorted({**gpu, "method": "gpm"}.items())),
                sm,
            ),
        ]

    for sm, fires in ((0.1, True), (0.6, False)):
        engine = Engine(builtin_rules())
        events = [
            e
            for t in range(0, 17 * 60, 30)
            for e in engine.evaluate(1_700_000_000 + t, tick(sm))
            if e.status == FIRING
        ]
        assert ("GpuBusyButIdle" in {e.rule for e in events}) is fires


def test_run_prometheus_exports_the_runs_sm_activity_per_gpu() -> None:
    from computewatch.fleet.run_export import RunExport
    from computewatch.readings import counter, gauge, labels
    from computewatch.sampling.observers import RunInfo, SamplerTick

    got: list[list[MetricSample]] = []

    class Sink:
        def on_metrics(self, now: float, samples: Any) -> None:
            got.append(list(samples))

        def close(self) -> None:
            pass

    ex = RunExport([Sink()], filesystems=())
    ex.start(RunInfo("r1", None, {}, ["python"], 1000.0, {"hostname": "n1"}))
    g = labels(gpu="GPU-1")
    readings = [
        gauge("gpu_utilization_ratio", 0.9, g),
        gauge("gpu_sm_active_ratio", 0.3, g),
        gauge("gpu_clock_event_reasons", 0x4, g),
        counter("gpu_ecc_errors_total", 2, labels(gpu="GPU-1", type="corrected")),
        gauge("gpu_process_memory_used_bytes", 1e9, labels(gpu="GPU-1", pid="7")),
        gauge("gpu_process_sm_utilization_ratio", 0.25, labels(gpu="GPU-1", pid="7")),
        gauge("gpu_other_processes_sm_utilization_ratio", 0.1, g),
    ]
    for k in range(2):
        ex.on_tick(SamplerTick(k, 10.0 + 2 * k, 1000.0 + 2 * k, readings, []))
    s = got[-1]
    assert one(s, "computewatch_job_gpu_sm_active_ratio", job="r1", gpu="GPU-1") == 0.25
    assert one(s, "computewatch_gpu_sm_active_ratio", method="gpm") == pytest.approx(0.3)
    assert one(s, "computewatch_gpu_ecc_errors_total", type="corrected") == 2
    assert one(s, "computewatch_gpu_throttle_seconds_total", reason="sw_power_cap") == 2.0


def test_dcgm_default_counters_nvml_can_give(tmp_path: Path) -> None:
    """dcgm-exporter's default counters that NVML gives: memory temperature, free memory, PCIe
    replays, remapped rows, encoder and decoder use, the graphics engine's activity (GPM), and
    XID as the last code beside the count; read back through prometheus_client's parser."""
    from prometheus_client.parser import text_string_to_metric_families

    clock = ManualClock(0.0)
    fake = from_preset("H100-SXM", clock=clock)
    dev = fake.devices[0]
    dev.script("memory_temperature_c", 61)
    dev.script("pcie_replays", 7)
    dev.script("remapped_rows_correctable", 2)
    dev.script("remapped_rows_uncorrectable", 1)
    dev.script("remap_pending", 1)
    dev.script("encoder_util_percent", 12)
    dev.script("decoder_util_percent", 30)
    dev.script("gpu_util_percent", 88)
    dev.add_process(100, 8 << 30, sm_util=70)
    node = _node(tmp_path, fake, clock)
    try:
        node.sample()
        clock.advance(2.0)
        dev.xid(79).xid(48)
        s = node.sample()
    finally:
        node.close()
    body, _ = render(s)
    got: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for fam in text_string_to_metric_families(body.decode()):
        for smp in fam.samples:
            got[(smp.name, tuple(sorted(smp.labels.items())))] = smp.value
    g = {"gpu": dev.uuid, "gpu_index": "0", "gpu_model": dev.name, "accelerator": "gpu"}
    g.update(node="n1", simulated="true")

    def value(name: str, **more: str) -> float:
        return got[(name, tuple(sorted({**g, **more}.items())))]

    assert value("computewatch_gpu_memory_temperature_celsius") == 61
    total = value("computewatch_gpu_memory_total_bytes")
    used = value("computewatch_gpu_memory_used_bytes")
    assert 0 < value("computewatch_gpu_memory_free_bytes") <= total - used
    assert value("computewatch_gpu_pcie_replays_total") == 7
    assert value("computewatch_gpu_remapped_rows_total", type="correctable") == 2
    assert value("computewatch_gpu_remapped_rows_total", type="uncorrectable") == 1
    assert value("computewatch_gpu_row_remap_pending") == 1
    assert value("computewatch_gpu_row_remap_failure") == 0
    assert value("computewatch_gpu_encoder_utilization_ratio") == pytest.approx(0.12)
    assert value("computewatch_gpu_decoder_utilization_ratio") == pytest.approx(0.30)
    gr = value("computewatch_gpu_graphics_engine_active_ratio", method="gpm")
    assert gr == pytest.approx(0.88)
    assert value("computewatch_gpu_xid_errors_total") == 2
    assert value("computewatch_gpu_xid_last_code") == 48  # DCGM's XID_ERRORS: the last code
    # DCGM users join on the index: the job's per-GPU series carry it beside the UUID
    job = {"job": "7", "node": "n1", "gpu": dev.uuid, "gpu_index": "0"}
    sm = [
        v
        for (name, lbl), v in got.items()
        if name == "computewatch_job_gpu_sm_active_ratio" and job.items() <= dict(lbl).items()
    ]
    assert sm == [pytest.approx(0.70)]


def test_what_nvml_cannot_give_is_absent_and_said(tmp_path: Path) -> None:
    """Before Hopper there is no GPM: no graphics-engine activity (DCGM reads it from its own
    profiling counters); a board without a memory sensor has no memory temperature; each says
    why in the device's capabilities."""
    clock = ManualClock(0.0)
    dev = FakeDevice("NVIDIA A100-SXM4-80GB")
    dev.unsupported.add("nvmlDeviceGetEncoderUtilization")
    fake = FakeNVML([dev], clock)
    src = NvidiaSource(fake, all_gpus=True)
    try:
        src.read()
        clock.advance(1.0)
        names = {r.name for r in src.read()}
        cap = src.devices[0].capabilities
    finally:
        src.close()
    assert "gpu_graphics_engine_active_ratio" not in names
    assert "gpu_memory_temperature_celsius" not in names
    assert "gpu_encoder_utilization_ratio" not in names
    assert {"gpu_pcie_replays_total", "gpu_decoder_utilization_ratio"} <= names
    assert cap["memory_temperature"] is False
    assert "no memory (HBM) temperature" in str(cap["memory_temperature_why"])
    assert "GPM not supported" in str(cap["gpm_why"])


def test_run_prometheus_says_tpu_and_exports_its_hbm_bandwidth() -> None:
    """``run --prometheus`` on TPU chips: the HBM bandwidth the TPU source reads is exported,
    and the chips' series say they are TPUs (label accelerator), a GPU's say gpu; the job's
    per-device series carry the index beside the id."""
    from computewatch.fleet.run_export import RunExport
    from computewatch.readings import gauge, labels
    from computewatch.sampling.observers import RunInfo, SamplerTick

    got: list[list[MetricSample]] = []

    class Sink:
        def on_metrics(self, now: float, samples: Any) -> None:
            got.append(list(samples))

        def close(self) -> None:
            pass

    tpu = "TPU-0000:00:04.0"
    facts = {
        "hostname": "n1",
        "gpu_backend": "fake:1xTPU-v5e",
        "gpus": [{"uuid": tpu, "index": 0, "name": "Google TPU v5e", "model": "TPU-v5e"}],
    }
    ex = RunExport([Sink()], filesystems=())
    ex.start(RunInfo("r1", None, {}, ["python"], 1000.0, facts))
    t = labels(gpu=tpu)
    readings = [
        gauge("gpu_utilization_ratio", 0.9, t),
        gauge("tpu_hbm_bandwidth_utilization_ratio", 0.42, t),
        gauge("gpu_memory_used_bytes", 1e9, t),
        gauge("gpu_process_memory_used_bytes", 1e9, labels(gpu=tpu, pid="7")),
        gauge("gpu_process_sm_utilization_ratio", 0.25, labels(gpu=tpu, pid="7")),
    ]
    for k in range(2):
        ex.on_tick(SamplerTick(k, 10.0 + 2 * k, 1000.0 + 2 * k, readings, []))
    s = got[-1]
    assert one(s, "computewatch_tpu_hbm_bandwidth_utilization_ratio", gpu=tpu) == 0.42
    util = find(s, "computewatch_gpu_utilization_ratio", gpu=tpu)
    assert [u.label("accelerator") for u in util] == ["tpu"]
    assert one(s, "computewatch_job_gpu_sm_active_ratio", gpu=tpu, gpu_index="0") == 0.25
