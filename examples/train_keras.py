"""Keras 3 (PyTorch backend) with computewatch: one callback.

computewatch run -- python examples/train_keras.py
"""

from __future__ import annotations

import os

os.environ.setdefault("KERAS_BACKEND", "torch")

import keras
import numpy as np

from computewatch.integrations.keras import ComputewatchCallback


def main() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(4096, 64)).astype("float32")
    y = rng.integers(0, 10, size=4096)
    model = keras.Sequential(
        [keras.Input((64,)), keras.layers.Dense(256, activation="relu"), keras.layers.Dense(10)]
    )
    model.compile(optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(True))
    callback = ComputewatchCallback(batch_size=64, num_samples=len(x), name="keras-example")
    model.fit(x, y, batch_size=64, epochs=3, callbacks=[callback])


if __name__ == "__main__":
    main()
