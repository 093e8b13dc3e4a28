"""``computewatch flops``: the estimate and its printout (the flags are in
:mod:`computewatch.cli.flops`; the CLI loads this module only when the command runs)."""

from __future__ import annotations

import argparse
from typing import Any

from computewatch import jsonout
from computewatch.accounting.flops import thresholds
from computewatch.accounting.formulas import (
    KAPLAN_SOURCE,
    PALM_SOURCE,
    PF_DAY_FLOP,
    FormulaError,
    TransformerShape,
    read_hf_config,
    training_flops,
)
from computewatch.errors import ComputewatchError, UsageError

__all__ = ["cmd_flops", "flops_estimate", "print_flops"]

CHINCHILLA_SOURCE = "Hoffmann et al. (2022), Training Compute-Optimal Large Language Models"


def flops_estimate(
    params: float | None,
    tokens: float,
    *,
    layers: int | None = None,
    context: int | None = None,
    d_model: int | None = None,
    heads: int | None = None,
    causal: bool = False,
    shape: TransformerShape | None = None,
    config_path: str | None = None,
) -> dict[str, Any]:
    """The result ``computewatch flops --json`` prints: ``flops``, ``pf_days``, ``method``,
    ``formula``, ``inputs``, ``thresholds``, ``assumptions``. Values given win over the
    ``shape`` read from a config. Raises :class:`FormulaError` for inputs that do not fit."""
    assumptions: list[str] = []
    params_from = "given"
    if shape is not None:
        layers = layers or shape.layers
        context = context or shape.context
        heads = heads or shape.heads
        d_attn: int | None = d_model or shape.d_attn
        d_model = d_model or shape.d_model
        if params is None:
            params, params_from = shape.params, f"counted from the config: {shape.params_rule}"
            assumptions.append(
                "N excludes the token and position embeddings and the output projection "
                "(PaLM's and Kaplan's non-embedding N), biases and norms"
            )
    else:
        d_attn = d_model
    if params is None:
        raise FormulaError("give --params N (or --config config.json to count it)")
    shape_given = [v is not None for v in (layers, context, d_attn)]
    if any(shape_given) and not all(shape_given):
        raise FormulaError("the attention term needs all of --layers, --context and --d-model")
    if heads is not None and d_model is not None and shape is None and d_model % heads:
        raise FormulaError(f"--d-model {d_model} is not divisible by --heads {heads}")
    flop = training_flops(
        params, tokens, layers=layers, context=context, d_attn=d_attn, causal=causal
    )
    if all(shape_given):
        method = "6ND + attention"
        attn = "6·L·H·Q·T" if causal else "12·L·H·Q·T"
        formula = f"D × (6N + {attn}), H·Q = {d_attn} ({PALM_SOURCE})"
        if causal:
            assumptions.append("causal: the attention term halved (masked half skipped)")
    else:
        method = "6ND"
        formula = f"6 × N × D ({KAPLAN_SOURCE}; {CHINCHILLA_SOURCE})"
        assumptions.append("attention FLOPs left out: give --layers, --context, --d-model")
    assumptions.append("training: forward + backward (2× forward); no recomputation")
    inputs: dict[str, Any] = {
        "params": params,
        "params_from": params_from,
        "tokens": tokens,
        "layers": layers,
        "context": context,
        "d_model": d_model,
        "d_attn": d_attn,
        "heads": heads,
        "causal": causal,
        "config": config_path,
    }
    return {
        "flops": flop,
        "pf_days": flop / PF_DAY_FLOP,
        "method": method,
        "formula": formula,
        "inputs": inputs,
        "thresholds": thresholds(flop),
        "assumptions": assumptions,
    }


def cmd_flops(args: argparse.Namespace) -> int:
    """Run ``computewatch flops``; returns the exit status."""
    try:
        shape = read_hf_config(args.config) if args.config else None
    except FormulaError as e:
        raise ComputewatchError(str(e)) from None
    try:
        result = flops_estimate(
            args.params,
            args.tokens,
            layers=args.layers,
            context=args.context,
            d_model=args.d_model,
            heads=args.heads,
            causal=args.causal,
            shape=shape,
            config_path=args.config,
        )
    except FormulaError as e:
        raise UsageError(str(e)) from None
    if args.json:
        print(jsonout.dumps(result, indent=2))
    else:
        print_flops(result)
    return 0


def print_flops(r: dict[str, Any]) -> None:
    """The result as a few labelled lines."""
    i = r["inputs"]
    shape = ""
    if i["layers"] is not None:
        shape = f", L {i['layers']}, d {i['d_model']}, T {i['context']}"
    lines = [
        ("training compute", f"{r['flops']:.3e} FLOP = {r['pf_days']:,.4g} PF-days"),
        ("method", f"{r['method']}: {r['formula']}"),
        ("inputs", f"N {i['params']:.4g} ({i['params_from']}), D {i['tokens']:.4g} tokens{shape}"),
    ]
    lines += [("assumption", a) for a in r["assumptions"]]
    for t in r["thresholds"]:
        if t["crossed"]:
            state = f"crossed ({t['fraction']:.3g}×)"
        elif t["approached"]:
            state = f"approached ({t['fraction']:.1%} of it)"
        else:
            state = f"not approached ({t['fraction'] * 100:.2g}% of it)"
        lines.append(("threshold", f"{t['flop']:.0e} FLOP, {t['name']}: {state}"))
    width = max(len(k) for k, _ in lines)
    for k, v in lines:
        print(f"{k:<{width}}  {v}")
