"""Hugging Face Transformers with computewatch: one ``TrainerCallback`` (a tiny GPT-2 built
from a config, so nothing is downloaded).

    computewatch run -- python examples/train_huggingface.py
"""

from __future__ import annotations

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

from computewatch.integrations.huggingface import ComputewatchCallback


class RandomTokens(torch.utils.data.Dataset[dict[str, torch.Tensor]]):
    def __len__(self) -> int:
        return 256

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        ids = torch.randint(0, 128, (32,))
        return {"input_ids": ids, "labels": ids}


def main() -> None:
    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_head=2, n_embd=64, vocab_size=128, n_positions=32)
    args = TrainingArguments(
        output_dir="hf-example-out", per_device_train_batch_size=8, num_train_epochs=2,
        save_strategy="no", report_to=[], include_num_input_tokens_seen=True,
    )  # fmt: skip
    trainer = Trainer(
        model=GPT2LMHeadModel(config),
        args=args,
        train_dataset=RandomTokens(),
        callbacks=[ComputewatchCallback(name="huggingface-example")],
    )
    trainer.train()


if __name__ == "__main__":
    main()
