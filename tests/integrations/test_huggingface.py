"""The Hugging Face Transformers callback, on a real ``Trainer`` run of a tiny GPT-2 on CPU."""

from __future__ import annotations

import json
import sys

import pytest

pytest.importorskip("transformers")
pytest.importorskip("accelerate")

pytestmark = pytest.mark.slow

SCRIPT = """
import json, sys
import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments
from computewatch.integrations.huggingface import ComputewatchCallback

COUNT_TOKENS = sys.argv[1] == "tokens"
torch.manual_seed(0)
model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=64, n_positions=16))


class Data(torch.utils.data.Dataset):
    def __len__(self):
        return 20  # 5 steps of 4 sequences per epoch

    def __getitem__(self, i):
        ids = torch.randint(0, 64, (8,))
        return {"input_ids": ids, "labels": ids}


args = TrainingArguments(
    output_dir="out", per_device_train_batch_size=2, gradient_accumulation_steps=2,
    num_train_epochs=2, logging_steps=3, save_strategy="no", report_to=[], use_cpu=True,
    include_num_input_tokens_seen=COUNT_TOKENS, disable_tqdm=True,
)
trainer = Trainer(model=model, args=args, train_dataset=Data(),
                  callbacks=[ComputewatchCallback(name="hf-tiny")])
trainer.train()
with open(sys.argv[2], "w") as f:
    json.dump({"total_flos": trainer.state.total_flos,
               "tokens": trainer.state.num_input_tokens_seen}, f)
"""


@pytest.mark.parametrize("count_tokens", [True, False])
def test_each_optimizer_step_is_a_step_with_tokens_and_flops(
    cw, make_script, stored, tmp_path, count_tokens
) -> None:
    script = make_script("train.py", SCRIPT)
    out = tmp_path / "state.json"
    mode = "tokens" if count_tokens else "plain"
    cw.ok("run", "--quiet", "--", sys.executable, script, mode, out)
    state = json.loads(out.read_text())
    got = stored()
    assert got.run.name == "hf-tiny"
    assert len(got.steps) == 10  # 2 epochs × 5 optimizer steps (2 micro-batches each)
    assert [s.samples for s in got.steps] == [4] * 10
    flops = [s.flops for s in got.steps]
    if count_tokens:
        assert state["tokens"] == 320
        assert [s.tokens for s in got.steps] == [32] * 10  # 4 sequences × 8 tokens
        assert all(f is not None and f > 0 for f in flops)
        assert flops[0] == flops[-1]  # the same tokens, the same 6·N·tokens
    else:
        assert all(s.tokens is None for s in got.steps)
        # total_flos grows when the Trainer logs (every 3 steps): the FLOPs land there.
        with_flops = [i for i, f in enumerate(flops) if f is not None]
        assert with_flops == [3, 6, 9]
    recorded = sum(f for f in flops if f is not None)
    # Without tokens, the last steps' FLOPs reach total_flos only after the last step ends.
    assert recorded == pytest.approx(state["total_flos"] * (1 if count_tokens else 9 / 10))
    assert got.phase_names() == {"data": 10, "forward_backward": 10, "optimizer": 10}
    for i in range(10):
        assert [p.name for p in got.phases_of_step(i)] == ["data", "forward_backward", "optimizer"]
    s = cw.show()
    if count_tokens:
        assert s["flops"]["method"] == "counted"
        assert s["flops"]["value"] == pytest.approx(state["total_flos"])
