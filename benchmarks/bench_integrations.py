"""Integrations: the cost of phase()/step()/data()/request() and the loop helper per call, and
the overhead of the integrations on a real (small, CPU) PyTorch training loop.

(a) ns per call in user code, on a run attached to a spool (as under ``computewatch run``): many
calls per repeat, the median of the repeats. (b) a tiny MLP trained for a few hundred steps:
a bare loop against the same loop with ``computewatch.torch.steps`` and forward/backward/
optimizer phases, and a Lightning fit without and with ``ComputewatchCallback``; the variants
alternate, each timed at least five times, and the medians are compared (target: ≤ 1 %).

    python benchmarks/bench_integrations.py [--quick]
"""

from __future__ import annotations

import logging
import os
import statistics
import tempfile
import time
import timeit
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common import Section, cli_main, median, spread

from computewatch.sampling.channel import ENV_RUN_ID, ENV_SPOOL

TARGET_NS = 2000.0
TARGET_OVERHEAD = 0.01
BATCH = 128


def _per_call_ns(stmt: str, ns: dict[str, Any], number: int, repeat: int) -> float:
    """Median over ``repeat`` repeats of ``number`` calls, in ns per call."""
    t = timeit.Timer(stmt, globals=ns)
    return statistics.median(t.repeat(repeat=repeat, number=number)) / number * 1e9


def _per_item_ns(fn: Callable[[int], None], items: int, repeat: int) -> float:
    """Median ns per item of ``fn(items)`` (a loop over ``items`` items)."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn(items)
        times.append(time.perf_counter() - t0)
    return statistics.median(times) / items * 1e9


def _call_costs(run: Any, quick: bool) -> tuple[list[list[object]], dict[str, float]]:
    import computewatch.torch as cwt

    number, repeat = (20_000, 7) if quick else (50_000, 21)
    ph = run.phase("forward")
    ns: dict[str, Any] = {"run": run, "ph": ph, "lst": []}
    cases = [
        ("`with run.phase(...)` (enter + exit, cached)", "with ph: pass"),
        ("`with run.phase(\"forward\")` (lookup, enter, exit)", 'with run.phase("forward"): pass'),
        ("`run.step()`", "run.step()"),
        ("`run.step(samples=32, tokens=4096)`", "run.step(samples=32, tokens=4096)"),
        ("`with run.request() as r: r.tokens_out = 8`", "with run.request() as r: r.tokens_out=8"),
        ("bare `list.append((1.0, None, None))`", "lst.append((1.0, None, None)); lst.clear()"),
    ]  # fmt: skip
    out: dict[str, float] = {}
    rows: list[list[object]] = []
    for label, stmt in cases:
        t = _per_call_ns(stmt, ns, number, repeat)
        out[label] = t
        rows.append([label, t])
    batch = [0.0] * number

    def bare(n: int) -> None:
        for _ in batch:
            pass

    def data(n: int) -> None:
        for _ in run.data(batch):
            pass

    def loop(n: int) -> None:
        for _ in cwt.steps(run, batch, samples=32):
            pass

    def loop_infer(n: int) -> None:
        for _ in cwt.steps(run, tensors):
            pass

    import torch

    tensors = [torch.zeros(32, 4)] * number
    base = _per_item_ns(bare, number, repeat)
    for label, fn in (
        ("`run.data(loader)` per item (data phase)", data),
        ("`computewatch.torch.steps(run, loader, samples=32)` per batch", loop),
        ("`computewatch.torch.steps(run, loader)` per batch (samples from the tensor)", loop_infer),
    ):
        t = _per_item_ns(fn, number, repeat) - base
        out[label] = t
        rows.append([label, t])
    lightning_hooks = _lightning_hooks_ns(run, number // 10, repeat)
    if lightning_hooks is not None:
        label = "`ComputewatchCallback` (Lightning) hooks of one batch, called directly"
        out[label] = lightning_hooks
        rows.append([label, lightning_hooks])
    return rows, out


def _lightning_hooks_ns(run: Any, batches: int, repeat: int) -> float | None:
    """ns per batch of the Lightning callback's own hooks (without Lightning's dispatch)."""
    try:
        from computewatch.integrations.lightning import ComputewatchCallback
    except ImportError:
        return None
    import torch

    class Trainer:
        sanity_checking = False

    class Module:
        device = torch.device("cpu")

    cb = ComputewatchCallback(run)
    t, m = Trainer(), Module()
    cb._run = run  # as on_fit_start sets it, without a real Trainer
    from computewatch.torch.cuda import GpuTimer

    cb._timer = GpuTimer(run, events=None)
    cb.on_train_epoch_start(t, m)  # type: ignore[arg-type]
    batch = (torch.zeros(64, 8), torch.zeros(64))

    def hooks(n: int) -> None:
        for i in range(n):
            cb.on_train_batch_start(t, m, batch, i)  # type: ignore[arg-type]
            cb.on_before_backward(t, m, None)  # type: ignore[arg-type]
            cb.on_after_backward(t, m)  # type: ignore[arg-type]
            cb.on_before_optimizer_step(t, m, None)  # type: ignore[arg-type]
            cb.on_train_batch_end(t, m, None, batch, i)  # type: ignore[arg-type]

    return _per_item_ns(hooks, batches, repeat)


# -- a real training loop -------------------------------------------------------------------


def _training(quick: bool) -> tuple[list[list[object]], dict[str, float], dict[str, list[float]]]:
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    import computewatch
    import computewatch.torch as cwt

    torch.set_num_threads(1)  # stable timings on a shared machine
    steps = 100 if quick else 250
    rounds = 5 if quick else 15
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(steps * BATCH, 256), torch.randint(0, 10, (steps * BATCH,)))

    def model() -> nn.Module:
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 10))

    def bare() -> None:
        m = model()
        opt = torch.optim.SGD(m.parameters(), lr=0.01)
        for x, y in DataLoader(data, batch_size=BATCH):
            loss = nn.functional.cross_entropy(m(x), y)
            loss.backward()  # type: ignore[no-untyped-call]
            opt.step()
            opt.zero_grad()

    def helper() -> None:
        m = model()
        opt = torch.optim.SGD(m.parameters(), lr=0.01)
        run = computewatch.current_run()
        assert run is not None
        fwd, bwd, step = run.phase("forward"), run.phase("backward"), run.phase("optimizer")
        for x, y in cwt.steps(run, DataLoader(data, batch_size=BATCH)):
            with fwd:
                loss = nn.functional.cross_entropy(m(x), y)
            with bwd:
                loss.backward()  # type: ignore[no-untyped-call]
            with step:
                opt.step()
                opt.zero_grad()

    variants: dict[str, Callable[[], None]] = {"bare loop": bare, "steps() + 3 phases": helper}
    lightning = _lightning_variants(data, model)
    variants.update(lightning)
    times: dict[str, list[float]] = {k: [] for k in variants}
    for fn in variants.values():  # warm-up: imports, allocator, Lightning's first setup
        fn()
    for _ in range(rounds):
        for name, fn in variants.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    med = {k: median(v) for k, v in times.items()}
    pairs = {"steps() + 3 phases": "bare loop"}
    if lightning:
        pairs["Lightning + a callback with the same hooks, empty"] = "Lightning"
        pairs["Lightning + ComputewatchCallback"] = "Lightning"
    rows: list[list[object]] = []
    overhead: dict[str, float] = {}
    for name, t in med.items():
        base = pairs.get(name)
        # Paired: each round's variant against its base run just before it, so that a drift
        # of the machine's speed over the benchmark cancels out; the median of those ratios.
        ratio = (
            median([a / b - 1 for a, b in zip(times[name], times[base], strict=True)])
            if base
            else None
        )
        if base is not None and ratio is not None:
            overhead[name] = ratio
        rows.append(
            [
                name,
                t / steps * 1e3,
                spread([x / steps * 1e3 for x in times[name]]),
                f"{ratio:+.2%}" if ratio is not None else "–",
                ratio * med[base] / steps * 1e6 if base and ratio is not None else None,
            ]
        )
    return rows, overhead, times


def _lightning_variants(data: Any, model: Callable[[], Any]) -> dict[str, Callable[[], None]]:
    try:
        import pytorch_lightning as pl
    except ImportError:
        return {}
    import torch
    from torch import nn
    from torch.utils.data import DataLoader

    from computewatch.integrations.lightning import ComputewatchCallback

    logging.getLogger("pytorch_lightning").setLevel(logging.ERROR)
    logging.getLogger("lightning").setLevel(logging.ERROR)

    class Module(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = model()

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            x, y = batch
            return nn.functional.cross_entropy(self.net(x), y)

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.01)

    def fit(callbacks: list[Any]) -> None:
        trainer = pl.Trainer(
            max_epochs=1, callbacks=callbacks, logger=False, enable_checkpointing=False,
            enable_progress_bar=False, enable_model_summary=False, accelerator="cpu",
            devices=1,
        )  # fmt: skip
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trainer.fit(Module(), DataLoader(data, batch_size=BATCH))

    class EmptyHooks(pl.Callback):
        """The hooks ComputewatchCallback implements, doing nothing: what Lightning's own
        dispatch of a callback's hooks costs per batch."""

        def on_train_epoch_start(self, *a: Any) -> None: ...
        def on_train_batch_start(self, *a: Any) -> None: ...
        def on_before_backward(self, *a: Any) -> None: ...
        def on_after_backward(self, *a: Any) -> None: ...
        def on_before_optimizer_step(self, *a: Any) -> None: ...
        def on_train_batch_end(self, *a: Any) -> None: ...

    return {
        "Lightning": lambda: fit([]),
        "Lightning + a callback with the same hooks, empty": lambda: fit([EmptyHooks()]),
        "Lightning + ComputewatchCallback": lambda: fit([ComputewatchCallback()]),
    }


def run(quick: bool) -> Section:
    s = Section("Integrations: per-call cost and overhead on a training loop")
    saved = {k: os.environ.get(k) for k in (ENV_RUN_ID, ENV_SPOOL)}
    with tempfile.TemporaryDirectory(prefix="cw-bench-integrations-") as tmp:
        os.environ[ENV_RUN_ID] = "benchintegr0"
        os.environ[ENV_SPOOL] = str(Path(tmp) / "spool")
        try:
            import computewatch

            with computewatch.track(name="bench-integrations") as run:
                assert run.attached, "track() did not attach to the spool"
                call_rows, calls = _call_costs(run, quick)
                train_rows, overhead, times = _training(quick)
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
    s.add(
        "**(a) Cost per call in user code** (run attached to a spool; median of repeats; the "
        "per-item rows are net of a bare `for` over the same list). The writer's background "
        "flush runs meanwhile, as in a job.",
        "",
    )
    s.table(("call", "ns per call"), call_rows)
    rounds = len(next(iter(times.values())))
    s.add(
        f"**(b) A real training loop**: a 256-1024-10 MLP, batches of {BATCH}, one CPU thread; "
        f"each variant run {rounds} times, alternating, after one warm-up; ms per step (median and "
        "min–max); overhead = the median over rounds of (time / time of its bare counterpart in "
        "the same round) − 1.",
        "",
    )
    s.table(("variant", "ms per step", "min–max", "overhead", "µs per step"), train_rows)
    s.add(
        "The empty callback implements the same six hooks as `ComputewatchCallback` and does "
        "nothing in them: its row is what Lightning's dispatch of a callback's hooks costs, the "
        "floor for any Lightning callback that times the phases of a step.",
        "",
    )
    for label in (
        "`with run.phase(...)` (enter + exit, cached)",
        "`run.step(samples=32, tokens=4096)`",
        "`computewatch.torch.steps(run, loader)` per batch (samples from the tensor)",
    ):
        t = calls[label]
        s.target(f"{label} ≤ {TARGET_NS:.0f} ns", f"{t:.0f} ns", t <= TARGET_NS)
    for name, ratio in overhead.items():
        if "empty" in name:  # a reference, not ours
            continue
        base = "bare loop" if name.startswith("steps()") else "Lightning"
        paired = sorted(a / b - 1 for a, b in zip(times[name], times[base], strict=True))
        noise = paired[(3 * len(paired)) // 4] - paired[len(paired) // 4]  # interquartile
        s.target(
            f"{name} overhead ≤ {TARGET_OVERHEAD:.0%}",
            f"{ratio:+.2%}",
            ratio <= TARGET_OVERHEAD,
            inconclusive=(
                f"interquartile range of the paired ratios {noise:.1%}"
                if noise > 2 * TARGET_OVERHEAD
                else None
            ),
        )
    return s


if __name__ == "__main__":
    cli_main(run, __doc__)
