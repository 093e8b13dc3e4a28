"""The exported GPU energy says how it was obtained (label ``method``): ``counter`` (the driver's
energy counter), ``polled`` (polled power integrated) or ``modeled`` (a TPU chip's power modelled
from its duty cycle); through the node sampler with the fake NVML and the fake TPU VM, and
through ``run --prometheus``'s exporter."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from computewatch.fleet.attribution import Attributor, TeamMap
from computewatch.fleet.node import NodeOptions, NodeSampler
from computewatch.fleet.run_export import run_observer
from computewatch.metrics.families import ENERGY_METHODS, gpu_samples, reading_energy_method
from computewatch.metrics.model import MetricSample
from computewatch.readings import counter, gauge, labels
from computewatch.sampling.observers import RunInfo, SamplerTick
from computewatch.sources.nvidia import NvidiaSource
from computewatch.sources.tpu import TpuSource
from computewatch.testing import ManualClock, from_preset
from computewatch.testing.fake_tpu import tpu_from_preset

ENERGY = "computewatch_gpu_energy_joules_total"


def energies(samples: list[MetricSample]) -> dict[str, tuple[str | None, float]]:
    """GPU -> (method label, joules) of every exported energy sample."""
    out: dict[str, tuple[str | None, float]] = {}
    for s in samples:
        if s.name == ENERGY:
            gpu = s.label("gpu")
            assert gpu is not None and gpu not in out, f"two energy samples for {gpu}"
            out[gpu] = (s.label("method"), s.value)
    return out


def sampler(tree: Any, clock: ManualClock) -> NodeSampler:
    options = NodeOptions(node="n1", procfs_root=str(tree.root), filesystems=())
    att = Attributor(str(tree.root), TeamMap(), user_name=str)
    return NodeSampler(options, att, clock=clock)


def test_nvidia_counter_and_polled_energy_carry_their_method(proc_tree: Any) -> None:
    clock = ManualClock(0.0)
    fake = from_preset("2xH100-SXM", clock=clock)
    fake.devices[1].unsupported.add("nvmlDeviceGetTotalEnergyConsumption")  # as before Volta
    node = sampler(proc_tree, clock)
    node.gpus = [NvidiaSource(fake, all_gpus=True, procfs_root=str(proc_tree.root))]
    try:
        node.sample()
        clock.advance(2.0)
        got = energies(node.sample())
    finally:
        node.close()
    counter, polled = got[fake.devices[0].uuid], got[fake.devices[1].uuid]
    assert counter[0] == "counter" and counter[1] > 0
    assert polled[0] == "polled" and polled[1] > 0


def test_tpu_energy_is_labelled_modeled(proc_tree: Any, tmp_path: Path) -> None:
    fake = tpu_from_preset("2xTPU-v5e")
    fake.write_sysfs(tmp_path)
    clock = ManualClock(0.0)
    node = sampler(proc_tree, clock)
    src = TpuSource(fake.address, sysfs_root=str(tmp_path), clock=clock, simulated=True)
    node.gpus = [src]
    try:
        node.sample()
        clock.advance(1.0)
        got = energies(node.sample())
    finally:
        node.close()
        fake.close()
    assert len(got) == 2
    for method, joules in got.values():
        assert method == "modeled" and joules > 0


class Collect:
    def __init__(self) -> None:
        self.got: list[Sequence[MetricSample]] = []

    def on_metrics(self, now: float, samples: Sequence[MetricSample]) -> None:
        self.got.append(samples)

    def close(self) -> None:
        pass


def test_run_export_labels_energy_the_same_way() -> None:
    sink = Collect()
    obs = run_observer([sink])
    facts = {"hostname": "h1", "gpu_backend": "fake:1xTPU-v5e", "gpus": [], "logical_cpus": 4}
    obs.start(RunInfo("run1", "n", {}, ["python"], 1000.0, facts))
    for seq, joules in enumerate((0.0, 120.0)):
        readings = [
            gauge("gpu_utilization_ratio", 0.9, labels(gpu="TPU-0000:00:04.0")),
            counter(
                "gpu_energy_joules_total", joules, labels(gpu="TPU-0000:00:04.0", method="modeled")
            ),
            counter("gpu_energy_joules_total", 2 * joules, labels(gpu="GPU-1", method="counter")),
        ]
        obs.on_tick(SamplerTick(seq, float(seq), 1000.0 + seq, readings, []))
    got = energies(list(sink.got[-1]))
    assert got == {"TPU-0000:00:04.0": ("modeled", 120.0), "GPU-1": ("counter", 240.0)}


def test_the_method_label_is_only_a_known_method() -> None:
    assert ENERGY_METHODS == ("counter", "polled", "modeled")
    assert reading_energy_method("gpu_energy_joules_total", {"method": "polled"}) == "polled"
    assert reading_energy_method("gpu_energy_joules_total", {"method": "guess"}) is None
    assert reading_energy_method("gpu_power_watts", {"method": "counter"}) is None
    lbl = (("gpu", "G"),)
    out: list[MetricSample] = []
    gpu_samples(out, lbl, {"gpu_energy_joules_total": 5.0}, allocated=False)
    assert energies(out) == {"G": ("", 5.0)}  # a source that said nothing: no label
