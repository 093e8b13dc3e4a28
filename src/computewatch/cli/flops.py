"""``computewatch flops``: the FLOPs of a training run from its size (6·N·D), its shape (PaLM's
attention term) or a Hugging Face ``config.json``, in FLOP and PF-days, with the regulatory
thresholds it crosses or approaches.

The flags live here; the command is :mod:`computewatch.cli.flops_run`, loaded only when it runs.
A bad number is a usage error (exit 2); an unreadable or incomplete config.json, exit 1; one
line each.
"""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["add_flops_parser"]


def _count(text: str) -> float:
    # only when the flag is given: the accounting package is not needed to start (start-up time)
    from computewatch.accounting.formulas import FormulaError, parse_count

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
