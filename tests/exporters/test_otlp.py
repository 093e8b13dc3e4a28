"""OTLP/HTTP export with the OpenTelemetry SDK, decoded by a local receiver with the official
``opentelemetry-proto`` definitions: names (semantic conventions where they exist), units,
attributes and values."""

from __future__ import annotations

import io
from typing import Any

import pytest

from computewatch.errors import UsageError
from computewatch.exporters.otlp import OTEL_METRICS, OtlpSink, metrics_url, otel_metric
from computewatch.metrics.families import FAMILIES
from computewatch.metrics.model import MetricSample

GPU = {"gpu": "GPU-abc", "gpu_index": "0", "gpu_model": "NVIDIA H100 80GB HBM3", "node": "n1"}
JOB = {"job": "7", "user": "alice", "team": "nlp", "node": "n1"}


def s(name: str, value: float, labels: dict[str, str], **more: str) -> MetricSample:
    return MetricSample(name, tuple(sorted({**labels, **more}.items())), value)


def tick(k: int) -> list[MetricSample]:
    return [
        s("computewatch_gpu_utilization_ratio", 0.9, GPU),
        s("computewatch_gpu_power_watts", 350.0, GPU),
        s("computewatch_gpu_energy_joules_total", 1000.0 + 350 * k, GPU),
        s("computewatch_gpu_memory_used_bytes", 40e9, GPU),
        s("computewatch_gpu_memory_total_bytes", 80e9, GPU),
        s("computewatch_gpu_temperature_celsius", 61.0, GPU),
        s("computewatch_gpu_ecc_errors_total", 2.0, GPU, type="corrected"),
        s("computewatch_gpu_ecc_errors_total", 0.0, GPU, type="uncorrected"),
        s("computewatch_gpu_xid_errors_total", 1.0, GPU),
        s("computewatch_gpu_sm_active_ratio", 0.4, GPU, method="gpm"),
        s("computewatch_gpu_throttle_seconds_total", 3.0 * k, GPU, reason="sw_power_cap"),
        s("computewatch_job_cpu_seconds_total", 12.5 * k, JOB),
        s("computewatch_host_memory_used_bytes", 2e9, {"node": "n1"}),
    ]


def sink(url: str, **kw: Any) -> OtlpSink:
    return OtlpSink(url, node="n1", timeout=5.0, log=io.StringIO(), **kw)


def test_semantic_conventions_units_attributes_and_values(otlp_receiver: Any) -> None:
    out = sink(otlp_receiver.url)
    try:
        out.on_metrics(0.0, tick(1))
        otlp_receiver.wait(lambda r: len(r.requests) >= 1)
        out.on_metrics(1.0, tick(2))
        otlp_receiver.wait(lambda r: len(r.requests) >= 2)
    finally:
        out.close()
    assert otlp_receiver.paths[0] == "/v1/metrics"
    last = otlp_receiver.requests[-1]
    pts = {(p.name, tuple(sorted(p.attributes.items()))): p for p in otlp_receiver.points()}
    del last

    def get(name: str, **attrs: str) -> Any:
        hits = [
            p
            for (n, _), p in pts.items()
            if n == name and all(p.attributes.get(k) == v for k, v in attrs.items())
        ]
        assert hits, (name, attrs, sorted({n for n, _ in pts}))
        return hits[-1]

    u = get("hw.gpu.utilization")
    assert (u.unit, u.kind, u.value) == ("1", "gauge", pytest.approx(0.9))
    assert u.attributes["hw.id"] == "GPU-abc"
    assert u.attributes["hw.type"] == "gpu"
    assert u.attributes["hw.model"] == "NVIDIA H100 80GB HBM3"
    assert u.attributes["hw.gpu.task"] == "general"
    assert "host.name" not in u.attributes  # the resource's
    assert u.resource["service.name"] == "computewatch"
    assert u.resource["host.name"] == "n1"
    e = get("hw.energy", **{"hw.type": "gpu"})
    assert (e.unit, e.kind, e.monotonic) == ("J", "sum", True)
    assert e.value == pytest.approx(1000.0 + 700)  # cumulative, the latest tick's
    assert get("hw.power").unit == "W"
    assert get("hw.temperature").unit == "Cel"
    mem = get("hw.gpu.memory.usage")
    assert (mem.unit, mem.kind, mem.monotonic, mem.value) == ("By", "sum", False, 40e9)
    assert get("hw.gpu.memory.limit").value == 80e9
    assert get("hw.errors", **{"error.type": "ecc_corrected"}).value == 2
    assert get("hw.errors", **{"error.type": "ecc_uncorrected"}).value == 0
    assert get("hw.errors", **{"error.type": "xid"}).unit == "{error}"
    sm = get("computewatch.gpu.sm_active", **{"computewatch.method": "gpm"})
    assert (sm.unit, sm.kind, sm.value) == ("1", "gauge", pytest.approx(0.4))
    th = get("computewatch.gpu.throttle", **{"computewatch.reason": "sw_power_cap"})
    assert (th.unit, th.kind, th.monotonic, th.value) == ("s", "sum", True, 6.0)
    cpu = get(
        "computewatch.job.cpu",
        **{"computewatch.job": "7", "computewatch.user": "alice", "computewatch.team": "nlp"},
    )
    assert (cpu.unit, cpu.value) == ("s", 25.0)
    assert get("system.memory.usage", **{"system.memory.state": "used"}).value == 2e9
    assert out.exported == 2 and out.failed == 0


def test_gzip_and_the_endpoint_url(otlp_receiver: Any) -> None:
    out = sink(otlp_receiver.url + "/v1/metrics", compression="gzip")
    try:
        out.on_metrics(0.0, tick(1))
        otlp_receiver.wait(lambda r: len(r.requests) >= 1)
    finally:
        out.close()
    assert otlp_receiver.encodings[0] == "gzip"
    assert otlp_receiver.points("hw.gpu.utilization")
    assert metrics_url("https://otlp.example:4318/") == "https://otlp.example:4318/v1/metrics"
    assert metrics_url("http://c:4318/otlp/v1/metrics") == "http://c:4318/otlp/v1/metrics"
    for bad in ("otlp.example:4318", "ftp://x/", "http://", "http://h:notaport/"):
        with pytest.raises(UsageError, match="--otlp"):
            metrics_url(bad)


def test_every_family_has_an_otel_name_and_unit() -> None:
    names = {}
    for f in FAMILIES:
        m = otel_metric(f.name)
        assert m.name.startswith(("hw.", "system.", "computewatch.")), f.name
        assert m.unit, f.name
        names.setdefault((m.name, m.instrument, m.unit), []).append(f.name)
        if f.type == "counter":
            assert m.instrument == "counter", f.name
    semconv = {m.prometheus for m in OTEL_METRICS}
    assert "computewatch_gpu_utilization_ratio" in semconv
    assert otel_metric("computewatch_gpu_sm_active_ratio").name == "computewatch.gpu.sm_active"
    assert otel_metric("computewatch_gpu_sm_clock_hertz").unit == "Hz"
    assert otel_metric("computewatch_job_info").name == "computewatch.job.info"


def test_a_failure_and_the_recovery_are_one_line_each(
    otlp_receiver: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """No line of the SDK's own (it logs each failed export, and each retry), ours once each."""
    log = io.StringIO()
    out = OtlpSink(otlp_receiver.url, node="n1", timeout=2.0, log=log)
    try:
        otlp_receiver.status = 400  # refused
        for k in range(3):
            assert not out.push(tick(k))
        otlp_receiver.status = 200
        for k in range(3):
            assert out.push(tick(k))
    finally:
        out.close()
    lines = log.getvalue().splitlines()
    assert len(lines) == 2, lines
    assert "failed" in lines[0] and "works again" in lines[1]
    assert not [r for r in caplog.records if r.name.startswith("opentelemetry")]


class HeldExporter:
    """A ``MetricExporter`` whose export never ends until released."""

    def __init__(self) -> None:
        import threading

        from opentelemetry.sdk.metrics.export import AggregationTemporality

        self.started = threading.Event()
        self.release = threading.Event()
        self._preferred_temporality: dict[type, AggregationTemporality] = {}
        self._preferred_aggregation: dict[type, Any] = {}

    def export(self, data: Any, timeout_millis: float = 0, **kw: Any) -> Any:
        from opentelemetry.sdk.metrics.export import MetricExportResult

        self.started.set()
        self.release.wait(600)
        return MetricExportResult.SUCCESS

    def force_flush(self, timeout_millis: float = 0) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 0, **kw: Any) -> None:
        pass


def test_close_waits_for_a_held_export_only_its_deadline() -> None:
    """The end of a run waits for the last export at most ``close_timeout`` (the job's end
    is not held by an endpoint that hangs)."""
    held = HeldExporter()
    out = OtlpSink("http://127.0.0.1:9", node="n1", close_timeout=0.2, exporter=held,  # type: ignore[arg-type]
                   log=io.StringIO())  # fmt: skip
    out.on_metrics(0.0, tick(1))
    assert held.started.wait(60)
    out.on_metrics(1.0, tick(2))  # pending behind the held export
    out.close()
    assert not held.release.is_set()  # close returned while the export was still held
    assert out.close_timeout == 0.2
    held.release.set()
