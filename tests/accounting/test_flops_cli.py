"""``computewatch flops`` as a user runs it: a real child process per call."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

GPT2 = {"model_type": "gpt2", "n_layer": 12, "n_embd": 768, "n_head": 12, "n_positions": 1024,
        "n_inner": None, "vocab_size": 50257}  # fmt: skip


def test_6nd_in_text(cw: Any) -> None:
    out = cw.ok("flops", "--params", "70B", "--tokens", "1.4T").stdout
    # 6 x 70e9 x 1.4e12 = 5.88e23 FLOP = 6,806 PF-days
    assert "5.880e+23 FLOP = 6,806 PF-days" in out
    assert "6ND" in out
    assert "not approached (5.9% of it)" in out  # of the EU AI Act's 1e25


def test_json_with_the_shape(cw: Any) -> None:
    r = cw.json("flops", "--params", "7e9", "--tokens", "2T", "--layers", "32",
                "--context", "4096", "--d-model", "4096", "--heads", "32")  # fmt: skip
    # 2e12 x (6 x 7e9 + 12 x 32 x 4096 x 4096) = 2e12 x 4.8442450944e10 = 9.6884901888e22
    assert r["flops"] == pytest.approx(9.6884901888e22)
    assert r["pf_days"] == pytest.approx(9.6884901888e22 / 8.64e19)
    assert r["method"] == "6ND + attention"
    assert "12·L·H·Q·T" in r["formula"] and "PaLM" in r["formula"]
    assert r["inputs"]["params"] == 7e9 and r["inputs"]["layers"] == 32
    assert [(t["flop"], t["crossed"]) for t in r["thresholds"]] == [(1e25, False), (1e26, False)]
    causal = cw.json("flops", "--params", "7e9", "--tokens", "2T", "--layers", "32",
                     "--context", "4096", "--d-model", "4096", "--causal")  # fmt: skip
    # the attention term halved: 2e12 x (4.2e10 + 6 x 32 x 4096²)
    assert causal["flops"] == pytest.approx(2e12 * (4.2e10 + 6 * 32 * 4096 * 4096))


def test_a_threshold_crossed_and_one_approached(cw: Any) -> None:
    # 6 x 1e12 x 3e12 = 1.8e25: past 1e25 (1.8x), 18% of 1e26
    r = cw.json("flops", "--params", "1T", "--tokens", "3T")
    eu, ca = r["thresholds"]
    assert (eu["crossed"], ca["crossed"], ca["approached"]) == (True, False, True)
    text = cw.ok("flops", "--params", "1T", "--tokens", "3T").stdout
    assert "crossed (1.8×)" in text and "approached (18.0% of it)" in text


def test_config_json(cw: Any, tmp_path: Path) -> None:
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(GPT2))
    r = cw.json("flops", "--config", str(cfg), "--tokens", "10B")
    # N = 12 x 12 x 768² = 84,934,656; per token 6N + 12 x 12 x 768 x 1024 = 622,854,144
    assert r["inputs"]["params"] == 84_934_656
    assert r["flops"] == pytest.approx(1e10 * (6 * 84_934_656 + 12 * 12 * 768 * 1024))
    assert r["inputs"]["context"] == 1024 and r["inputs"]["config"] == str(cfg)
    assert any("embeddings" in a for a in r["assumptions"])
    # flags win over the config
    r2 = cw.json("flops", "--config", str(cfg), "--tokens", "10B", "--params", "1e8",
                 "--context", "256")  # fmt: skip
    assert r2["flops"] == pytest.approx(1e10 * (6e8 + 12 * 12 * 768 * 256))


def _one_line_error(r: Any, code: int, needle: str) -> None:
    assert r.returncode == code, r.stderr
    assert needle in r.stderr
    assert "Traceback" not in r.stderr
    lines = [x for x in r.stderr.splitlines() if not x.startswith(("usage:", " "))]
    assert len(lines) == 1, r.stderr


def test_errors(cw: Any, tmp_path: Path) -> None:
    _one_line_error(cw("flops", "--params", "7B"), 2, "required: --tokens")
    _one_line_error(cw("flops", "--params", "7Q", "--tokens", "1T"), 2, "not a count: '7Q'")
    _one_line_error(cw("flops", "--params", "-1", "--tokens", "1T"), 2, "--params")
    _one_line_error(cw("flops", "--tokens", "1T"), 2, "give --params N")
    _one_line_error(
        cw("flops", "--params", "7B", "--tokens", "1T", "--layers", "32"), 2, "all of --layers"
    )
    _one_line_error(
        cw("flops", "--params", "7B", "--tokens", "1T", "--layers", "2", "--context", "8",
           "--d-model", "100", "--heads", "3"), 2, "not divisible by --heads 3",
    )  # fmt: skip
    _one_line_error(
        cw("flops", "--config", str(tmp_path / "nope.json"), "--tokens", "1T"), 1, "cannot read"
    )
    bad = tmp_path / "bad.json"
    bad.write_text("{oops")
    _one_line_error(cw("flops", "--config", str(bad), "--tokens", "1T"), 1, "not valid JSON")
    partial = tmp_path / "partial.json"
    partial.write_text(json.dumps({"n_layer": 2, "n_embd": 64}))
    _one_line_error(
        cw("flops", "--config", str(partial), "--tokens", "1T"),
        1,
        "lacks n_head/num_attention_heads, n_positions/max_position_embeddings",
    )
