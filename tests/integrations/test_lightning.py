"""The PyTorch Lightning callback, on a real Lightning fit of a tiny model on CPU."""

from __future__ import annotations

import itertools
import subprocess
import sys

import pytest

pytest.importorskip("pytorch_lightning")

pytestmark = pytest.mark.slow

SCRIPT = """
import itertools
import subprocess
import sys
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
import pytorch_lightning as pl
from computewatch.integrations.lightning import ComputewatchCallback

VALIDATE = sys.argv[1] == "validate"


class Tiny(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.mse_loss(self.net(x), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


torch.manual_seed(0)
data = TensorDataset(torch.randn(18, 8), torch.randn(18, 1))  # batches of 4, 4, 4, 4, 2
trainer = pl.Trainer(
    max_epochs=2, callbacks=[ComputewatchCallback(name="lightning-tiny", tags={"t": "1"})],
    logger=False, enable_checkpointing=False, enable_progress_bar=False,
    enable_model_summary=False, accelerator="cpu", devices=1,
    limit_val_batches=2 if VALIDATE else 0,
)
val = DataLoader(data, batch_size=9) if VALIDATE else None
trainer.fit(Tiny(), DataLoader(data, batch_size=4), val)
"""


def test_each_batch_is_a_step_with_its_phases(cw, make_script, stored) -> None:
    script = make_script("fit.py", SCRIPT)
    cw.ok("run", "--quiet", "--", sys.executable, script, "plain")
    got = stored()
    assert got.run.name == "lightning-tiny"
    assert got.run.mode == "run"  # attached to computewatch run's own run
    assert len(got.steps) == 10  # 2 epochs × 5 batches
    assert [s.samples for s in got.steps] == [4, 4, 4, 4, 2] * 2
    assert got.phase_names() == {"data": 10, "forward": 10, "backward": 10, "optimizer": 10}
    for i in range(10):
        phases = got.phases_of_step(i)
        assert [p.name for p in phases] == ["data", "forward", "backward", "optimizer"]
        for a, b in itertools.pairwise(phases):
            assert a.end <= b.start  # one after the other, inside the step
        assert phases[-1].end <= got.steps[i].mono
        assert all(p.accel_seconds is None for p in phases)  # no CUDA here
    s = cw.show()
    assert s["steps"]["samples_total"] == 36


def test_standalone_fit_starts_and_closes_its_own_run(cw, make_script, stored) -> None:
    script = make_script("fit.py", SCRIPT)

    r = subprocess.run(
        [sys.executable, script, "validate"],
        capture_output=True, text=True, env=cw.env(), cwd=cw.tmp, timeout=300, check=False,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    got = stored()
    assert got.run.name == "lightning-tiny"
    assert got.run.mode == "track"
    assert got.run.status == "completed"
    assert got.run.tags == {"t": "1"}
    assert len(got.steps) == 10
    names = got.phase_names()
    assert names["validation"] == 2  # once per epoch; the sanity check is not counted
    assert names["forward"] == 10
    (meta,) = [m for _, m in got.writers.values()]
    assert meta["total_steps"] == 10  # Lightning's estimate, for the forecast
