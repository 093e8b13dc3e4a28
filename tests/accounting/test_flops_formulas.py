"""The analytic FLOPs formulas and the Hugging Face config reader, with hand-computed answers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from computewatch.accounting.formulas import (
    PF_DAY_FLOP,
    FormulaError,
    conv2d_flops,
    linear_flops,
    parse_count,
    read_hf_config,
    shape_from_hf_config,
    training_flops,
    transformer_flops_per_token,
)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("7e9", 7e9),
        ("7B", 7e9),
        ("7b", 7e9),
        ("1.4T", 1.4e12),
        ("70M", 70e6),
        ("125k", 125e3),
        ("7,000,000", 7e6),
        ("2.5G", 2.5e9),
        ("3", 3.0),
        (" 1e3 ", 1e3),
    ],
)
def test_counts_as_people_write_them(text: str, value: float) -> None:
    assert parse_count(text) == pytest.approx(value, rel=1e-12)


@pytest.mark.parametrize("text", ["", "B", "7x", "-7B", "0", "1e999", "nan", "7 B B", "1.2.3"])
def test_bad_counts(text: str) -> None:
    with pytest.raises(FormulaError):
        parse_count(text)


def test_palm_per_token() -> None:
    # N=1e9, L=24, d=2048, T=2048: 6e9 + 12·24·2048·2048 = 6e9 + 1,207,959,552
    assert transformer_flops_per_token(1e9, 24, 2048, 2048) == 6e9 + 1_207_959_552
    # causal halves the attention term: 6e9 + 603,979,776
    assert transformer_flops_per_token(1e9, 24, 2048, 2048, causal=True) == 6e9 + 603_979_776
    # inference (one forward): 2e9 + 4·24·2048·2048 = 2e9 + 402,653,184
    fwd = transformer_flops_per_token(1e9, 24, 2048, 2048, training=False)
    assert fwd == 2e9 + 402_653_184
    # causal forward is Kaplan's C_forward = 2N + 2·L·T·d
    kaplan = transformer_flops_per_token(1e9, 24, 2048, 2048, training=False, causal=True)
    assert kaplan == 2e9 + 2 * 24 * 2048 * 2048


def test_whole_runs() -> None:
    # Chinchilla: 70e9 parameters on 1.4e12 tokens: 6ND = 5.88e23 FLOP = 6,805.6 PF-days
    assert training_flops(70e9, 1.4e12) == pytest.approx(5.88e23)
    assert training_flops(70e9, 1.4e12) / PF_DAY_FLOP == pytest.approx(6805.555, rel=1e-6)
    # with the shape: D x (6N + 12 L d T); L=80, d=8192, T=2048: 12·80·8192·2048 = 1.61e10
    with_attn = training_flops(70e9, 1.4e12, layers=80, context=2048, d_attn=8192)
    assert with_attn == pytest.approx(1.4e12 * (4.2e11 + 12 * 80 * 8192 * 2048))
    with pytest.raises(FormulaError, match="all of layers, context and d_attn"):
        training_flops(70e9, 1.4e12, layers=80)
    with pytest.raises(FormulaError, match="params must be positive"):
        training_flops(0, 1e9)


def test_layers() -> None:
    assert linear_flops(768, 3072, rows=10) == 2 * 768 * 3072 * 10
    # ResNet stem: 7x7 conv 3->64 to 112x112: 2 · 112² · 64 · 3 · 49 = 236,027,904 FLOPs
    assert conv2d_flops(3, 64, 7, (112, 112)) == 236_027_904
    # depthwise 3x3 over 32 channels at 8x8, batch 2: 2 · 2 · 32 · 64 · 1 · 9
    assert conv2d_flops(32, 32, (3, 3), (8, 8), groups=32, batch=2) == 73_728
    with pytest.raises(FormulaError, match="groups=3"):
        conv2d_flops(32, 32, 3, (8, 8), groups=3)


GPT2 = {  # the shape fields of gpt2's config.json on the Hugging Face Hub
    "model_type": "gpt2",
    "activation_function": "gelu_new",
    "n_ctx": 1024,
    "n_embd": 768,
    "n_head": 12,
    "n_inner": None,
    "n_layer": 12,
    "n_positions": 1024,
    "vocab_size": 50257,
}

LLAMA2_7B = {  # meta-llama/Llama-2-7b-hf config.json
    "model_type": "llama",
    "hidden_act": "silu",
    "hidden_size": 4096,
    "intermediate_size": 11008,
    "max_position_embeddings": 4096,
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 32,
    "vocab_size": 32000,
}


def test_gpt2_config() -> None:
    s = shape_from_hf_config(GPT2)
    assert (s.layers, s.d_model, s.heads, s.context, s.vocab_size) == (12, 768, 12, 1024, 50257)
    # 12 · L · d² = 12 · 12 · 768² = 84,934,656 (GPT-2 small: 124M with embeddings and biases)
    assert s.params == 84_934_656
    assert s.params_rule.startswith("12·L·d²")
    assert s.d_attn == 768 and not s.gated_mlp


def test_llama_config_counts_the_gated_mlp() -> None:
    s = shape_from_hf_config(LLAMA2_7B)
    # per layer: attention 4 · 4096² = 67,108,864; MLP 3 · 4096 · 11008 = 135,266,304
    # 32 layers: 6,476,005,376 (6.74e9 with the two 131M embedding matrices and the norms)
    assert s.params == 32 * (67_108_864 + 135_266_304) == 6_476_005_376
    assert s.gated_mlp and s.kv_heads == 32


def test_grouped_query_attention_and_head_dim() -> None:
    cfg = {
        **LLAMA2_7B,
        "model_type": "mistral",
        "intermediate_size": 14336,
        "num_key_value_heads": 8,
        "num_hidden_layers": 32,
    }
    s = shape_from_hf_config(cfg)
    # Mistral 7B: Q, O 2 · 4096²; K, V 2 · 4096 · 8 · 128; MLP 3 · 4096 · 14336
    per_layer = 2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336
    assert s.params == 32 * per_layer  # 6,979,321,856: Mistral's 7.24e9 less embeddings, head
    gemma = {
        "model_type": "gemma",
        "hidden_size": 3072,
        "head_dim": 256,
        "num_attention_heads": 16,
        "num_key_value_heads": 16,
        "intermediate_size": 24576,
        "num_hidden_layers": 28,
        "max_position_embeddings": 8192,
        "hidden_act": "gelu_pytorch_tanh",
    }
    g = shape_from_hf_config(gemma)
    assert g.d_attn == 4096 != g.d_model  # 16 heads x 256 wider than the model
    assert g.params == 28 * (4 * 3072 * 4096 + 3 * 3072 * 24576)
    # an untyped config with a SwiGLU activation is taken as gated too
    assert shape_from_hf_config({**LLAMA2_7B, "model_type": "custom"}).gated_mlp


def test_a_multimodal_config_uses_its_text_config() -> None:
    s = shape_from_hf_config({"model_type": "llava", "text_config": LLAMA2_7B})
    assert s.params == 6_476_005_376


def test_configs_that_cannot_be_used() -> None:
    with pytest.raises(FormulaError, match="mixture-of-experts"):
        shape_from_hf_config({**LLAMA2_7B, "num_local_experts": 8})
    with pytest.raises(FormulaError, match="lacks n_head/num_attention_heads"):
        shape_from_hf_config({k: v for k, v in GPT2.items() if k != "n_head"})
    with pytest.raises(FormulaError, match="must be a positive integer"):
        shape_from_hf_config({**GPT2, "n_layer": "twelve"})
    with pytest.raises(FormulaError, match="not divisible by 7 heads"):
        shape_from_hf_config({**GPT2, "n_head": 7})


def test_reading_files(tmp_path: Path) -> None:
    good = tmp_path / "config.json"
    good.write_text(json.dumps(GPT2))
    assert read_hf_config(good).params == 84_934_656
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(FormulaError, match=r"bad.json is not valid JSON: .* line 1"):
        read_hf_config(bad)
    listed = tmp_path / "list.json"
    listed.write_text("[1, 2]")
    with pytest.raises(FormulaError, match="not a JSON object"):
        read_hf_config(listed)
    with pytest.raises(FormulaError, match=r"cannot read .*missing\.json"):
        read_hf_config(tmp_path / "missing.json")
    empty = tmp_path / "empty.json"
    empty.write_text("{}")
    with pytest.raises(FormulaError, match=r"empty\.json: the config lacks n_layer"):
        read_hf_config(empty)
