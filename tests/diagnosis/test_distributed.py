"""Stragglers and collective communication over crafted ranks with `comm` phases."""

from __future__ import annotations


def _ranks(run, compute: dict[int, float], step: float, n: int = 50, name: str = "comm") -> None:
    """Synchronous ranks: every step lasts ``step``; a rank computes ``compute[rank]`` and
    waits in a communication phase (``name``) for the rest."""
    for rank, c in compute.items():
        pid = 100 + rank
        run.writer(pid, rank=rank, world_size=len(compute))
        for k in range(n):
            run.phase(pid, name, k * step + c, (k + 1) * step)
        run.steps(pid, [step] * n)


def test_slow_rank_is_named(crafted):
    run = crafted()
    run.ticks(30)
    _ranks(run, {0: 0.30, 1: 0.45, 2: 0.30, 3: 0.31}, step=0.5)
    f = run.finding("stragglers")
    assert f.evidence.numbers["slowest_rank"] == 1
    assert abs(f.evidence.numbers["excess"] - 0.5) < 0.01  # against the others' median 0.30
    assert "rank 1" in f.title
    assert abs(f.at_stake.seconds - 0.15 * 49) < 0.05  # the first step is left out
    assert "rank 1" in f.suggestion


def test_balanced_ranks_have_no_straggler(crafted):
    run = crafted()
    run.ticks(30)
    _ranks(run, {0: 0.40, 1: 0.41}, step=0.5)
    assert "stragglers" not in run.ids()
    assert "stragglers" in run.ids(straggler_min_excess=0.01, min_seconds_at_stake=0)


def test_comm_share_fires_and_names_the_spread(crafted):
    run = crafted()
    run.ticks(30)
    _ranks(run, {0: 0.2, 1: 0.3}, step=0.5)  # 60 % and 40 % of the steps in comm
    f = run.finding("collective_communication")
    assert abs(f.evidence.numbers["comm_share"] - 0.5) < 1e-6
    assert abs(f.evidence.numbers["min_rank_share"] - 0.4) < 1e-6
    assert "overlap" in f.suggestion.lower() and "no_sync" in f.suggestion
    assert "collective_communication" not in run.ids(comm_share_high=0.6)


def test_phases_named_like_communication_are_communication(crafted):
    for name in ("allreduce", "nccl:all_gather"):
        run = crafted()
        run.ticks(30)
        _ranks(run, {0: 0.2, 1: 0.3}, step=0.5, name=name)
        f = run.finding("collective_communication")
        assert abs(f.evidence.numbers["comm_share"] - 0.5) < 1e-6
        run = crafted()
        run.ticks(30)
        _ranks(run, {0: 0.30, 1: 0.45, 2: 0.30, 3: 0.31}, step=0.5, name=name)
        f = run.finding("stragglers")
        assert f.evidence.numbers["slowest_rank"] == 1
        assert abs(f.evidence.numbers["excess"] - 0.5) < 0.01  # compute excludes the waiting


def test_little_comm_does_not_fire(crafted):
    run = crafted()
    run.ticks(30)
    _ranks(run, {0: 0.45, 1: 0.46}, step=0.5)
    assert "collective_communication" not in run.ids()


def test_single_process_is_not_distributed(crafted):
    run = crafted()
    run.ticks(10)
    run.writer(10)
    run.steps(10, [0.1] * 30)
    d = run.diagnose()
    assert "fewer than two ranks" in d.not_applicable["stragglers"]
    assert "no `comm` phases" in d.not_applicable["collective_communication"]


def test_nested_comm_phases_count_once(crafted):
    """A collective timed inside a DDP bucket's all-reduce (two `comm` phases over the same
    time) is waiting once: the fast rank still comes out fast."""
    run = crafted()
    run.ticks(30)
    step, n = 0.5, 50
    for rank, c in {0: 0.1, 1: 0.4}.items():
        pid = 100 + rank
        run.writer(pid, rank=rank, world_size=2)
        for k in range(n):
            run.phase(pid, "comm", k * step + c, (k + 1) * step)  # the bucket
            run.phase(pid, "comm", k * step + c + 0.01, (k + 1) * step - 0.01)  # inside it
        run.steps(pid, [step] * n)
    f = run.finding("stragglers")
    assert f.evidence.numbers["slowest_rank"] == 1
    assert abs(f.evidence.numbers["slowest_compute_per_step_seconds"] - 0.4) < 1e-6
    assert abs(f.evidence.numbers["others_median_compute_per_step_seconds"] - 0.1) < 1e-6
