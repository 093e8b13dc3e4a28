"""Counted FLOPs of one training or inference step of a PyTorch model.

PyTorch's ``FlopCounterMode`` counts the FLOPs of the operators it knows (matmuls, convolutions,
attention kernels and their backward passes: two per multiply-add) while the step runs. What it
does not count, these numbers leave out too: elementwise work (activations, softmax,
normalisation, residual and bias additions, the optimizer) and operators without a FLOP formula
(on CPU, the fused ``scaled_dot_product_attention`` kernel counts 0: write attention with
matmuls, or count on the accelerator). See docs/methodology.md, "Counted FLOPs".
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode, conv_flop_count

__all__ = ["count_flops", "count_flops_by_module"]

LossFn = Callable[[Any], torch.Tensor]


def count_flops(
    model: torch.nn.Module,
    example_batch: Any,
    training: bool = True,
    *,
    loss_fn: LossFn | None = None,
) -> int:
    """Total FLOPs of one step on ``example_batch``: a forward, and with ``training`` a
    backward from ``loss_fn(output)`` (default: the sum of the output's floating-point
    tensors). Without ``training`` the forward runs in eval mode under ``no_grad``.

    ``example_batch`` is passed as the model's argument: a tensor, a tuple or list of
    positional arguments, or a dict of keyword arguments. The model comes back as it was:
    same parameters, gradients, buffers (BatchNorm statistics) and train/eval mode; no
    optimizer step is taken. Pass the result to ``track(flops_per_step=...)``."""
    with _counting(model, example_batch, training, loss_fn) as counter:
        pass
    return int(counter.get_total_flops())


def count_flops_by_module(
    model: torch.nn.Module,
    example_batch: Any,
    training: bool = True,
    *,
    loss_fn: LossFn | None = None,
) -> dict[str, int]:
    """:func:`count_flops` per module: each of ``model.named_modules()`` (dotted names) to
    the FLOPs counted inside it, its children's included; ``""`` is the whole step (equal to
    :func:`count_flops`, including what ``loss_fn`` computes outside the model)."""
    with _counting(model, example_batch, training, loss_fn) as counter:
        pass
    counts = counter.get_flop_counts()
    root = type(model).__name__
    out = {"": int(sum(counts.get("Global", {}).values()))}
    for name, _ in model.named_modules():
        if name:
            out[name] = int(sum(counts.get(f"{root}.{name}", {}).values()))
    return out


@contextmanager
def _counting(
    model: torch.nn.Module, batch: Any, training: bool, loss_fn: LossFn | None
) -> Iterator[FlopCounterMode]:
    """Run one counted step and put the model back as it was."""
    was_training = model.training
    params = [*model.parameters(), *(t for t in _tensors(batch) if t.requires_grad)]
    grads = [p.grad for p in params]
    buffers = [(b, b.detach().clone()) for b in model.buffers()]
    counter = FlopCounterMode(
        display=False, custom_mapping={torch.ops.aten.convolution_backward: _conv_backward_flop}
    )
    try:
        model.train(training)
        for p in params:
            p.grad = None
        if training:
            with counter:
                out = _call(model, batch)
                loss = loss_fn(out) if loss_fn is not None else _sum_of(out)
                torch.autograd.backward(loss)
        else:
            with torch.no_grad(), counter:
                out = _call(model, batch)
                if loss_fn is not None:
                    loss_fn(out)
        yield counter
    finally:
        for p, g in zip(params, grads, strict=True):
            p.grad = g
        with torch.no_grad():
            for b, saved in buffers:
                b.copy_(saved)
        model.train(was_training)


def _conv_backward_flop(
    grad_out_shape: list[int],
    x_shape: list[int],
    w_shape: list[int],
    _bias: Any,
    _stride: Any,
    _padding: Any,
    _dilation: Any,
    transposed: bool,
    _output_padding: Any,
    _groups: int,
    output_mask: list[bool],
    out_shape: Any,
    **_: Any,
) -> int:
    """FLOPs of a convolution's backward: the gradient of the input and that of the weight
    each cost one forward (both are convolutions of the same size). PyTorch's own formula
    (``conv_backward_flop``, torch 2.13) counts the weight gradient as if ``groups`` were 1,
    ``groups`` times too many for grouped and depthwise convolutions."""
    forward = int(conv_flop_count(x_shape, w_shape, grad_out_shape, transposed))
    return forward * (int(bool(output_mask[0])) + int(bool(output_mask[1])))


def _call(model: torch.nn.Module, batch: Any) -> Any:
    if isinstance(batch, Mapping):
        return model(**batch)
    if isinstance(batch, tuple | list):
        return model(*batch)
    return model(batch)


def _sum_of(out: Any) -> torch.Tensor:
    """A scalar to run the backward from: the sum of every floating tensor in ``out``."""
    tensors = [t for t in _tensors(out) if t.is_floating_point() and t.requires_grad]
    if not tensors:
        raise ValueError(
            "the model's output has no floating-point tensor that requires grad: pass "
            "loss_fn=, or training=False"
        )
    total = tensors[0].sum()
    for t in tensors[1:]:
        total = total + t.sum()
    return total


def _tensors(out: Any) -> Iterator[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        yield out
    elif isinstance(out, Mapping):  # includes Hugging Face ModelOutput
        for v in out.values():
            yield from _tensors(v)
    elif isinstance(out, tuple | list):
        for v in out:
            yield from _tensors(v)
