"""Hugging Face Transformers: ``Trainer(..., callbacks=[ComputewatchCallback()])``.

Each optimizer step of the ``Trainer`` (all the micro-batches of one gradient accumulation) is
one computewatch step, with:

- samples: ``per_device_train_batch_size × gradient_accumulation_steps`` (the nominal count: a
  short last batch of an epoch is counted full, as the Trainer's own speed metrics do);
- tokens: the step's increase of ``state.num_input_tokens_seen``, when the Trainer counts them
  (``include_num_input_tokens_seen``), divided by the number of processes (the Trainer gathers
  the count from every process);
- FLOPs: the Trainer's own count, ``state.total_flos``, which is 6 × (parameters without the
  embeddings) × input tokens for a ``PreTrainedModel`` (the 6·N·D rule, without the attention
  term). The Trainer adds to ``total_flos`` only when it logs, so with tokens counted each step
  gets 6·N·tokens (the same figure, per step); without them the increase of ``total_flos`` is
  given to the step at which it appears (set ``logging_steps=1`` for per-step figures);
- phases: ``data`` (from the end of one step to the start of the next: the Trainer fetches the
  step's batches then, and logs, saves or evaluates), ``forward_backward`` (start of the step to
  ``on_pre_optimizer_step``: every micro-batch's forward and backward, and gradient clipping) and
  ``optimizer`` (``on_pre_optimizer_step`` to ``on_optimizer_step``).

The callback records into the run it is given, else the current one, else it starts a run for
the training and closes it at the end.
"""

from __future__ import annotations

from typing import Any

try:
    from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments
except ImportError as e:
    raise ImportError(
        "computewatch.integrations.huggingface needs Transformers: "
        "pip install 'computewatch[huggingface]'"
    ) from e

from computewatch.integrations._common import RunHolder, positive_int, record_config
from computewatch.tracking import Run, _mono


class ComputewatchCallback(TrainerCallback):
    """Records each optimizer step of a Transformers ``Trainer`` as a computewatch step."""

    def __init__(
        self,
        run: Run | None = None,
        *,
        name: str | None = None,
        tags: dict[str, str] | None = None,
        phases: bool = True,
        flops: bool = True,
    ) -> None:
        """``run``: record into this run (default: the current one, else a new one named
        ``name``, default ``huggingface``). ``phases``: record data/forward_backward/optimizer
        phases. ``flops``: record the Trainer's FLOP count as the steps' counted FLOPs."""
        self._holder = RunHolder(run, name, tags, None)
        self._phases = phases
        self._flops = flops
        self._run: Run | None = None
        self._data_start: float | None = None
        self._step_start: float | None = None
        self._opt_start: float | None = None
        self._tokens_seen = 0.0
        self._total_flos = 0.0
        self._flops_per_token: float | None = None
        self._world = 1

    @property
    def run(self) -> Run | None:
        """The run being recorded into (None outside training)."""
        return self._run

    def on_train_begin(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        model: Any = None,
        **kwargs: Any,
    ) -> None:
        self._run = self._holder.acquire(
            "huggingface", total_steps=lambda: positive_int(state.max_steps)
        )
        record_config(self._run, args.to_dict)  # TrainingArguments: the run's hyperparameters
        self._world = max(1, int(getattr(args, "world_size", 1) or 1))
        self._tokens_seen = float(state.num_input_tokens_seen or 0)
        self._total_flos = float(state.total_flos or 0)
        self._flops_per_token = None
        counting = getattr(args, "include_num_input_tokens_seen", "no")
        if self._flops and counting not in ("no", False, None) and model is not None:
            # The Trainer's floating_point_ops: 6 × tokens × parameters without embeddings.
            num_parameters = getattr(model, "num_parameters", None)
            if callable(num_parameters):
                try:
                    self._flops_per_token = 6.0 * float(num_parameters(exclude_embeddings=True))
                except (TypeError, ValueError):
                    self._flops_per_token = None
        self._data_start = _mono()

    def on_step_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        if self._run is None:
            return
        now = _mono()
        if self._phases and self._data_start is not None:
            self._run.record_phase("data", self._data_start, now)
        self._step_start = now

    def on_pre_optimizer_step(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        if self._run is None:
            return
        now = _mono()
        if self._phases and self._step_start is not None:
            self._run.record_phase("forward_backward", self._step_start, now)
        self._opt_start = now

    def on_optimizer_step(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        if self._run is not None and self._phases and self._opt_start is not None:
            self._run.record_phase("optimizer", self._opt_start, _mono())
            self._opt_start = None

    def on_step_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        run = self._run
        if run is None:
            return
        samples = float(args.per_device_train_batch_size * args.gradient_accumulation_steps)
        tokens: float | None = None
        seen = float(state.num_input_tokens_seen or 0)
        if seen > self._tokens_seen:
            tokens = (seen - self._tokens_seen) / self._world
            self._tokens_seen = seen
        flops: float | None = None
        if self._flops:
            if self._flops_per_token is not None and tokens is not None:
                flops = self._flops_per_token * tokens
            else:
                total = float(state.total_flos or 0)
                if total > self._total_flos:
                    flops = (total - self._total_flos) / self._world
                    self._total_flos = total
        run.step(samples, tokens, flops)
        self._step_start = None
        self._data_start = _mono()

    def on_train_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        self._holder.release("completed")
        self._run = None
        self._data_start = self._step_start = self._opt_start = None
