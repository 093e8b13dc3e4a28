"""A small CPU-only "training" job to try computewatch on: a data-loading worker process feeds
batches to a compute loop that reports its steps and their two phases (waiting for data,
computing).

    computewatch run --name example -- python examples/train.py --epochs 2
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import random
import time

import computewatch

DIM = 128


def loader(queue: mp.Queue, batches: int, batch_size: int) -> None:  # type: ignore[type-arg]
    """Produce batches of random vectors, as a DataLoader worker would."""
    rng = random.Random(0)
    for _ in range(batches):
        queue.put([[rng.random() for _ in range(DIM)] for _ in range(batch_size)])
    queue.put(None)


def train_step(batch: list[list[float]], weights: list[float]) -> float:
    """A dot product and an update per sample: pure-Python compute that keeps one core busy."""
    loss = 0.0
    for x in batch:
        y = sum(a * b for a, b in zip(x, weights, strict=True))
        err = y - 1.0
        loss += err * err
        for i, a in enumerate(x):
            weights[i] -= 1e-4 * err * a
    return loss / len(batch)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--steps-per-epoch", type=int, default=1000)
    ap.add_argument("--batch-size", type=int, default=64)
    args = ap.parse_args()
    weights = [0.0] * DIM
    with computewatch.track(name="example", tags={"model": "linear"}) as run:
        for epoch in range(args.epochs):
            queue: mp.Queue = mp.Queue(maxsize=8)  # type: ignore[type-arg]
            worker = mp.Process(target=loader, args=(queue, args.steps_per_epoch, args.batch_size))
            worker.start()
            t0 = time.monotonic()
            loss = 0.0
            # Two phases per step: the wait for the worker's next batch, and the compute.
            for batch in run.data(iter(queue.get, None)):
                with run.phase("compute"):
                    loss = train_step(batch, weights)
                run.step(samples=len(batch), tokens=len(batch) * DIM)
            worker.join()
            print(f"epoch {epoch + 1}: loss {loss:.4f} ({time.monotonic() - t0:.1f} s)", flush=True)


if __name__ == "__main__":
    main()
