"""Keras 3: ``model.fit(..., callbacks=[ComputewatchCallback(batch_size=32)])``.

Each training batch (each ``train_function`` call: ``steps_per_execution`` batches) is one step.
Keras 3 does not tell callbacks the batch size, so samples come from the ``batch_size`` given
here (times the batches in the call); with ``num_samples`` (the training set's size) too, the
short last batch of each epoch is counted exactly. Phases: ``data`` (from the end of one batch to
the start of the next: Keras fetching and converting the batch) and ``train_step`` (the batch's
forward, backward and optimizer update, which Keras runs as one function).

The callback records into the run it is given, else the current one, else it starts a run for
the fit and closes it at the end. Any Keras backend works; on PyTorch set ``KERAS_BACKEND=torch``.
"""

from __future__ import annotations

from typing import Any

try:
    import keras  # type: ignore[import-untyped,unused-ignore]
except ImportError as e:
    raise ImportError(
        "computewatch.integrations.keras needs Keras 3: pip install 'computewatch[keras]'"
    ) from e

from computewatch.integrations._common import RunHolder, positive_int, record_config
from computewatch.tracking import Run, _mono


class ComputewatchCallback(keras.callbacks.Callback):  # type: ignore[misc]
    """Records each training batch of a Keras fit as a computewatch step, with phases."""

    def __init__(
        self,
        run: Run | None = None,
        *,
        batch_size: int | None = None,
        num_samples: int | None = None,
        tokens_per_sample: float | None = None,
        name: str | None = None,
        tags: dict[str, str] | None = None,
        phases: bool = True,
    ) -> None:
        """``batch_size``: the ``batch_size`` given to ``fit`` (Keras's default is 32 for
        arrays; for a dataset, its batch size); None: samples are not recorded.
        ``num_samples``: the training set's size, to count each epoch's short last batch.
        ``tokens_per_sample``: tokens per sample (a sequence model's length), for token
        counts. ``run``/``name``: as for the other integrations (default name ``keras``)."""
        super().__init__()
        for label, v in (("batch_size", batch_size), ("num_samples", num_samples)):
            if v is not None and v < 1:
                raise ValueError(f"{label} must be at least 1, not {v}")
        self._holder = RunHolder(run, name, tags, None)
        self._batch_size = batch_size
        self._num_samples = num_samples
        self._tokens_per_sample = tokens_per_sample
        self._phases = phases
        self._run: Run | None = None
        self._data_start: float | None = None
        self._batch_start: float | None = None
        self._begin_index = 0

    @property
    def run(self) -> Run | None:
        """The run being recorded into (None outside a fit)."""
        return self._run

    def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
        def planned() -> int | None:
            steps, epochs = self.params.get("steps"), self.params.get("epochs")
            both = positive_int(steps) is not None and positive_int(epochs) is not None
            return positive_int(int(steps) * int(epochs)) if both else None

        self._run = self._holder.acquire("keras", total_steps=planned)
        record_config(self._run, self._hyperparameters)

    def _hyperparameters(self) -> dict[str, Any]:
        """``fit``'s parameters (epochs, steps) and the optimizer's configuration."""
        out: dict[str, Any] = dict(self.params or {})
        optimizer = getattr(self.model, "optimizer", None)
        if optimizer is not None:
            out["optimizer"] = {**optimizer.get_config(), "class": type(optimizer).__name__}
        return out

    def on_train_end(self, logs: dict[str, Any] | None = None) -> None:
        self._holder.release("completed")
        self._run = None

    def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        self._data_start = _mono()

    def on_train_batch_begin(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        if self._run is None:
            return
        now = _mono()
        if self._phases and self._data_start is not None:
            self._run.record_phase("data", self._data_start, now)
        self._batch_start = now
        self._begin_index = batch

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        run = self._run
        if run is None:
            return
        now = _mono()
        if self._phases and self._batch_start is not None:
            run.record_phase("train_step", self._batch_start, now)
        samples = self._samples(self._begin_index, batch)
        tokens = (
            samples * self._tokens_per_sample
            if samples is not None and self._tokens_per_sample is not None
            else None
        )
        run.step(samples, tokens)
        self._batch_start = None
        self._data_start = _mono()

    def _samples(self, first: int, last: int) -> float | None:
        """Samples in batches ``first``..``last`` of the epoch (Keras's indices)."""
        if self._batch_size is None:
            return None
        last = max(last, first)
        n = (last - first + 1) * self._batch_size
        steps = positive_int(self.params.get("steps"))
        if self._num_samples is not None and steps is not None and last == steps - 1:
            n -= steps * self._batch_size - self._num_samples  # the epoch's short last batch
        return float(max(n, 0))
