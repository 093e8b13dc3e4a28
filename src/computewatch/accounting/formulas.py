"""Analytic FLOPs of models and training runs: the transformer formulas, 6·N·D, convolution and
linear layers, and a transformer's shape and parameter count read from a Hugging Face
``config.json``. Pure Python (no torch), so the CLI and the accounting can use it anywhere.

One FLOP is one floating-point operation; a multiply-add is two. The formulas count the matrix
multiplications only, as PyTorch's ``FlopCounterMode`` does: softmax, normalisation, activation
functions, residual additions and bias additions are left out (they are O(d) per token against
O(d²) for the matmuls). Sources and derivations: docs/methodology.md, "FLOPs".
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from computewatch.errors import ComputewatchError

__all__ = [
    "PF_DAY_FLOP",
    "FormulaError",
    "TransformerShape",
    "conv2d_flops",
    "linear_flops",
    "parse_count",
    "read_hf_config",
    "shape_from_hf_config",
    "training_flops",
    "transformer_flops_per_token",
]

PF_DAY_FLOP = 1e15 * 86_400  # one petaFLOP/s for a day: 8.64e19 FLOP
PALM_SOURCE = "Chowdhery et al. (2022), PaLM, appendix B"
KAPLAN_SOURCE = "Kaplan et al. (2020), Scaling Laws for Neural Language Models, table 1"

_SUFFIX = {"k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12, "p": 1e15}
_COUNT = re.compile(r"^\s*([0-9][0-9_,]*(?:\.[0-9]*)?(?:e[+-]?[0-9]+)?)\s*([kmbgtp]?)\s*$", re.I)

# Model types whose MLP is gated (three d × i matrices: gate, up, down), after the modeling
# code of Hugging Face Transformers (LlamaMLP, MistralMLP, Qwen2MLP, GemmaMLP, Phi3MLP, ...).
GATED_MLP_TYPES = frozenset(
    {
        "llama",
        "mistral",
        "qwen2",
        "qwen3",
        "gemma",
        "gemma2",
        "gemma3_text",
        "phi3",
        "olmo",
        "olmo2",
        "cohere",
        "internlm2",
        "granite",
        "stablelm",
    }
)
_GATED_ACTS = frozenset({"silu", "swiglu", "swish"})


class FormulaError(ComputewatchError, ValueError):
    """An input the formulas cannot use: a bad number, an unreadable or incomplete config."""


def parse_count(text: str) -> float:
    """A positive count as people write it: ``7e9``, ``7B``, ``1.4T``, ``70M``, ``125k``,
    ``7,000,000`` (k = 10³, M = 10⁶, B or G = 10⁹, T = 10¹², P = 10¹⁵; any case)."""
    m = _COUNT.match(text)
    if m is None:
        raise FormulaError(f"not a count: {text!r} (write e.g. 7e9, 7B, 1.4T, 70M)")
    digits = m.group(1).replace(",", "").replace("_", "")
    try:
        value = float(digits) * _SUFFIX.get(m.group(2).lower(), 1.0)
    except ValueError:
        raise FormulaError(f"not a count: {text!r} (write e.g. 7e9, 7B, 1.4T, 70M)") from None
    if not (math.isfinite(value) and value > 0):
        raise FormulaError(f"a count must be positive and finite, not {text!r}")
    return value


def transformer_flops_per_token(
    params: float,
    layers: int,
    context: int,
    d_attn: int,
    *,
    causal: bool = False,
    training: bool = True,
) -> float:
    """Model FLOPs per token of a dense transformer.

    Training: ``6N + 12·L·H·Q·T`` (PaLM appendix B; N non-embedding parameters, L layers,
    H·Q = ``d_attn`` the attention width, usually d_model, T the context). The 12 is 3 passes
    (forward, and a backward twice as costly) × 2 matmuls (QKᵀ, scores × V) × 2 FLOPs per
    multiply-add. Inference (one forward): ``2N + 4·L·H·Q·T``. ``causal`` halves the attention
    term, for kernels that skip the masked half (flash attention); the causal forward,
    ``2N + 2·L·H·Q·T``, is Kaplan et al.'s C_forward (2020, table 1).
    """
    _check_positive(params=params, layers=layers, context=context, d_attn=d_attn)
    attention = 4.0 * layers * d_attn * context
    if causal:
        attention /= 2
    per_forward = 2.0 * params + attention
    return 3.0 * per_forward if training else per_forward


def training_flops(
    params: float,
    tokens: float,
    *,
    layers: int | None = None,
    context: int | None = None,
    d_attn: int | None = None,
    causal: bool = False,
) -> float:
    """FLOPs of a whole training run on ``tokens`` tokens: ``6·N·D`` (Kaplan et al. 2020;
    Hoffmann et al. 2022), or ``D × (6N + 12·L·H·Q·T)`` when the shape is given (all of
    ``layers``, ``context``, ``d_attn``)."""
    _check_positive(params=params, tokens=tokens)
    shape = (layers, context, d_attn)
    if all(v is None for v in shape):
        return 6.0 * params * tokens
    if layers is None or context is None or d_attn is None:
        raise FormulaError("the attention term needs all of layers, context and d_attn")
    return tokens * transformer_flops_per_token(params, layers, context, d_attn, causal=causal)


def linear_flops(in_features: int, out_features: int, rows: int = 1) -> float:
    """Forward FLOPs of a linear layer applied to ``rows`` vectors: 2·in·out per row (the bias
    addition is not counted, as FlopCounterMode does not count it)."""
    _check_positive(in_features=in_features, out_features=out_features, rows=rows)
    return 2.0 * in_features * out_features * rows


def conv2d_flops(
    in_channels: int,
    out_channels: int,
    kernel: int | tuple[int, int],
    output_hw: tuple[int, int],
    *,
    groups: int = 1,
    batch: int = 1,
) -> float:
    """Forward FLOPs of a 2-d convolution: 2 × output elements × (in_channels/groups) × kh × kw
    (bias not counted, as in FlopCounterMode's ``conv_flop``)."""
    kh, kw = (kernel, kernel) if isinstance(kernel, int) else kernel
    oh, ow = output_hw
    _check_positive(
        in_channels=in_channels, out_channels=out_channels, kh=kh, kw=kw, oh=oh, ow=ow, batch=batch
    )
    if groups < 1 or in_channels % groups or out_channels % groups:
        raise FormulaError(f"groups={groups} must divide both channel counts")
    return 2.0 * batch * out_channels * oh * ow * (in_channels // groups) * kh * kw


@dataclasses.dataclass(frozen=True, slots=True)
class TransformerShape:
    """A transformer's shape, and its non-embedding parameter count with how it was found."""

    layers: int
    d_model: int
    heads: int
    context: int
    vocab_size: int | None
    intermediate_size: int | None
    kv_heads: int
    head_dim: int
    gated_mlp: bool
    params: float  # non-embedding parameters (weights of the blocks' matmuls)
    params_rule: str

    @property
    def d_attn(self) -> int:
        """H·Q, the width of the attention (d_model for most models)."""
        return self.heads * self.head_dim


def _field(cfg: Mapping[str, Any], names: tuple[str, ...]) -> int | None:
    for name in names:
        v = cfg.get(name)
        if v is None:
            continue
        if (
            isinstance(v, bool)
            or not isinstance(v, int | float)
            or not 0 < v <= 2**53  # also inf and nan; larger would overflow the arithmetic
            or v != int(v)
        ):
            raise FormulaError(f"config field {name!r} must be a positive integer, not {v!r}")
        return int(v)
    return None


def shape_from_hf_config(cfg: Mapping[str, Any]) -> TransformerShape:
    """The shape of the transformer a Hugging Face ``config.json`` describes, with its
    non-embedding parameter count: the exact count of the blocks' weight matrices where
    ``intermediate_size`` is given (grouped-query attention through ``num_key_value_heads``,
    three MLP matrices for gated MLPs), else 12·L·d² (a GPT block with a 4× MLP). Token and
    position embeddings, and the output projection, are not in N; biases and norms neither."""
    text_cfg = cfg.get("text_config")
    if isinstance(text_cfg, Mapping) and "num_hidden_layers" not in cfg:
        cfg = {**text_cfg, "model_type": text_cfg.get("model_type", cfg.get("model_type"))}
    if _field(cfg, ("num_local_experts", "num_experts", "n_routed_experts")):
        raise FormulaError(
            "mixture-of-experts configs are not supported: give --params (the parameters "
            "active per token) and the shape instead"
        )
    layers = _field(cfg, ("n_layer", "num_hidden_layers", "num_layers", "n_layers"))
    d = _field(cfg, ("n_embd", "hidden_size", "d_model", "dim"))
    heads = _field(cfg, ("n_head", "num_attention_heads", "n_heads"))
    context = _field(cfg, ("n_positions", "max_position_embeddings", "n_ctx", "seq_length"))
    missing = [
        name
        for name, v in (
            ("n_layer/num_hidden_layers", layers),
            ("n_embd/hidden_size", d),
            ("n_head/num_attention_heads", heads),
            ("n_positions/max_position_embeddings", context),
        )
        if v is None
    ]
    if missing or layers is None or d is None or heads is None or context is None:
        raise FormulaError(f"the config lacks {', '.join(missing)}")
    vocab = _field(cfg, ("vocab_size",))
    inter = _field(cfg, ("intermediate_size", "n_inner", "ffn_dim"))
    kv_heads = _field(cfg, ("num_key_value_heads",)) or heads
    head_dim = _field(cfg, ("head_dim",))
    if head_dim is None:
        if d % heads:
            raise FormulaError(f"hidden size {d} is not divisible by {heads} heads")
        head_dim = d // heads
    model_type = str(cfg.get("model_type") or "")
    act = str(cfg.get("hidden_act") or cfg.get("activation_function") or "")
    gated = model_type in GATED_MLP_TYPES or act in _GATED_ACTS
    d_attn = heads * head_dim
    if inter is None and kv_heads == heads and d_attn == d:
        params = 12.0 * layers * d * d
        rule = "12·L·d² (GPT block: 4d² attention + 8d² MLP with a 4× hidden layer)"
    else:
        i = inter if inter is not None else 4 * d
        attention = 2 * d * d_attn + 2 * d * kv_heads * head_dim  # Q, O; K, V
        mlp = (3 if gated else 2) * d * i
        params = float(layers * (attention + mlp))
        rule = (
            f"L × (2·d·H·Q + 2·d·KV·Q + {3 if gated else 2}·d·i) = {layers} × "
            f"({attention:,} attention + {mlp:,} {'gated ' if gated else ''}MLP)"
        )
    return TransformerShape(
        layers=layers,
        d_model=d,
        heads=heads,
        context=context,
        vocab_size=vocab,
        intermediate_size=inter,
        kv_heads=kv_heads,
        head_dim=head_dim,
        gated_mlp=gated,
        params=params,
        params_rule=rule,
    )


def read_hf_config(path: str | Path) -> TransformerShape:
    """:func:`shape_from_hf_config` of a ``config.json`` file; unreadable or invalid files
    raise :class:`FormulaError` with the reason."""
    p = Path(path).expanduser()
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise FormulaError(f"cannot read {p}: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise FormulaError(f"{p} is not a text file") from None
    try:
        cfg = json.loads(text)
    except json.JSONDecodeError as e:
        raise FormulaError(f"{p} is not valid JSON: {e.msg} at line {e.lineno}") from None
    except RecursionError:  # json's decoder recurses once per nested array or object
        raise FormulaError(f"{p} nests too deeply to be a model configuration") from None
    except ValueError as e:  # an integer of more than sys.get_int_max_str_digits() digits
        raise FormulaError(f"{p} is not valid JSON: {e}") from None
    if not isinstance(cfg, dict):
        raise FormulaError(f"{p} is not a JSON object")
    try:
        return shape_from_hf_config(cfg)
    except FormulaError as e:
        raise FormulaError(f"{p}: {e}") from None


def _check_positive(**values: float | None) -> None:
    for name, v in values.items():
        if v is None or not (math.isfinite(v) and v > 0):
            raise FormulaError(f"{name} must be positive, not {v!r}")
