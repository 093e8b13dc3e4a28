"""``computewatch.torch.steps``: the one-line training loop.

In-process tests attach a real run to a spool directory (as ``computewatch run`` does) and read
back what the channel wrote; one end-to-end test runs a real PyTorch loop under the real CLI.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import computewatch
from computewatch.sampling.channel import (
    ENV_RUN_ID,
    ENV_SPOOL,
    PhaseRecord,
    SpoolReader,
    StepRecord,
)
from computewatch.torch import batch_size, steps


@pytest.fixture
def spool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A spool directory that ``track()`` attaches to, as under ``computewatch run``."""
    path = tmp_path / "spool"
    monkeypatch.setenv(ENV_RUN_ID, "looptest0000")
    monkeypatch.setenv(ENV_SPOOL, str(path))
    return path


def _events(spool: Path) -> tuple[list[StepRecord], list[PhaseRecord]]:
    events = SpoolReader(spool).poll()
    return (
        [e for e in events if isinstance(e, StepRecord)],
        [e for e in events if isinstance(e, PhaseRecord)],
    )


def test_batch_size_finds_the_first_dimension() -> None:
    x = torch.zeros(7, 3)
    assert batch_size(x) == 7
    assert batch_size((x, torch.zeros(7))) == 7
    assert batch_size([["a", "b"], torch.zeros(5, 2)]) == 5  # strings have no shape
    assert batch_size({"input_ids": torch.zeros(3, 16), "labels": torch.zeros(3)}) == 3
    assert batch_size({"meta": {"ids": torch.zeros(2, 4)}}) == 2
    assert batch_size(torch.tensor(1.0)) is None  # a scalar has no batch dimension
    assert batch_size("text") is None
    assert batch_size([]) is None


def test_each_batch_is_a_step_with_its_data_wait(spool: Path) -> None:
    def slow_loader() -> Iterator[torch.Tensor]:
        for n in (4, 4, 2):
            time.sleep(0.02)
            yield torch.zeros(n, 8)

    body_ends = []
    with computewatch.track(name="loop") as run:
        for batch in steps(run, slow_loader()):
            assert batch.shape[1] == 8
            time.sleep(0.01)
            body_ends.append(time.monotonic())
    recs, phases = _events(spool)
    assert [r.samples for r in recs] == [4, 4, 2]
    assert all(r.tokens is None and r.flops is None for r in recs)
    assert [p.name for p in phases] == ["data"] * 3
    for i, (r, p) in enumerate(zip(recs, phases, strict=True)):
        assert p.end - p.start >= 0.015  # the loader's sleep is the data wait
        assert r.mono >= body_ends[i]  # the step closes when the body comes back
        assert p.end <= r.mono  # each batch's wait belongs to its own step
        if i:
            assert p.start == pytest.approx(recs[i - 1].mono, abs=1e-3)


def test_samples_and_tokens_functions_and_constants(spool: Path) -> None:
    ds = TensorDataset(torch.randint(0, 50, (10, 6)))
    with computewatch.track(name="loop") as run:
        for _ in steps(run, DataLoader(ds, batch_size=4), tokens=lambda b: b[0].numel()):
            pass
        for _ in steps(run, range(3), samples=8, tokens=lambda i: 100 * i):
            pass
        for _ in steps(run, range(2), samples=lambda i: i + 1, tokens=64):
            pass
    recs, _ = _events(spool)
    assert [(r.samples, r.tokens) for r in recs] == [
        (4, 24), (4, 24), (2, 12), (8, 0), (8, 100), (8, 200), (1, 64), (2, 64),
    ]  # fmt: skip


def test_declared_flops_per_token_apply_to_the_loop(spool: Path) -> None:
    with computewatch.track(name="loop", flops_per_token=1000.0) as run:
        for _ in steps(run, range(2), samples=1, tokens=5):
            pass
    recs, _ = _events(spool)
    assert [r.flops for r in recs] == [5000.0, 5000.0]


def test_break_leaves_the_step_open_and_len_is_the_loaders(spool: Path) -> None:
    loader = DataLoader(TensorDataset(torch.zeros(12, 2)), batch_size=4)
    with computewatch.track(name="loop") as run:
        loop = steps(run, loader)
        assert len(loop) == 3
        for i, _ in enumerate(loop):
            if i == 1:
                break
    recs, phases = _events(spool)
    assert len(recs) == 1  # the second batch was fetched (its data phase) but not finished
    assert len(phases) == 2


def test_without_a_run_the_loader_is_unchanged(spool: Path) -> None:
    assert computewatch.current_run() is None
    assert list(steps(None, range(3))) == [0, 1, 2]
    with computewatch.track(name="loop"):
        assert list(steps(None, range(2))) == [0, 1]  # the current run
    recs, _ = _events(spool)
    assert len(recs) == 2


def test_an_empty_loader_records_nothing(spool: Path) -> None:
    with computewatch.track(name="loop") as run:
        assert list(steps(run, [])) == []
    recs, phases = _events(spool)
    assert recs == [] and phases == []


@pytest.mark.slow
def test_a_real_training_loop_under_computewatch_run(cw, make_script) -> None:
    script = make_script(
        "train.py",
        """
        import torch
        from torch import nn
        from torch.utils.data import DataLoader, TensorDataset
        import computewatch
        import computewatch.torch as cwt

        torch.manual_seed(0)
        ds = TensorDataset(torch.randn(50, 8), torch.randint(0, 3, (50,)))
        model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        with computewatch.track(name="plain-loop") as run:
            for epoch in range(2):
                for x, y in cwt.steps(run, DataLoader(ds, batch_size=16)):
                    with run.phase("forward"):
                        loss = nn.functional.cross_entropy(model(x), y)
                    with run.phase("backward"):
                        loss.backward()
                    with run.phase("optimizer"):
                        opt.step()
                        opt.zero_grad()
        """,
    )
    cw.ok("run", "--quiet", "--", sys.executable, script)
    s = cw.show()
    assert s["name"] == "plain-loop"
    assert s["steps"]["count"] == 8  # 2 epochs × (16, 16, 16, 2)
    assert s["steps"]["samples_total"] == 100
    phases = s["phases"]["by_name"]
    assert set(phases) == {"data", "forward", "backward", "optimizer"}
    assert all(p["steps"] == 8 for p in phases.values())
