"""The Keras 3 callback, on a real Keras fit (PyTorch backend) of a tiny model on CPU."""

from __future__ import annotations

import sys
from importlib.util import find_spec

import pytest

pytestmark = pytest.mark.slow

SCRIPT = """
import os, sys
os.environ["KERAS_BACKEND"] = "torch"
import numpy as np
import keras
from computewatch.integrations.keras import ComputewatchCallback

num_samples = None if sys.argv[1] == "nominal" else 18
rng = np.random.default_rng(0)
x = rng.normal(size=(18, 8)).astype("float32")  # batches of 4, 4, 4, 4, 2
y = rng.normal(size=(18, 1)).astype("float32")
model = keras.Sequential(
    [keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)]
)
model.compile(optimizer="sgd", loss="mse")
callback = ComputewatchCallback(
    batch_size=4, num_samples=num_samples, tokens_per_sample=8, name="keras-tiny"
)
model.fit(x, y, batch_size=4, epochs=2, verbose=0, callbacks=[callback])
"""


@pytest.mark.skipif(find_spec("keras") is None, reason="Keras 3 is not installed")
@pytest.mark.parametrize("exact", [True, False])
def test_each_batch_is_a_step_with_samples_and_phases(cw, make_script, stored, exact) -> None:
    script = make_script("fit.py", SCRIPT)
    cw.ok("run", "--quiet", "--", sys.executable, script, "exact" if exact else "nominal")
    got = stored()
    assert got.run.name == "keras-tiny"
    assert len(got.steps) == 10  # 2 epochs × 5 batches
    last = 2 if exact else 4  # the short last batch is known only with num_samples
    assert [s.samples for s in got.steps] == [4, 4, 4, 4, last] * 2
    assert [s.tokens for s in got.steps] == [8 * n for n in [4, 4, 4, 4, last] * 2]
    assert got.phase_names() == {"data": 10, "train_step": 10}
    for i in range(10):
        assert [p.name for p in got.phases_of_step(i)] == ["data", "train_step"]
    (meta,) = [m for _, m in got.writers.values()]
    assert meta["total_steps"] == 10  # Keras's steps × epochs, for the forecast
