"""A plain PyTorch loop monitored in one line: ``computewatch.torch.steps`` times the data wait
and closes each step; phases split the rest.

    computewatch run -- python examples/train_torch_loop.py
"""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import computewatch
import computewatch.torch as cwt
from computewatch.torch.cuda import gpu_timer


def main() -> None:
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(4096, 64), torch.randint(0, 10, (4096,)))
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    with computewatch.track(name="torch-loop") as run:
        for _epoch in range(3):
            for x, y in cwt.steps(run, DataLoader(data, batch_size=64, shuffle=True)):
                with cwt.gpu_phase(run, "forward"):  # GPU time too, when on CUDA
                    loss = nn.functional.cross_entropy(model(x), y)
                with cwt.gpu_phase(run, "backward"):
                    loss.backward()  # type: ignore[no-untyped-call]
                with run.phase("optimizer"):
                    opt.step()
                    opt.zero_grad()
        gpu_timer(run).close()  # record the last GPU times before the run ends


if __name__ == "__main__":
    main()
