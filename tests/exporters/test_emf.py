"""CloudWatch EMF units: counts are ``Count`` (their increase per tick too), physical units
CloudWatch lacks are ``None``."""

from __future__ import annotations

from typing import Any

from computewatch.exporters.emf import emf_documents, emf_unit
from computewatch.metrics.model import MetricSample

GPU = (("gpu", "GPU-0"), ("gpu_index", "0"), ("node", "n1"))
JOB = (("job", "7"), ("node", "n1"))


def units(docs: list[Any]) -> dict[str, str]:
    return {
        m["Name"]: m["Unit"] for d in docs for m in d["_aws"]["CloudWatchMetrics"][0]["Metrics"]
    }


def tick(k: int) -> list[MetricSample]:
    return [
        MetricSample("computewatch_gpu_xid_errors_total", GPU, 1.0 * k),
        MetricSample("computewatch_gpu_ecc_errors_total", (*GPU, ("type", "corrected")), 2.0 * k),
        MetricSample("computewatch_gpu_energy_joules_total", GPU, 100.0 * k),
        MetricSample("computewatch_gpu_throttle_seconds_total", GPU, 1.0 * k),
        MetricSample("computewatch_gpu_power_watts", GPU, 300.0),
        MetricSample("computewatch_gpu_utilization_ratio", GPU, 0.5),
        MetricSample("computewatch_job_steps_total", JOB, 10.0 * k),
        MetricSample("computewatch_job_processes", JOB, 3.0),
    ]


def test_counter_deltas_are_counts() -> None:
    last: dict[Any, float] = {}
    emf_documents(tick(1), 1.0, last=last)
    got = units(emf_documents(tick(2), 2.0, last=last))
    assert got["computewatch_gpu_xid_errors"] == "Count"
    assert got["computewatch_gpu_ecc_errors"] == "Count"
    assert got["computewatch_job_steps"] == "Count"
    assert got["computewatch_gpu_throttle_seconds"] == "Seconds"
    assert got["computewatch_gpu_energy_joules"] == "None"  # CloudWatch has no joules
    assert got["computewatch_gpu_power_watts"] == "None"
    assert got["computewatch_gpu_utilization_ratio"] == "None"
    assert got["computewatch_job_processes"] == "Count"


def test_cumulative_counters_and_names() -> None:
    got = units(emf_documents(tick(2), 2.0))  # without ``last``: cumulative, with _total
    assert got["computewatch_gpu_xid_errors_total"] == "Count"
    assert got["computewatch_gpu_energy_joules_total"] == "None"
    assert emf_unit("computewatch_gpu_xid_errors_total") == "Count"
    assert emf_unit("computewatch_gpu_memory_used_bytes") == "Bytes"
