"""The accelerator rules on a TPU run: they apply (duty cycle, HBM), with TPU advice."""

from __future__ import annotations

from typing import Any

GIB = 2**30


def test_low_tpu_duty_cycle_fires_with_xla_advice(crafted: Any) -> None:
    run = crafted()
    run.gpu(name="Google TPU v5e", model="TPU-v5e")
    run.ticks(60)
    run.series("gpu_utilization_ratio", lambda t: 0.2, gpu=run.gpu_uuid)
    f = run.finding("low_gpu_utilization")
    assert "Google TPU v5e" in f.evidence.lines[0]
    assert "jax.jit" in f.suggestion and "duty cycle" in f.suggestion
    assert "CUDA" not in f.suggestion


def test_hbm_headroom_applies_to_a_tpu(crafted: Any) -> None:
    run = crafted()
    run.gpu(name="Google TPU v5p", model="TPU-v5p")
    run.ticks(60)
    run.series("gpu_utilization_ratio", lambda t: 0.9, gpu=run.gpu_uuid)
    run.series("gpu_memory_total_bytes", lambda t: 95 * GIB, gpu=run.gpu_uuid)
    run.series("gpu_memory_used_bytes", lambda t: 10 * GIB, gpu=run.gpu_uuid)
    run.series("gpu_process_memory_used_bytes", lambda t: 10 * GIB, gpu=run.gpu_uuid, pid="10")
    assert "gpu_memory_headroom" in run.ids()
    d = run.diagnose()
    assert "no clock-event" in d.not_applicable["gpu_throttling"]
