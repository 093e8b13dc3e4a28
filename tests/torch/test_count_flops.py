"""Counted FLOPs of real PyTorch models on CPU against the analytic formulas.

FlopCounterMode counts matmuls and convolutions (2 FLOPs per multiply-add) and their backward
passes; it does not count softmax, layer norm, activations, residual or bias additions, which
is why the formulas leave them out too. The transformer below writes attention with plain
matmuls (on CPU the fused scaled_dot_product_attention kernel is not counted) and has no
biases, so PaLM's formula applies to it exactly.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from computewatch.accounting.formulas import (
    conv2d_flops,
    linear_flops,
    transformer_flops_per_token,
)
from computewatch.torch import count_flops, count_flops_by_module


class Block(nn.Module):
    """A pre-norm GPT block: attention with matmuls, a 4x MLP, no biases."""

    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.proj = nn.Linear(d, d, bias=False)
        self.ln2 = nn.LayerNorm(d)
        self.up = nn.Linear(d, 4 * d, bias=False)
        self.down = nn.Linear(4 * d, d, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.heads)
        att = scores.softmax(dim=-1) @ v
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, d))
        out: torch.Tensor = x + self.down(torch.nn.functional.gelu(self.up(self.ln2(x))))
        return out


class TinyGPT(nn.Module):
    def __init__(self, vocab: int, context: int, d: int, layers: int, heads: int) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(context, d)
        self.blocks = nn.Sequential(*(Block(d, heads) for _ in range(layers)))
        self.ln = nn.LayerNorm(d)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.shape[1])
        out: torch.Tensor = self.ln(self.blocks(self.tok(idx) + self.pos(pos)))
        return out


def non_embedding_matmul_params(model: nn.Module) -> int:
    """N as PaLM counts it: the blocks' weight matrices (no embeddings, norms or biases)."""
    return sum(m.weight.numel() for m in model.modules() if isinstance(m, nn.Linear))


VOCAB, CONTEXT, D, LAYERS, HEADS, BATCH = 97, 32, 64, 3, 4, 2


@pytest.fixture(scope="module")
def gpt() -> TinyGPT:
    torch.manual_seed(0)
    return TinyGPT(VOCAB, CONTEXT, D, LAYERS, HEADS)


@pytest.fixture(scope="module")
def tokens() -> torch.Tensor:
    return torch.randint(0, VOCAB, (BATCH, CONTEXT), generator=torch.Generator().manual_seed(1))


def test_a_matmul_of_known_size_counts_two_flops_per_multiply_add() -> None:
    lin = nn.Linear(7, 3, bias=False)
    x = torch.randn(5, 7)
    # 5 x 7 @ 7 x 3: 105 multiply-adds = 210 FLOPs
    assert count_flops(lin, x, training=False) == 210
    assert linear_flops(7, 3, rows=5) == 210
    # training: forward 210 + grad of the weight (3x5 @ 5x7: 210); x needs no grad
    assert count_flops(lin, x) == 420
    # with an input that needs a gradient, its grad is one more 210
    assert count_flops(lin, x.clone().requires_grad_()) == 630


def test_transformer_training_matches_palm_within_1_percent(
    gpt: TinyGPT, tokens: torch.Tensor
) -> None:
    n = non_embedding_matmul_params(gpt)
    assert n == 12 * LAYERS * D * D  # 4d² attention + 8d² MLP per block
    per_token = transformer_flops_per_token(n, LAYERS, CONTEXT, D)  # 6N + 12·L·d·T
    expected = BATCH * CONTEXT * per_token
    counted = count_flops(gpt, tokens)
    assert counted == pytest.approx(expected, rel=0.01)
    # the blocks' own figure is exact: every counted op is a matmul of the formula
    assert counted == expected


def test_transformer_inference_is_a_third_of_training(gpt: TinyGPT, tokens: torch.Tensor) -> None:
    n = non_embedding_matmul_params(gpt)
    fwd = count_flops(gpt, tokens, training=False)
    assert fwd == BATCH * CONTEXT * transformer_flops_per_token(
        n, LAYERS, CONTEXT, D, training=False
    )  # 2N + 4·L·d·T per token
    assert count_flops(gpt, tokens) == 3 * fwd


def test_the_model_is_left_as_it_was(gpt: TinyGPT, tokens: torch.Tensor) -> None:
    gpt.eval()
    before = {k: v.clone() for k, v in gpt.state_dict().items()}
    marker = torch.full_like(gpt.ln.weight, 7.0)
    gpt.ln.weight.grad = marker
    count_flops(gpt, tokens, loss_fn=lambda out: out.pow(2).mean())
    assert gpt.training is False
    assert gpt.ln.weight.grad is marker
    assert all(p.grad is None for n, p in gpt.named_parameters() if n != "ln.weight")
    after = gpt.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    gpt.ln.weight.grad = None
    gpt.train()
    count_flops(gpt, tokens, training=False)
    assert gpt.training is True


class SmallCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1),  # 32x32 -> 32x32
            nn.BatchNorm2d(16),
            nn.ReLU(),
            nn.MaxPool2d(2),  # -> 16x16
            nn.Conv2d(16, 32, 3, padding=1),  # -> 16x16
            nn.ReLU(),
            nn.Conv2d(32, 32, 3, stride=2, padding=1, groups=4),  # -> 8x8
            nn.ReLU(),
        )
        self.head = nn.Linear(32 * 8 * 8, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.head(self.features(x).flatten(1))
        return out


def cnn_forward(batch: int) -> tuple[float, float]:
    """(forward FLOPs, those of the first conv) from the formulas."""
    first = conv2d_flops(3, 16, 3, (32, 32), batch=batch)
    rest = (
        conv2d_flops(16, 32, 3, (16, 16), batch=batch)
        + conv2d_flops(32, 32, 3, (8, 8), groups=4, batch=batch)
        + linear_flops(32 * 8 * 8, 10, rows=batch)
    )
    return first + rest, first


def test_cnn_matches_the_conv_formulas_within_1_percent() -> None:
    torch.manual_seed(0)
    model = SmallCNN()
    x = torch.randn(4, 3, 32, 32)
    fwd, first = cnn_forward(4)
    assert count_flops(model, x, training=False) == pytest.approx(fwd, rel=0.01)
    # Training: a backward costs two forwards (grad of the input, grad of the weight), but the
    # first layer's input (the images) needs no gradient, so it computes only one.
    counted = count_flops(model, x)
    assert counted == pytest.approx(3 * fwd - first, rel=0.01)
    assert counted != pytest.approx(3 * fwd, rel=0.01)  # the naive 3x is off here


def test_batchnorm_statistics_are_restored() -> None:
    torch.manual_seed(0)
    model = SmallCNN()
    bn = model.features[1]
    assert isinstance(bn, nn.BatchNorm2d)
    assert bn.running_mean is not None and bn.num_batches_tracked is not None
    mean, count = bn.running_mean.clone(), int(bn.num_batches_tracked)
    x = torch.randn(4, 3, 32, 32) + 5
    count_flops(model, x)
    assert torch.equal(bn.running_mean, mean) and int(bn.num_batches_tracked) == count
    model(x)  # a plain training forward does move them
    assert not torch.equal(bn.running_mean, mean) and int(bn.num_batches_tracked) == count + 1


def test_by_module(gpt: TinyGPT, tokens: torch.Tensor) -> None:
    by = count_flops_by_module(gpt, tokens)
    assert by[""] == count_flops(gpt, tokens)
    assert by["tok"] == 0 and by["ln"] == 0  # embeddings and norms do no counted FLOPs
    per_block = [by[f"blocks.{i}"] for i in range(LAYERS)]
    assert len(set(per_block)) == 1 and sum(per_block) == by["blocks"] == by[""]
    b0 = by["blocks.0"]
    rows = BATCH * CONTEXT
    assert by["blocks.0.up"] == 3 * linear_flops(D, 4 * D, rows)
    # the block = its four linear layers + the two attention matmuls, which sit in no child
    children = sum(by[f"blocks.0.{c}"] for c in ("qkv", "proj", "up", "down"))
    assert b0 - children == 3 * 2 * 2 * BATCH * CONTEXT * CONTEXT * D


def test_inputs_as_kwargs_and_outputs_as_dicts() -> None:
    class Two(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = nn.Linear(4, 4, bias=False)

        def forward(self, x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
            return {"x": self.a(x), "y": self.a(y), "n": torch.tensor(3)}

    m = Two()
    x, y = torch.randn(2, 4), torch.randn(3, 4)
    # forward 2·4·4·(2+3) = 160; backward: grads of the weight only = 160
    assert count_flops(m, {"x": x, "y": y}) == 320
    assert count_flops(m, (x, y), training=False) == 160


def test_an_output_without_gradient_asks_for_a_loss() -> None:
    class Frozen(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x @ x.T

    with pytest.raises(ValueError, match="loss_fn="):
        count_flops(Frozen(), torch.randn(3, 3))
    assert count_flops(Frozen(), torch.randn(3, 3), training=False) == 54
