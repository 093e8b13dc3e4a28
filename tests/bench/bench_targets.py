"""Small functions with known costs, for the benchmark tests (copied next to each test's CLI
run, which imports them as ``bench_targets:NAME``)."""

from __future__ import annotations

import time

PER_BATCH = 0.02  # seconds per call, whatever the batch (tests/bench/test_loadgen.py: the same)


def fixed(batch: list[object]) -> list[object]:
    """Takes PER_BATCH seconds per batch and answers each query."""
    time.sleep(PER_BATCH)
    return list(batch)


def fast(batch: list[object]) -> list[object]:
    time.sleep(0.001)
    return list(batch)


def slow(batch: list[object]) -> list[object]:
    time.sleep(0.004)
    return list(batch)


def raises(batch: list[object]) -> list[object]:
    raise ValueError("model exploded")


def wrong_shape(batch: list[object]) -> list[object]:
    return [0]  # one answer, whatever the batch


def not_a_sequence(batch: list[object]) -> int:
    return 42


def queries() -> list[int]:
    return list(range(64))


def accuracy(fn: object) -> float:
    return 0.9 if fn is fast else 0.95


def alloc_factory(batch_size: int, **_params: object):  # type: ignore[no-untyped-def]
    """A step that holds batch_size x 32 MiB: a memory limit stops the large batches."""

    def step() -> None:
        block = bytearray(batch_size * 32 * 1024 * 1024)
        block[::4096] = b"\1" * len(block[::4096])
        time.sleep(0.001)

    return step


def crash_factory(batch_size: int, **_params: object):  # type: ignore[no-untyped-def]
    import os
    import signal

    def step() -> None:
        if batch_size >= 4:
            os.kill(os.getpid(), signal.SIGSEGV)
        time.sleep(0.001)

    return step


def saturating_factory(batch_size: int, **_params: object):  # type: ignore[no-untyped-def]
    """Throughput grows with the batch up to 4 (80 ms a step), then stays at 50 samples/s
    (20 ms a sample). Steps this long keep the knee where it is on a loaded machine, where a
    sleep overshoots by several milliseconds."""

    def step() -> None:
        time.sleep(0.08 if batch_size <= 4 else 0.02 * batch_size)

    return step


def instant(batch: list[object]) -> list[object]:
    """No work at all: one warm call says nothing of the rate at which queries are answered."""
    return list(batch)
