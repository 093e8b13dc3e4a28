"""The host-device synchronisation rule over crafted runs: a loop whose host and GPU take
turns (busy shares summing to one) is found with the saving of overlapping them; a loop
whose host keeps up while the GPU works, or one that waits for data, is not."""

from __future__ import annotations

import pytest


def _loop(crafted, *, device: float, host_cores: float, step: float = 0.1, n: int = 100):
    run = crafted(cores=2.0)
    run.gpu()
    run.ticks(int(n * step) + 2)
    run.writer(100, start=0.0)
    run.steps(100, [step] * n, start=0.0)
    run.series("gpu_utilization_ratio", lambda t: device, gpu=run.gpu_uuid)
    run.series("gpu_process_memory_used_bytes", lambda t: 2**30, gpu=run.gpu_uuid, pid="100")
    run.counter("tree_cpu_seconds_total", lambda t: host_cores)
    return run


def test_turn_taking_is_found_with_what_overlap_saves(crafted):
    # 40 ms on the device and 60 ms on the host each step, never at once.
    f = _loop(crafted, device=0.4, host_cores=0.6).finding("host_device_sync")
    # With the read every 10 steps a step takes max(60, 40) + 40 / 10 = 64 ms: 36 ms saved
    # on each of the 99 steps after the first.
    assert f.saving.seconds == pytest.approx(99 * 0.036, rel=0.02)
    assert f.saving.low_seconds <= f.saving.seconds <= f.saving.high_seconds
    assert "every 10 steps" in f.saving.fix
    assert ".item()" in f.suggestion and "set_sync_debug_mode" in f.suggestion
    assert f.evidence.numbers["device_busy_share"] == pytest.approx(0.4)


def test_overlapping_host_and_device_are_not_turn_taking(crafted):
    # The host busy all the time while the GPU works 40% of it: they overlap (a host-bound
    # loop, another rule's matter), and a GPU busy 95% is the bottleneck.
    assert "host_device_sync" not in _loop(crafted, device=0.4, host_cores=1.0).ids()
    assert "host_device_sync" not in _loop(crafted, device=0.95, host_cores=0.05).ids()


def test_a_loop_waiting_for_data_is_left_to_the_loader_rule(crafted):
    run = _loop(crafted, device=0.4, host_cores=0.3)
    for i in range(100):
        run.phase(100, "data", i * 0.1, i * 0.1 + 0.03)
    assert "host_device_sync" not in run.ids()


def test_without_a_gpu_it_is_not_applicable(crafted):
    run = crafted()
    run.ticks(10)
    run.steps(100, [0.1] * 50)
    assert run.diagnose().not_applicable["host_device_sync"] == "the run used no GPU"
