"""The step tally the live uploader keeps: fed the steps a few at a time, in the order the store
gives them (processes interleaved), it gives the counted FLOPs and the forecast's recent step
times that reading every step gives."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from computewatch.accounting.flops import counted_flops, hardware_estimate
from computewatch.accounting.forecast import WINDOW, step_durations
from computewatch.accounting.tally import StepTally
from computewatch.store import StepRow


def _rows(seed: int, pids: int, n: int, none_share: float) -> list[StepRow]:
    """Steps of ``pids`` processes, each in time order, interleaved as the store gives them."""
    rng = random.Random(seed)
    per: list[list[StepRow]] = []
    for pid in range(1, pids + 1):
        t = rng.uniform(0, 5)
        own = []
        for _ in range(rng.randint(1, n)):
            t += rng.choice((0.0, rng.expovariate(4.0)))  # equal times happen
            flops = None if rng.random() < none_share else rng.uniform(1e9, 1e15)
            own.append(StepRow(pid, t, None, None, flops, wall=1e9 + t))
        per.append(own)
    out: list[StepRow] = []
    while any(per):
        own = rng.choice([p for p in per if p])
        out.append(own.pop(0))
    return out


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 2**32), st.integers(1, 3), st.integers(1, 500), st.sampled_from([0, 0.3]))
def test_the_tally_fed_in_pieces_gives_what_the_rows_give(
    seed: int, pids: int, n: int, none_share: float
) -> None:
    rows = _rows(seed, pids, n, none_share)
    writers = {pid: (-1.0, {"settings": {"peak_flops": 1e15}}) for pid in range(1, pids + 1)}
    tally = StepTally()
    rng = random.Random(seed)
    i = 0
    while i < len(rows):  # a live upload at a time: the rows stored since the last one
        j = i + rng.randint(1, 50)
        for r in rows[i:j]:
            tally.add(r.pid, r.mono, r.flops)
        i = j
    assert tally.ordered and tally.count == len(rows)
    est = hardware_estimate([], 10.0)
    if any(r.flops is not None for r in rows):
        assert counted_flops(tally, writers, [], est) == counted_flops(rows, writers, [], est)
    assert tally.recent_durations(WINDOW) == step_durations(None, None, rows)[-WINDOW:]  # type: ignore[arg-type]


def test_a_step_earlier_than_its_processes_last_marks_the_tally_unordered() -> None:
    t = StepTally()
    t.add(1, 10.0, 1.0)
    t.add(2, 5.0, 1.0)  # another process: in order
    assert t.ordered
    t.add(1, 9.0, 1.0)
    assert not t.ordered
