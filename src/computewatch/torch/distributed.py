"""Time spent in collective communication, recorded as the ``comm`` phase of each step.

Two ways in, usable together:

- :func:`watch_collectives` wraps the ``torch.distributed`` collective and point-to-point
  functions (``all_reduce``, ``all_gather``, ``reduce_scatter``, ``broadcast``, ``barrier``, ...).
  A synchronous call is timed from call to return; an asynchronous one (``async_op=True``,
  ``isend``/``irecv``) from the call until its work completes, through the work's future
  (``work.get_future()``), so the host never waits for it.
- :func:`watch_ddp` registers a DistributedDataParallel communication hook that wraps the
  default gradient all-reduce (or a hook of yours) and times each bucket from the moment the
  hook is called until its future completes.

Each interval becomes a ``comm`` phase of the run (``Run.record_phase``, safe from the threads
that complete futures). The summary's ``ranks`` section subtracts it from each rank's step time
to get compute time. With NCCL, the futures of ``ProcessGroupNCCL`` complete once the work is
enqueued on the GPU stream, so host timing measures the launch, not the transfer.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable, Iterable
from typing import Any

from computewatch.tracking import Run, _mono, current_run

COMM_PHASE = "comm"
COLLECTIVES = (
    "all_reduce", "all_reduce_coalesced", "all_gather", "all_gather_into_tensor",
    "all_gather_object", "reduce_scatter", "reduce_scatter_tensor", "reduce", "broadcast",
    "broadcast_object_list", "barrier", "monitored_barrier", "all_to_all", "all_to_all_single",
    "gather", "gather_object", "scatter", "scatter_object_list", "send", "recv", "isend",
    "irecv", "batch_isend_irecv",
)  # fmt: skip
"""The ``torch.distributed`` functions :func:`watch_collectives` times (those that exist)."""

_MARK = "__computewatch_original__"


def _run_or_current(run: Run | None) -> Run:
    found = run if run is not None else current_run()
    if found is None:
        raise RuntimeError(
            "no active computewatch run: pass one, or call inside computewatch.track()"
        )
    return found


class CollectiveWatch:
    """The wrapped ``torch.distributed`` functions of one :func:`watch_collectives` call;
    :meth:`unwatch` (or leaving its ``with`` block) puts the originals back."""

    def __init__(self, run: Run, name: str, module: types.ModuleType, names: Iterable[str]):
        self.run = run
        self.name = name
        self.module = module
        self.calls = 0
        self.errors = 0
        self._originals: dict[str, Callable[..., Any]] = {}
        present = [n for n in names if callable(getattr(module, n, None))]
        already = [n for n in present if hasattr(getattr(module, n), _MARK)]
        if already:
            raise RuntimeError(
                f"torch.distributed.{already[0]} is already watched: unwatch the other first"
            )
        for n in present:
            original = getattr(module, n)
            self._originals[n] = original
            setattr(module, n, self._wrap(original))

    @property
    def functions(self) -> list[str]:
        """The names of the functions this watch wrapped."""
        return sorted(self._originals)

    def _record(self, start: float, end: float) -> None:
        try:
            self.run.record_phase(self.name, start, end)
            self.calls += 1
        except Exception:  # the monitor never takes the job down
            self.errors += 1

    def _wrap(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        record = self._record
        on_done = self._on_done

        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = _mono()
            result = fn(*args, **kwargs)
            works = result if isinstance(result, list) else [result]
            pending = [w for w in works if hasattr(w, "wait")]
            if pending:
                for w in pending:
                    on_done(w, t0)
            else:
                record(t0, _mono())
            return result

        setattr(timed, _MARK, fn)
        return timed

    def _on_done(self, work: Any, start: float) -> None:
        """Record an asynchronous operation when its work completes (its future's callback);
        a backend whose works have no future is timed to the call's return."""
        try:
            fut = work.get_future()
            fut.add_done_callback(lambda _f: self._record(start, _mono()))
        except Exception:
            self._record(start, _mono())

    def unwatch(self) -> None:
        """Put the original functions back (those still wrapped by this watch). Idempotent."""
        for n, original in self._originals.items():
            if getattr(getattr(self.module, n, None), _MARK, None) is original:
                setattr(self.module, n, original)
        self._originals.clear()

    def __enter__(self) -> CollectiveWatch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.unwatch()


def watch_collectives(
    run: Run | None = None,
    *,
    name: str = COMM_PHASE,
    functions: Iterable[str] = COLLECTIVES,
    module: types.ModuleType | None = None,
) -> CollectiveWatch:
    """Time every call of the ``torch.distributed`` collectives as the ``name`` phase of
    ``run`` (the current run by default). ``module``: the namespace whose functions are
    wrapped (``torch.distributed``). Returns the watch; ``unwatch()`` restores them."""
    if module is None:  # PyTorch is the user's (optional) dependency, loaded on use
        import torch.distributed as dist

        module = dist
    return CollectiveWatch(_run_or_current(run), name, module, functions)


class DdpWatch:
    """A DDP communication hook that times gradient buckets; :meth:`unwatch` stops the
    recording (DDP cannot take a hook back, so the wrapped hook itself stays in place)."""

    def __init__(self, run: Run, name: str, hook: Callable[[Any, Any], Any]) -> None:
        self.run = run
        self.name = name
        self.buckets = 0
        self.errors = 0
        self.active = True
        self._hook = hook

    def _record(self, start: float, end: float) -> None:
        if not self.active:
            return
        try:
            self.run.record_phase(self.name, start, end)
            self.buckets += 1
        except Exception:  # the monitor never takes the job down
            self.errors += 1

    def hook(self, state: Any, bucket: Any) -> Any:
        """The hook DDP calls once a gradient bucket is ready: the wrapped hook's future,
        timed until it completes."""
        t0 = _mono()
        fut = self._hook(state, bucket)
        if self.active:
            try:
                fut.add_done_callback(lambda _f: self._record(t0, _mono()))
            except Exception:
                self.errors += 1
        return fut

    def unwatch(self) -> None:
        """Stop recording bucket times."""
        self.active = False


def watch_ddp(
    model: Any,
    run: Run | None = None,
    *,
    hook: Callable[[Any, Any], Any] | None = None,
    state: Any = None,
    name: str = COMM_PHASE,
) -> DdpWatch:
    """Register on ``model`` (a ``DistributedDataParallel``) a communication hook timing each
    gradient bucket's all-reduce as the ``name`` phase of ``run``. ``hook``/``state``: your own
    hook to wrap instead of the default all-reduce (``allreduce_hook`` on the model's process
    group). DDP takes one hook per model, registered before training starts."""
    if hook is None:  # PyTorch is the user's (optional) dependency, loaded on use
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

        hook, state = allreduce_hook, getattr(model, "process_group", None)
    watch = DdpWatch(_run_or_current(run), name, hook)
    # DDP checks the hook's annotations against its own types (postponed annotations are
    # strings to it); a lambda carries none.
    model.register_comm_hook(state, lambda state, bucket: watch.hook(state, bucket))  # noqa: PLW0108
    return watch
