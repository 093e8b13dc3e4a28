"""``computewatch flops``: the FLOPs of a training run from its size (6·N·D), its shape (PaLM's
attention term) or a Hugging Face ``config.json``, in FLOP and PF-days, with the regulatory
thresholds it crosses or approaches.

The argparse setup and the command live here so the main CLI only wires them in. A bad number
is a usage error (exit 2); an unreadable or incomplete config.json, exit 1; one line each.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from computewatch.accounting.flops import thresholds
from computewatch.accounting.formulas import (
    KAPLAN_SOURCE,
    PALM_SOURCE,
    PF_DAY_FLOP,
    FormulaError,
    TransformerShape,
    parse_count,
    read_hf_config,
    training_flops,
)

__all__ = ["add_flops_parser", "cmd_flops", "flops_estimate"]

PROG = "computewatch"
CHINCHILLA_SOURCE = "Hoffmann et al. (2022), Training Compute-Optimal Large Language Models"


def _count(text: str) -> float:
    try:
        return parse_count(text)
    except FormulaError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _whole(text: str) -> int:
    v = _count(text)
    if v != int(v):
        raise argparse.ArgumentTypeError(f"expected a whole number, not {text!r}")
    return int(v)


def add_flops_parser(sub: Any) -> None:
    """Add ``flops`` to the CLI's subcommands (``sub``: the ``add_subparsers`` object)."""
    p = sub.add_parser(
        "flops",
        help="FLOPs of a training run from its size, shape or config.json (6ND, PaLM)",
        description="Training FLOPs from the parameter count N and the tokens D: 6·N·D, or "
        "D × (6N + 12·L·d·T) with the shape (PaLM, appendix B); in FLOP and PF-days, with the "
        "regulatory thresholds crossed or approached (docs/methodology.md). Numbers may be "
        "written 7e9, 7B, 1.4T, 70M.",
    )
    p.add_argument(
        "--params",
        type=_count,
        metavar="N",
        help="non-embedding parameters (default with --config: counted from the config)",
    )
    p.add_argument("--tokens", type=_count, required=True, metavar="D", help="training tokens")
    p.add_argument("--layers", type=_whole, metavar="L", help="transformer layers")
    p.add_argument("--context", type=_whole, metavar="T", help="context length in tokens")
    p.add_argument(
        "--d-model", type=_whole, metavar="D_MODEL", help="model width (= heads × head dim)"
    )
    p.add_argument("--heads", type=_whole, metavar="H", help="attention heads (checks d-model)")
    p.add_argument(
        "--causal",
        action="store_true",
        help="halve the attention term (kernels that skip the masked half, e.g. flash attention)",
    )
    p.add_argument(
        "--config",
        metavar="CONFIG_JSON",
        help="a Hugging Face config.json: the shape and N from it (flags given win)",
    )
    p.add_argument("--json", action="store_true", help="print JSON")


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
        return _fail(str(e), 1)
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
        return _fail(str(e), 2)
    if args.json:
        print(json.dumps(result, indent=2))
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


def _fail(message: str, code: int) -> int:
    print(f"{PROG}: {message}", file=sys.stderr)
    return code
