"""The OTLP output checked against the OpenTelemetry semantic conventions it claims: every
``hw.*`` and ``system.*`` metric, decoded from the wire with the official protos, has the name,
unit and data type that the ``opentelemetry-semantic-conventions`` package defines for it; the
attributes it uses exist there (with a defined ``hw.type`` value); every other metric and
attribute is in our ``computewatch.`` namespace; the host is named once, in the resource."""

from __future__ import annotations

import inspect
import io
import socket
from collections.abc import Callable
from typing import Any

import pytest
from opentelemetry.semconv._incubating.attributes import (
    error_attributes,
    host_attributes,
    hw_attributes,
    network_attributes,
    system_attributes,
)
from opentelemetry.semconv._incubating.metrics import hw_metrics, system_metrics
from opentelemetry.semconv.attributes import service_attributes

from computewatch.exporters.otlp import OtlpSink
from computewatch.metrics.model import MetricSample

GPU = {"gpu": "GPU-abc", "gpu_index": "0", "gpu_model": "NVIDIA H100 80GB HBM3", "node": "n1"}
TPU = {"gpu": "TPU-0000:00:04.0", "gpu_index": "0", "gpu_model": "TPU-v5e", "node": "n1"}
JOB = {"job": "7", "user": "alice", "team": "nlp", "node": "n1"}


def s(name: str, value: float, labels: dict[str, str], **more: str) -> MetricSample:
    return MetricSample(name, tuple(sorted({**labels, **more}.items())), value)


def every_kind(simulated: bool = True) -> list[MetricSample]:
    sim = {"simulated": "true"} if simulated else {}
    out = []
    for dev in (GPU, TPU):
        d = {**dev, **sim}
        out += [
            s("computewatch_gpu_utilization_ratio", 0.9, d),
            s("computewatch_gpu_memory_used_bytes", 40e9, d),
            s("computewatch_gpu_memory_total_bytes", 80e9, d),
            s("computewatch_gpu_power_watts", 350.0, d),
            s("computewatch_gpu_energy_joules_total", 1000.0, d, method="counter"),
            s("computewatch_gpu_temperature_celsius", 61.0, d),
            s("computewatch_gpu_xid_errors_total", 1.0, d),
            s("computewatch_gpu_ecc_errors_total", 2.0, d, type="corrected"),
            s("computewatch_gpu_nvlink_transmit_bytes_total", 5e9, d),
            s("computewatch_gpu_sm_active_ratio", 0.4, d, method="gpm"),
        ]
    out += [
        s("computewatch_tpu_hbm_bandwidth_utilization_ratio", 0.3, {**TPU, **sim}),
        s("computewatch_cpu_energy_joules_total", 10.0, {"node": "n1", "package": "0"}),
        s("computewatch_job_cpu_seconds_total", 12.5, JOB),
        s("computewatch_job_gpu_xid_errors_total", 1.0, JOB),
        s("computewatch_job_steps_total", 10.0, JOB),
        s("computewatch_job_processes", 3.0, JOB),
        s("computewatch_host_memory_used_bytes", 2e9, {"node": "n1"}),
        s("computewatch_host_memory_total_bytes", 4e9, {"node": "n1"}),
        s("computewatch_host_cpu_utilization_ratio", 0.5, {"node": "n1"}),
        s("computewatch_filesystem_avail_bytes", 1e9, {"node": "n1", "mountpoint": "/"}),
        s("computewatch_filesystem_size_bytes", 2e9, {"node": "n1", "mountpoint": "/"}),
    ]
    return out


def exported(receiver: Any, samples: list[MetricSample], node: str | None) -> list[Any]:
    out = OtlpSink(receiver.url, node=node, timeout=5.0, log=io.StringIO())
    try:
        out.on_metrics(0.0, samples)
        receiver.wait(lambda r: len(r.requests) >= 1)
    finally:
        out.close()
    points: list[Any] = receiver.points()
    return points


class _Recorder:
    """A meter that records what the semantic conventions' ``create_*`` functions ask for."""

    def __init__(self) -> None:
        self.made: tuple[str, str, str] | None = None

    def __getattr__(self, method: str) -> Callable[..., None]:
        kind = (
            "gauge"
            if "gauge" in method
            else "sum"
            if "counter" in method
            else "histogram"
            if "histogram" in method
            else "?"
        )
        mono = "up_down" not in method

        def make(*, name: str, unit: str = "", **_: Any) -> None:
            self.made = (name, unit, kind if kind != "sum" else f"sum monotonic={mono}")

        return make


def semconv_metrics() -> dict[str, tuple[str, str]]:
    """Name -> (unit, data type) of every hardware and system metric the conventions define."""
    out: dict[str, tuple[str, str]] = {}
    for module in (hw_metrics, system_metrics):
        for fname, fn in inspect.getmembers(module, inspect.isfunction):
            if not fname.startswith("create_"):
                continue
            rec = _Recorder()
            params = len(inspect.signature(fn).parameters)
            fn(rec, *([None] * (params - 1)))
            assert rec.made is not None
            name, unit, kind = rec.made
            out[name] = (unit, kind)
    return out


def semconv_attribute_names() -> set[str]:
    names: set[str] = set()
    for module in (
        hw_attributes,
        error_attributes,
        host_attributes,
        network_attributes,
        system_attributes,
        service_attributes,
    ):
        names |= {v for k, v in vars(module).items() if k.isupper() and isinstance(v, str)}
    return names


def kind_of(p: Any) -> str:
    return "gauge" if p.kind == "gauge" else f"sum monotonic={p.monotonic}"


def test_semconv_names_units_types_and_attributes(otlp_receiver: Any) -> None:
    points = exported(otlp_receiver, every_kind(), node="n1")
    conventions = semconv_metrics()
    attr_names = semconv_attribute_names()
    hw_types = {v.value for v in hw_attributes.HwTypeValues}
    seen = set()
    for p in points:
        seen.add(p.name)
        if p.name.startswith(("hw.", "system.")):
            assert p.name in conventions, p.name
            assert (p.unit, kind_of(p)) == conventions[p.name], p.name
        else:
            assert p.name.startswith("computewatch."), p.name
        for key in p.attributes:
            assert key in attr_names or key.startswith("computewatch."), (p.name, key)
        if "hw.type" in p.attributes:
            assert p.attributes["hw.type"] in hw_types
        assert "host.name" not in p.attributes, p.name  # the resource's, not each point's
        assert p.resource["host.name"] == "n1"
        assert p.resource["service.name"] == "computewatch"
    assert {"hw.gpu.utilization", "hw.power", "hw.errors", "system.memory.usage"} <= seen


def test_tpus_are_not_sent_as_gpus(otlp_receiver: Any) -> None:
    points = exported(otlp_receiver, every_kind(), node="n1")
    tpu = [p for p in points if p.attributes.get("hw.id", "").startswith("TPU-")]
    assert tpu
    for p in tpu:  # the conventions have no TPU hw.type, and hw.gpu.* is for GPUs
        assert not p.name.startswith("hw."), p.name
        assert "hw.type" not in p.attributes and p.name.startswith("computewatch.tpu."), p.name
    names = {p.name for p in tpu}
    assert {"computewatch.tpu.utilization", "computewatch.tpu.power"} <= names
    assert "computewatch.tpu.hbm_bandwidth_utilization" in names
    gpu = [p for p in points if p.attributes.get("hw.id") == "GPU-abc"]
    assert {p.name for p in gpu} >= {"hw.gpu.utilization", "hw.power", "hw.energy"}


def test_our_attributes_are_namespaced(otlp_receiver: Any) -> None:
    points = exported(otlp_receiver, every_kind(), node="n1")
    util = next(p for p in points if p.name == "hw.gpu.utilization")
    assert util.attributes["computewatch.gpu_index"] == "0"
    assert util.attributes["computewatch.simulated"] == "true"
    assert "gpu_index" not in util.attributes and "simulated" not in util.attributes
    sm = next(p for p in points if p.name == "computewatch.gpu.sm_active")
    assert sm.attributes["computewatch.method"] == "gpm"
    cpu = next(p for p in points if p.name == "computewatch.job.cpu")
    assert cpu.attributes["computewatch.job"] == "7"
    assert cpu.attributes["computewatch.user"] == "alice"


def test_counts_have_annotation_units(otlp_receiver: Any) -> None:
    points = {p.name: p for p in exported(otlp_receiver, every_kind(), node="n1")}
    assert points["computewatch.job.gpu_xid_errors"].unit == "{error}"
    assert points["hw.errors"].unit == "{error}"
    assert points["computewatch.job.steps"].unit == "{step}"
    assert points["computewatch.job.processes"].unit == "{process}"


@pytest.mark.parametrize("node", [None, "n1"])
def test_the_resource_names_the_host(otlp_receiver: Any, node: str | None) -> None:
    """``run --otlp`` makes its sink without a node name: the host's name is still there."""
    points = exported(otlp_receiver, every_kind(), node=node)
    want = node or socket.gethostname()
    assert {p.resource.get("host.name") for p in points} == {want}
    assert all("host.name" not in p.attributes for p in points)
