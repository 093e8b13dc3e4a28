"""The framework callbacks record the run's hyperparameters (``config``), for real: a tiny
Lightning fit and a tiny Keras fit on CPU, each in a child interpreter."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

pytestmark = pytest.mark.slow

LIGHTNING = """
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
import pytorch_lightning as pl
from computewatch.integrations.lightning import ComputewatchCallback


class Tiny(pl.LightningModule):
    def __init__(self, lr=0.05, hidden=16, wandb_api_key="k-123"):
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Linear(8, hidden), nn.ReLU(), nn.Linear(hidden, 1))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


data = TensorDataset(torch.randn(16, 8), torch.randn(16, 1))
trainer = pl.Trainer(
    max_epochs=1, callbacks=[ComputewatchCallback(name="lit")], logger=False,
    enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
    accelerator="cpu", devices=1,
)
trainer.fit(Tiny(), DataLoader(data, batch_size=4))
"""

KERAS = """
import numpy as np
import keras
from computewatch.integrations.keras import ComputewatchCallback

model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
model.compile(optimizer=keras.optimizers.Adam(learning_rate=0.003), loss="mse")
model.fit(np.zeros((8, 4)), np.zeros((8, 1)), epochs=2, batch_size=4, verbose=0,
          callbacks=[ComputewatchCallback(name="ker")])
"""


def _fit(cw: Any, make_script: Any, source: str, **env: str) -> None:
    script = make_script("fit.py", source)
    r = subprocess.run(
        [sys.executable, script], capture_output=True, text=True, env=cw.env(**env),
        cwd=cw.tmp, timeout=300, check=False,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr


def test_lightning_hparams_and_trainer_settings(cw: Any, make_script: Any) -> None:
    _fit(cw, make_script, LIGHTNING)
    config = cw.show("lit")["config"]
    assert config["lr"] == 0.05 and config["hidden"] == 16
    assert config["wandb_api_key"] == "***"  # redacted before it was written
    assert config["trainer.max_epochs"] == 1
    assert config["trainer.accumulate_grad_batches"] == 1


def test_keras_fit_parameters_and_optimizer(cw: Any, make_script: Any) -> None:
    _fit(cw, make_script, KERAS, KERAS_BACKEND="torch")
    config = cw.show("ker")["config"]
    assert config["epochs"] == 2
    assert config["optimizer"]["class"] == "Adam"
    assert config["optimizer"]["learning_rate"] == pytest.approx(0.003)
