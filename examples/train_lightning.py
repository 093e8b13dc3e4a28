"""PyTorch Lightning with computewatch: one callback.

computewatch run -- python examples/train_lightning.py
"""

from __future__ import annotations

from typing import Any

import pytorch_lightning as pl
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from computewatch.integrations.lightning import ComputewatchCallback


class Classifier(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss: torch.Tensor = nn.functional.cross_entropy(self.net(x), y)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)


def main() -> None:
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(4096, 64), torch.randint(0, 10, (4096,)))
    trainer = pl.Trainer(
        max_epochs=3, callbacks=[ComputewatchCallback(name="lightning-example")], logger=False
    )
    trainer.fit(Classifier(), DataLoader(data, batch_size=64, shuffle=True))


if __name__ == "__main__":
    main()
