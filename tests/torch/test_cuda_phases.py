"""CUDA-event phases, with a fake event class standing in for ``torch.cuda.Event``.

The fake GPU runs the events recorded on its one stream in order, only when the test advances
it, so the tests see exactly what the host does while the GPU lags behind: nothing waits for
it (a ``synchronize`` fails the test), and each phase is recorded once its end event is done.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import torch

import computewatch
from computewatch.sampling.channel import ENV_RUN_ID, ENV_SPOOL, PhaseRecord, SpoolReader
from computewatch.torch import GpuTimer, gpu_phase


class FakeGpu:
    """One stream: events complete in the order recorded, as the test advances the GPU."""

    def __init__(self) -> None:
        self.recorded: list[FakeEvent] = []
        self.done = 0  # events completed so far
        self.clock_ms = 0.0
        self.created = 0
        self.queries = 0

    def event(self) -> FakeEvent:
        self.created += 1
        return FakeEvent(self)

    def advance(self, n: int, ms_each: float = 5.0) -> None:
        """Let the GPU run ``n`` more recorded events, ``ms_each`` of GPU time before each."""
        for ev in self.recorded[self.done : self.done + n]:
            self.clock_ms += ms_each
            ev.time_ms = self.clock_ms
            self.done += 1

    def finish(self, ms_each: float = 5.0) -> None:
        self.advance(len(self.recorded) - self.done, ms_each)


class FakeEvent:
    def __init__(self, gpu: FakeGpu) -> None:
        self.gpu = gpu
        self.seq = -1
        self.time_ms: float | None = None

    def record(self) -> None:
        self.seq = len(self.gpu.recorded)
        self.time_ms = None
        self.gpu.recorded.append(self)

    def query(self) -> bool:
        self.gpu.queries += 1
        return self.gpu.done > self.seq

    def elapsed_time(self, end: FakeEvent) -> float:
        assert self.time_ms is not None and end.time_ms is not None, "event not completed"
        return end.time_ms - self.time_ms

    def synchronize(self) -> None:
        raise AssertionError("the host must never wait for the GPU")


@pytest.fixture
def spool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "spool"
    monkeypatch.setenv(ENV_RUN_ID, "cudatest0000")
    monkeypatch.setenv(ENV_SPOOL, str(path))
    return path


def _phases(spool: Path) -> list[PhaseRecord]:
    return [e for e in SpoolReader(spool).poll() if isinstance(e, PhaseRecord)]


def test_phases_wait_for_the_gpu_and_carry_its_time(spool: Path) -> None:
    gpu = FakeGpu()
    with computewatch.track(name="cuda") as run:
        timer = GpuTimer(run, events=gpu.event)
        assert timer.enabled
        for _ in range(3):
            with timer.phase("forward"):
                pass
        assert timer.pending == 3  # the GPU has not started: nothing recorded, nothing waited
        assert timer.resolve() == 0
        gpu.advance(2, ms_each=4.0)  # the first pair completes
        assert timer.resolve() == 1
        assert timer.pending == 2
        gpu.finish(ms_each=4.0)
        assert timer.resolve() == 2
        timer.close()
    phases = _phases(spool)
    assert [p.name for p in phases] == ["forward"] * 3
    assert [p.accel_seconds for p in phases] == pytest.approx([0.004] * 3)
    assert all(p.start <= p.end for p in phases)
    assert timer.dropped == 0


def test_pending_pairs_resolve_at_the_next_phase_in_order(spool: Path) -> None:
    gpu = FakeGpu()
    with computewatch.track(name="cuda") as run:
        timer = GpuTimer(run, events=gpu.event)
        with timer.phase("step"):
            with timer.phase("forward"):
                pass
            with timer.phase("backward"):
                pass
        gpu.finish(ms_each=1.0)
        # events: step0 fwd0 fwd1 bwd0 bwd1 step1 → forward 1 ms, backward 1 ms, step 5 ms
        with timer.phase("optimizer"):  # its end resolves everything before it
            pass
        assert timer.pending == 1
        gpu.finish(ms_each=2.0)
        timer.close()
    phases = _phases(spool)
    assert [p.name for p in phases] == ["forward", "backward", "step", "optimizer"]
    assert [p.accel_seconds for p in phases] == pytest.approx([0.001, 0.001, 0.005, 0.002])
    step, forward = phases[2], phases[0]
    assert step.start <= forward.start and forward.end <= step.end


def test_the_pending_list_is_bounded_and_counted(spool: Path) -> None:
    gpu = FakeGpu()
    with computewatch.track(name="cuda") as run:
        timer = GpuTimer(run, events=gpu.event, max_pending=2)
        for _ in range(5):
            with timer.phase("forward"):
                pass
        assert timer.pending == 2
        assert timer.dropped == 3  # recorded, without GPU time
        timer.close(wait=0.0)  # the GPU never caught up
        assert timer.dropped == 5
    phases = _phases(spool)
    assert len(phases) == 5
    assert all(p.accel_seconds is None for p in phases)
    with pytest.raises(ValueError, match="max_pending"):
        GpuTimer(run, events=gpu.event, max_pending=0)


def test_events_are_reused_once_resolved(spool: Path) -> None:
    gpu = FakeGpu()
    with computewatch.track(name="cuda") as run:
        timer = GpuTimer(run, events=gpu.event)
        for _ in range(50):
            with timer.phase("forward"):
                pass
            gpu.finish()
        timer.close()
    assert gpu.created <= 4
    assert len(_phases(spool)) == 50


def test_close_polls_until_the_gpu_gets_there(spool: Path) -> None:
    gpu = FakeGpu()
    with computewatch.track(name="cuda") as run:
        timer = GpuTimer(run, events=gpu.event)

        @timer.phase("forward")
        def forward() -> int:
            return 7

        assert forward() == 7
        gpu_thread = threading.Timer(0.05, gpu.finish)
        gpu_thread.start()
        timer.close(wait=30.0)
        gpu_thread.join()
        assert not timer.enabled
        with timer.phase("late"):  # after close: host time only
            pass
    phases = _phases(spool)
    assert [(p.name, p.accel_seconds is not None) for p in phases] == [
        ("forward", True),
        ("late", False),
    ]


def test_a_phase_that_raises_is_still_recorded(spool: Path) -> None:
    gpu = FakeGpu()
    with computewatch.track(name="cuda") as run:
        timer = GpuTimer(run, events=gpu.event)
        with pytest.raises(RuntimeError), timer.phase("forward"):
            raise RuntimeError("out of memory")
        gpu.finish()
        timer.close()
    assert [p.name for p in _phases(spool)] == ["forward"]


def test_without_cuda_gpu_phase_is_a_host_phase(
    spool: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A machine without CUDA, on any machine: torch says so, as with CUDA_VISIBLE_DEVICES="".
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with computewatch.track(name="cuda") as run:
        ph = gpu_phase(run, "forward")
        assert ph is run.phase("forward")
        with ph:
            time.sleep(0.001)
        timer = GpuTimer(run)
        assert not timer.enabled
        opened = timer.begin()
        timer.end("backward", opened)
    phases = _phases(spool)
    assert [(p.name, p.accel_seconds) for p in phases] == [("forward", None), ("backward", None)]
