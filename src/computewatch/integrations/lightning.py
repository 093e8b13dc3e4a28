"""PyTorch Lightning: ``Trainer(callbacks=[ComputewatchCallback()])``.

Each training batch is one step, with its samples (the batch's first dimension, or a function
of the batch) and tokens (given a function). Lightning's hooks split the step into phases:
``data`` (from the end of the previous batch to the start of this one: fetching the batch and
moving it to the device), ``forward`` (start of the batch to ``on_before_backward``),
``backward`` (to ``on_after_backward``) and ``optimizer`` (``on_before_optimizer_step`` to the end
of the batch); a validation loop during fit is the ``validation`` phase. On a CUDA module the
compute phases also get their GPU time from CUDA events, resolved without a synchronize.

The callback records into the run it is given, else the current one (inside ``track()`` or
``computewatch run``), else it starts a run for the fit and closes it at the end.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

try:
    import pytorch_lightning as pl
except ImportError:  # the unified ``lightning`` package
    try:
        import lightning.pytorch as pl  # type: ignore[no-redef,import-not-found,unused-ignore]
    except ImportError as e:
        raise ImportError(
            "computewatch.integrations.lightning needs PyTorch Lightning: "
            "pip install 'computewatch[lightning]'"
        ) from e

from computewatch.integrations._common import RunHolder, positive_int, record_config
from computewatch.torch.cuda import EventLike, GpuTimer, _cuda_events
from computewatch.torch.loop import batch_size
from computewatch.tracking import Run, _mono

_Opened = tuple[float, EventLike | None]


class ComputewatchCallback(pl.Callback):
    """Records each training batch of a Lightning fit as a computewatch step, with phases."""

    def __init__(
        self,
        run: Run | None = None,
        *,
        name: str | None = None,
        tags: dict[str, str] | None = None,
        samples: Callable[[Any], float | None] | None = None,
        tokens: Callable[[Any], float | None] | None = None,
        phases: bool = True,
        gpu_timing: bool = True,
    ) -> None:
        """``run``: record into this run (default: the current one, else a new one named
        ``name``, default ``lightning``). ``samples``/``tokens``: functions of the batch
        (default samples: the batch's first dimension; tokens: not recorded). ``phases``:
        record data/forward/backward/optimizer phases. ``gpu_timing``: CUDA-event GPU time
        for the phases when the module is on a CUDA device."""
        super().__init__()
        self._holder = RunHolder(run, name, tags, None)
        self._samples = samples
        self._tokens = tokens
        self._phases = phases
        self._gpu_timing = gpu_timing
        self._timer: GpuTimer | None = None
        self._run: Run | None = None
        self._data_start: float | None = None
        self._forward: _Opened | None = None
        self._backward: _Opened | None = None
        self._optimizer: _Opened | None = None
        self._validation: float | None = None

    @property
    def run(self) -> Run | None:
        """The run being recorded into (None outside a fit)."""
        return self._run

    # -- the fit ------------------------------------------------------------------------

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        def planned() -> int | None:  # optimizer steps: batches only without accumulation
            if trainer.accumulate_grad_batches != 1:
                return None
            return positive_int(trainer.estimated_stepping_batches)

        run = self._holder.acquire("lightning", total_steps=planned)
        self._run = run
        record_config(run, lambda: {**dict(pl_module.hparams), **_trainer_config(trainer)})
        events = None
        if self._gpu_timing and getattr(pl_module.device, "type", None) == "cuda":
            events = _cuda_events()
        self._timer = GpuTimer(run, events=events)

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._finish("completed")

    def on_exception(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException
    ) -> None:
        failed = not isinstance(exception, KeyboardInterrupt)
        self._finish("failed" if failed else "interrupted")

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage == "fit":
            self._finish("completed")

    def _finish(self, status: str) -> None:
        if self._timer is not None:
            self._timer.close()
            self._timer = None
        if self._run is not None:
            self._holder.release(status)
            self._run = None
        self._data_start = None
        self._forward = self._backward = self._optimizer = None

    # -- each batch -----------------------------------------------------------------------

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._data_start = _mono()

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        timer = self._timer
        if timer is None or not self._phases:
            return
        if self._data_start is not None:
            timer.run.record_phase("data", self._data_start, _mono())
            self._data_start = None
        self._forward = timer.begin()

    def on_before_backward(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, loss: Any
    ) -> None:
        timer = self._timer
        if timer is None or not self._phases:
            return
        if self._forward is not None:
            timer.end("forward", self._forward)
            self._forward = None
        self._backward = timer.begin()

    def on_after_backward(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._timer is not None and self._backward is not None:
            self._timer.end("backward", self._backward)
            self._backward = None

    def on_before_optimizer_step(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer: Any
    ) -> None:
        if self._timer is not None and self._phases:
            self._optimizer = self._timer.begin()

    def on_train_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        run = self._run
        if run is None:
            return
        timer = self._timer
        if timer is not None:
            if self._optimizer is not None:
                timer.end("optimizer", self._optimizer)
                self._optimizer = None
            if self._forward is not None:  # no backward hook (manual optimization, eval-only)
                timer.end("forward", self._forward)
                self._forward = None
        samples = self._samples(batch) if self._samples is not None else batch_size(batch)
        tokens = self._tokens(batch) if self._tokens is not None else None
        run.step(samples, tokens)
        if self._phases:
            self._data_start = _mono()

    # -- validation during fit ------------------------------------------------------------

    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._run is not None and self._phases and not trainer.sanity_checking:
            self._validation = _mono()

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._run is not None and self._validation is not None:
            self._run.record_phase("validation", self._validation, _mono())
            self._validation = None
            if self._data_start is not None:  # the wait for data starts after validation
                self._data_start = _mono()


def _trainer_config(trainer: pl.Trainer) -> dict[str, Any]:
    """The Trainer's settings that change what a run computes."""
    out: dict[str, Any] = {}
    for key in ("max_epochs", "max_steps", "accumulate_grad_batches", "precision",
                "gradient_clip_val", "num_devices", "num_nodes"):  # fmt: skip
        v = getattr(trainer, key, None)
        if v is not None:
            out[f"trainer.{key}"] = v if isinstance(v, int | float | str | bool) else str(v)
    return out
