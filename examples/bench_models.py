"""Models for ``computewatch bench compare`` (docs/bench.md): a MobileNet and a ResNet from
torchvision with random weights, and a small classifier in float32, dynamically quantized to
int8, and pruned, all on the CPU. Each variant is a batch function: a list of inputs in, one
prediction per input out; its ``model`` attribute gives the model's size.

    computewatch bench compare --queries bench_models:images \\
        --variant mobilenet=bench_models:mobilenet --variant resnet=bench_models:resnet

    computewatch bench compare --queries bench_models:vectors \\
        --accuracy bench_models:agreement --variant fp32=bench_models:mlp_fp32 \\
        --variant int8=bench_models:mlp_int8 --variant pruned=bench_models:mlp_pruned

Random weights say nothing about a model's real accuracy, so ``agreement`` measures what
quantization and pruning change: the share of held-out inputs on which a variant predicts the
same class as the float32 model. Models are built on first use, one thread each (a fair
comparison on a shared CPU).
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.nn.utils import prune

torch.set_num_threads(1)
IMAGE = (3, 64, 64)
FEATURES = 784


class Predictor:
    """A batch function over a lazily built model: ``predictor(list_of_tensors)`` returns one
    class index per input."""

    def __init__(self, build: Callable[[], nn.Module]) -> None:
        self._build = build

    @functools.cached_property
    def model(self) -> nn.Module:
        torch.manual_seed(0)
        return self._build().eval()

    def __call__(self, batch: list[torch.Tensor]) -> torch.Tensor:
        with torch.inference_mode():
            return self.model(torch.stack(batch)).argmax(dim=1)


def _torchvision(name: str) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        # torchvision is imported for the image models only (the classifier does not need it)
        import torchvision

        model: nn.Module = getattr(torchvision.models, name)(weights=None)
        return model

    return build


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(FEATURES, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
        nn.Linear(1024, 10),
    )  # fmt: skip


def _int8() -> nn.Module:
    with warnings.catch_warnings():  # torch.ao.quantization: deprecated in favour of torchao
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", UserWarning)
        quantized: nn.Module = torch.ao.quantization.quantize_dynamic(
            _mlp(), {nn.Linear}, dtype=torch.qint8
        )
    return quantized


def _pruned(amount: float = 0.5) -> nn.Module:
    model = _mlp()
    for layer in model:
        if isinstance(layer, nn.Linear):
            prune.l1_unstructured(layer, "weight", amount=amount)
            prune.remove(layer, "weight")  # zeros kept in a dense tensor: same size, same speed
    return model


mobilenet = Predictor(_torchvision("mobilenet_v3_small"))
resnet = Predictor(_torchvision("resnet18"))
mlp_fp32 = Predictor(_mlp)
mlp_int8 = Predictor(_int8)
mlp_pruned = Predictor(_pruned)


def images(n: int = 64) -> list[torch.Tensor]:
    """The query samples for the image models: random 3x64x64 images."""
    g = torch.Generator().manual_seed(1)
    return list(torch.randn(n, *IMAGE, generator=g))


def vectors(n: int = 256) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(2)
    return list(torch.randn(n, FEATURES, generator=g))


def agreement(predict: Any) -> float:
    """Top-1 agreement with the float32 classifier on 512 held-out inputs (0 to 1)."""
    held_out = list(torch.randn(512, FEATURES, generator=torch.Generator().manual_seed(3)))
    reference = mlp_fp32(held_out)
    return float((predict(held_out) == reference).float().mean())
