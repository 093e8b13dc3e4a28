"""The one-line PyTorch training loop: ``for batch in computewatch.torch.steps(run, loader):``.

Each ``next()`` on the loader is timed as the ``data`` phase; when the loop body comes back for
the next batch (or the loader is exhausted) the step is closed with the batch's samples (its
first dimension) and, given a function, its tokens. The hot path is a few appends to the run's
buffer, like ``run.step()`` itself.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Generic, TypeVar

from computewatch.sampling.channel import PHASE, STEP
from computewatch.tracking import Run, _mono, current_run

T = TypeVar("T")
_POLL_SECONDS = 2.0  # how often the loop looks for a profiler request (one stat(2))

Count = Callable[[Any], float | None] | float | None
"""How to count a batch: a function of the batch, a constant, or None."""


def batch_size(batch: object) -> int | None:
    """The number of samples in ``batch``: the first dimension of the first array-like found
    in it (a tensor or array, else the first item of a tuple/list or the first value of a
    dict, searched in order). None when nothing in it has a shape."""
    shape = getattr(batch, "shape", None)
    if shape is not None:
        return int(shape[0]) if len(shape) else None
    if isinstance(batch, Mapping):
        items: Iterable[object] = batch.values()
    elif isinstance(batch, tuple | list):
        items = batch
    else:
        return None
    for item in items:
        n = batch_size(item)
        if n is not None:
            return n
    return None


class Steps(Generic[T]):
    """Iterate over a loader as training steps (see :func:`steps`); ``len()`` is the loader's,
    so progress bars keep working."""

    def __init__(
        self,
        run: Run | None,
        loader: Iterable[T],
        samples: Count = None,
        tokens: Count = None,
        name: str = "data",
    ) -> None:
        self.run = run
        self.loader = loader
        self.samples = samples
        self.tokens = tokens
        self.name = name

    def __len__(self) -> int:
        return len(self.loader)  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[T]:
        run = self.run if self.run is not None else current_run()
        if run is None:  # nothing to record into: the loader as it is
            return iter(self.loader)
        return _iterate(run, self.loader, self.samples, self.tokens, self.name)


def steps(
    run: Run | None,
    loader: Iterable[T],
    *,
    samples: Count = None,
    tokens: Count = None,
    name: str = "data",
) -> Steps[T]:
    """``for batch in steps(run, loader, tokens=lambda b: b["input_ids"].numel()):``

    Times each ``next()`` on ``loader`` as the ``name`` phase (``data``: the time the loop
    waited for input) and closes one step of ``run`` each time the loop body comes back for
    the next batch, and at the end. ``samples``: a function of the batch, a constant, or None
    for the batch's first dimension (:func:`batch_size`); ``tokens``: a function of the batch
    or a constant (default: not recorded). ``run`` None: the current run, if any, at the time
    the loop starts (without one the loader is iterated unchanged).

    A loop left with ``break`` or an exception does not close the step in progress (its batch
    may not have been used); call ``run.step()`` after the loop if it counts."""
    return Steps(run, loader, samples, tokens, name)


def _iterate(
    run: Run, loader: Iterable[T], samples: Count, tokens: Count, name: str
) -> Iterator[T]:
    """The loop itself: per batch, two clock reads, one phase append and one step append."""
    it = iter(loader)
    app = run._append
    nid = run._writer.name_id(name)
    mono = _mono
    infer = samples is None
    count_samples = samples if callable(samples) else None
    count_tokens = tokens if callable(tokens) else None
    n_samples: float | None = None if callable(samples) else samples
    n_tokens: float | None = None if callable(tokens) else tokens
    t0 = mono()
    poll_at = t0 + _POLL_SECONDS
    try:
        item = next(it)
    except StopIteration:
        return
    while True:
        t1 = mono()
        app((PHASE, nid, t0, t1, None, None, None))
        # Count before handing the batch over: the body may consume or move it.
        if infer:
            n_samples = batch_size(item)
        elif count_samples is not None:
            n_samples = count_samples(item)
        if count_tokens is not None:
            n_tokens = count_tokens(item)
        yield item
        t0 = mono()  # the body is done: the step ends, the next data wait begins
        rule = run._flops_rule
        if rule is None:
            app((t0, n_samples, n_tokens))
        else:
            app((STEP, 0, t0, n_samples, n_tokens, rule(n_tokens), None))
        win = run._window  # the PyTorch Profiler around some steps (run.profile, anomalies)
        if win is not None and win.step_ended():
            run._window = None
        if t0 >= poll_at:  # has the monitor asked for a profiler window?
            poll_at = t0 + _POLL_SECONDS
            run._poll_profile_request()
        try:
            item = next(it)
        except StopIteration:
            return
