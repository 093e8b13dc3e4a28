"""A run's ticks as the exported contract, served by ``prometheus_sink``."""

from __future__ import annotations

import socket
import urllib.request
from collections.abc import Callable, Sequence

import pytest

from computewatch.fleet.run_export import prometheus_sink, run_observer
from computewatch.metrics.model import MetricSample
from computewatch.metrics.server import ServerError
from computewatch.readings import counter, gauge, labels
from computewatch.records import StepRecord
from computewatch.sampling.observers import RunInfo, SamplerTick

GPU = "GPU-aaaaaaaa-0000-4000-8000-000000000001"


class Collect:
    def __init__(self) -> None:
        self.got: list[Sequence[MetricSample]] = []
        self.closed = False

    def on_metrics(self, now: float, samples: Sequence[MetricSample]) -> None:
        self.got.append(samples)

    def close(self) -> None:
        self.closed = True


def tick(
    seq: int,
    mono: float,
    cpu: float,
    energy: float,
    busy: float,
    idle: float,
    steps: list[StepRecord],
) -> SamplerTick:
    g = labels(gpu=GPU)
    readings = [
        counter("tree_cpu_seconds_total", cpu),
        gauge("tree_resident_memory_bytes", 1e9),
        gauge("tree_processes", 3),
        counter("host_cpu_seconds_total", busy, labels(cpu=0, mode="user")),
        counter("host_cpu_seconds_total", idle, labels(cpu=0, mode="idle")),
        counter("cpu_energy_joules_total", energy, labels(domain="package", socket=0)),
        counter("cpu_energy_joules_total", 99 * energy, labels(domain="psys", socket=0)),
        gauge("gpu_utilization_ratio", 0.5, g),
        gauge("gpu_memory_total_bytes", 80e9, g),
        counter("gpu_energy_joules_total", 10 * energy, labels(gpu=GPU, method="counter")),
        gauge("gpu_clock_event_reasons", 0x20, g),
        gauge("gpu_other_processes_memory_used_bytes", 3e9, g),
        gauge("gpu_process_memory_used_bytes", 1e9, labels(gpu=GPU, pid=42)),
    ]
    return SamplerTick(seq, mono, 1000.0 + mono, readings, steps)


def value(samples: Sequence[MetricSample], name: str, **lbl: str) -> float:
    hits = [s for s in samples if s.name == name and all(s.label(k) == v for k, v in lbl.items())]
    assert len(hits) == 1, (name, lbl, hits)
    return hits[0].value


def test_run_ticks_map_to_the_contract() -> None:
    sink = Collect()
    obs = run_observer([sink])
    facts = {
        "hostname": "h1",
        "gpu_backend": "fake:1xH100-SXM",
        "gpus": [{"uuid": GPU, "index": 0, "name": "NVIDIA H100 80GB HBM3", "simulated": True}],
        "cpu_model": "x",
        "logical_cpus": 4,
    }
    obs.start(RunInfo("run1", "n", {"team": "nlp", "project": "llm"}, ["python"], 1000.0, facts))
    obs.on_tick(tick(0, 1.0, 0.0, 0.0, 0.0, 0.0, []))
    steps = [StepRecord(42, 2.0, 32, None, 1e12), StepRecord(42, 3.0, 32, None, 1e12)]
    obs.on_tick(tick(1, 3.0, 2.0, 100.0, 4.0, 4.0, steps))
    s = sink.got[-1]
    job = {"job": "run1", "team": "nlp", "node": "h1"}
    assert value(s, "computewatch_job_cpu_seconds_total", **job) == 2.0
    assert value(s, "computewatch_job_processes", **job) == 3
    assert value(s, "computewatch_job_gpu_seconds_total", **job) == pytest.approx(2.0)
    # share of the GPU by memory: 1 GB of 4 GB
    assert value(s, "computewatch_job_gpu_busy_seconds_total", **job) == pytest.approx(
        0.5 * 2 * 0.25
    )
    # GPU energy 1000 J x 0.25 + CPU package 100 J x (2 CPU-s of 4 busy) (psys never summed)
    assert value(s, "computewatch_job_energy_joules_total", **job) == pytest.approx(250 + 50)
    assert value(s, "computewatch_job_steps_total", **job) == 2
    assert value(s, "computewatch_job_step_time_seconds_total", **job) == pytest.approx(2.0 + 1.0)
    assert value(s, "computewatch_job_flops_total", method="counted") == 2e12
    assert value(s, "computewatch_gpu_throttled", reason="thermal") == 1
    assert value(s, "computewatch_gpu_allocated", gpu=GPU) == 1
    gpu = next(x for x in s if x.name == "computewatch_gpu_memory_total_bytes")
    assert (gpu.label("gpu_index"), gpu.label("simulated")) == ("0", "true")
    info = next(x for x in s if x.name == "computewatch_job_info")
    assert (info.label("kind"), info.label("project")) == ("computewatch", "llm")
    assert value(s, "computewatch_host_cpu_utilization_ratio") == pytest.approx(0.5)
    obs.finish("completed", None)
    assert sink.closed


def test_prometheus_sink_serves_and_stops(
    free_port: Callable[[], int], check_metrics: Callable[[str], None]
) -> None:
    port = free_port()
    sink = prometheus_sink(f"127.0.0.1:{port}")
    try:
        obs = run_observer([sink])
        obs.start(RunInfo("r2", None, {}, ["x"], 1000.0, {"hostname": "h"}))
        obs.on_tick(tick(0, 1.0, 1.0, 0.0, 0.0, 0.0, []))
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            body = r.read().decode()
        assert 'computewatch_job_cpu_seconds_total{job="r2",node="h",team="",user=' in body
        check_metrics(body)
    finally:
        sink.close()
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5)


def test_prometheus_sink_rejects_bad_input(free_port: Callable[[], int]) -> None:
    with pytest.raises(ServerError, match="HOST:PORT"):
        prometheus_sink("nonsense")
    with pytest.raises(ServerError, match="both"):
        prometheus_sink("127.0.0.1:0", tls_cert="/x")
    port = free_port()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", port))
        taken.listen()
        with pytest.raises(ServerError, match="cannot listen"):
            prometheus_sink(f"127.0.0.1:{port}")
