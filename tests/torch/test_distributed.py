"""Communication timing with real ``torch.distributed`` (gloo on CPU): the wrapped collectives
and the DDP hook record ``comm`` phases; and a real 2-rank torchrun job under
``computewatch run`` is summarised per rank, naming the artificially slowed rank."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

from computewatch.sampling.channel import PhaseRecord, SpoolReader, StepWriter  # noqa: E402
from computewatch.torch import watch_collectives, watch_ddp  # noqa: E402
from computewatch.tracking import Run  # noqa: E402


@pytest.fixture
def group(monkeypatch: pytest.MonkeyPatch, free_port: Callable[[], int]) -> Iterator[None]:
    """A one-process gloo group on the loopback interface, destroyed after the test."""
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1
    )
    try:
        yield
    finally:
        dist.destroy_process_group()


@pytest.fixture
def run(tmp_path: Path) -> Iterator[Run]:
    """A run writing to a spool of its own (as a process under ``computewatch run`` does)."""
    r = Run("0c0c0c0c0c0c", StepWriter(tmp_path / "spool", {}), attached=True, db_path=None)
    yield r
    r.close()


def comm_phases(run: Run, spool: Path) -> list[PhaseRecord]:
    run.close()  # flushes the writer
    reader = SpoolReader(spool)
    try:
        return [e for e in reader.poll() if isinstance(e, PhaseRecord)]
    finally:
        reader.close()


def test_collectives_are_timed_and_restored(group: None, run: Run, tmp_path: Path) -> None:
    original = dist.all_reduce
    t = torch.ones(4)
    with watch_collectives(run) as watch:
        assert dist.all_reduce is not original
        assert "all_reduce" in watch.functions and "barrier" in watch.functions
        before = time.monotonic()
        dist.all_reduce(t)  # synchronous
        work = dist.all_reduce(t, async_op=True)  # timed until its future completes
        assert hasattr(work, "wait")  # the caller still gets the work itself
        work.wait()
        dist.barrier()
        with pytest.raises(RuntimeError, match="already watched"):
            watch_collectives(run)
    assert dist.all_reduce is original
    assert not hasattr(dist.all_reduce, "__computewatch_original__")
    dist.all_reduce(t)  # after unwatch: not recorded
    phases = comm_phases(run, tmp_path / "spool")
    assert [p.name for p in phases] == ["comm"] * 3
    assert all(before <= p.start <= p.end for p in phases)
    assert watch.calls == 3 and watch.errors == 0
    assert torch.equal(t, torch.ones(4))  # a world of one: the sum is the tensor itself


def test_collective_errors_propagate_unchanged(group: None, run: Run) -> None:
    with watch_collectives(run), pytest.raises(ValueError):
        dist.broadcast(torch.ones(2), src=0, group="not a group")


def test_without_a_run_watching_is_refused() -> None:
    with pytest.raises(RuntimeError, match="no active computewatch run"):
        watch_collectives()


def test_ddp_hook_times_gradient_buckets(group: None, run: Run, tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 2))
    reference = torch.nn.Linear(8, 2)
    reference.load_state_dict(model.module.state_dict())
    watch = watch_ddp(model, run)
    x = torch.randn(4, 8)
    model(x).sum().backward()
    reference(x).sum().backward()
    # The wrapped default hook still averages the gradients (a world of one: unchanged).
    assert model.module.weight.grad is not None and reference.weight.grad is not None
    assert torch.allclose(model.module.weight.grad, reference.weight.grad)
    assert watch.buckets >= 1
    seen = watch.buckets
    watch.unwatch()
    model(x).sum().backward()
    assert watch.buckets == seen
    phases = comm_phases(run, tmp_path / "spool")
    assert len(phases) == seen and all(p.name == "comm" and p.end >= p.start for p in phases)


TRAIN = """
import os, sys, time
import torch
import torch.distributed as dist
import computewatch
from computewatch.torch import watch_collectives, watch_ddp

SLOW_RANK, SLEEP, STEPS = 1, 0.15, 24
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(32, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
dist.barrier()  # both ranks start their first step together
with computewatch.track(name="ddp") as run:
    watch_ddp(model, run)
    coll = watch_collectives(run)
    for i in range(STEPS):
        x = torch.randn(16, 32)
        with run.phase("forward"):
            if rank == SLOW_RANK:
                time.sleep(SLEEP)
            loss = model(x).pow(2).mean()
        with run.phase("backward"):
            loss.backward()
        opt.step()
        opt.zero_grad()
        dist.all_reduce(loss.detach())
        run.step(samples=16)
    coll.unwatch()
# Both ranks done with their collectives before either tears gloo down: a rank that destroys
# its group while its peer's last transfer is in flight aborts the peer (std::terminate), as
# seen on a loaded machine.
dist.barrier()
dist.destroy_process_group()
# The run's data is complete (the block's end closed its step writer). Leave without the
# interpreter's finalization: on a loaded machine torch's own threads have aborted a rank there
# (std::terminate, "terminate called without an active exception") after its work was done.
sys.stdout.flush()
sys.stderr.flush()
os._exit(0)
"""


def torchrun() -> list[str]:
    exe = Path(sys.executable).with_name("torchrun")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "torch.distributed.run"]


@pytest.mark.slow
def test_torchrun_ranks_under_computewatch_run(
    cw: Any, make_script: Callable[[str, str], Path], free_port: Callable[[], int]
) -> None:
    script = make_script("train.py", TRAIN)
    port = free_port()
    cmd = [
        sys.executable, "-m", "computewatch", "run", "--quiet", "--",
        *torchrun(), "--nnodes", "1", "--nproc-per-node", "2", "--rdzv-backend", "c10d",
        "--rdzv-endpoint", f"127.0.0.1:{port}", str(script),
    ]  # fmt: skip
    env = cw.env(GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
    r = subprocess.run(
        cmd, env=env, cwd=cw.tmp, capture_output=True, text=True, timeout=240, check=False
    )
    assert r.returncode == 0, f"stdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    s = cw.show()
    assert s["steps"]["count"] == 48 and s["steps"]["processes"] == 2
    ranks = s["ranks"]
    assert ranks["count"] == 2 and ranks["world_size"] == 2
    r0, r1 = ranks["ranks"]
    assert (r0["rank"], r0["steps"], r1["rank"], r1["steps"]) == (0, 24, 1, 24)
    assert ranks["slowest_rank"] == 1
    assert r1["compute_seconds_per_step"] >= 0.15  # its sleep is compute, as far as we know
    assert r0["comm_seconds"] > r1["comm_seconds"]  # rank 0 waits for rank 1 in the all-reduce
    # Rank 0 waits out rank 1's 0.15 s sleep in each of the 24 steps' all-reduces, less however
    # much longer its own work took than rank 1's: on a loaded 2-core machine either rank can be
    # held up by tens of ms a step, so a quarter of the sleeps (0.9 s) is required, not all of
    # them; the ordering above is the firm check.
    assert r0["comm_seconds"] >= 0.25 * 0.15 * 24
    assert ranks["load_imbalance"] > 0.2
    by = s["phases"]["by_name"]
    assert {"forward", "backward", "comm"} <= set(by)
    assert by["comm"]["steps"] == 48
    text = cw.ok("show", "last").stdout
    assert "slowest rank 1" in text
    # The diagnosis names the slowed rank, and how long rank 0 waits for it in collectives.
    found = {f["id"]: f for f in cw.json("diagnose", "last")["findings"]}
    assert "stragglers" in found, found
    assert "rank 1 is" in " ".join(found["stragglers"]["evidence"]["lines"])
    assert "rank 0 spends" in found["stragglers"]["evidence"]["lines"][-1]
    assert os.path.exists(cw.db)
