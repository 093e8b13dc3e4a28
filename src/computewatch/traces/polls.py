"""Number the devices of an nvidia-smi ``--query-gpu`` log that has no device column (no
``index``, ``uuid`` or ``pci.bus_id``): by their order in each poll.

At each poll nvidia-smi writes one row per device, in device order, each with its own
timestamp (the same millisecond, or a few apart); the next poll comes one interval later
(``-l N``, ``-lms N``). So the rows fall into runs separated by the poll interval, and a row's
position in its run is its device. What this module accepts, and what it refuses rather than
guess (the caller names the fix: log ``index``):

- rows come several to a poll when a quarter of the intervals between them at least are
  under 50 ms and one in 64 at least stands out (the poll interval); otherwise one to a
  poll (one device);
- the poll size is the run size that holds most rows, and at least half of them;
- a poll whose rows spread over more than half the interval (nvidia-smi stalled on a device)
  comes as consecutive short runs that add up to the poll size: kept together, counted;
- two polls closer than half the interval are split where the run's largest gaps are;
- a short poll that the next runs overrun, after a pause of ten intervals or more or at the
  end of the log, is a log stopped mid-poll (a crash, a restart): nvidia-smi writes devices
  in order, so its rows are the first devices; counted;
- a short poll followed by the next poll at the usual interval (a device missing: which one?),
  runs that overrun the poll size, or no dominant poll size: :class:`PollError`.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import statistics
from array import array
from collections import Counter
from collections.abc import Sequence

from computewatch.errors import ComputewatchError

__all__ = ["PAUSE_POLLS", "PollError", "Polls", "number_by_poll"]

PAUSE_POLLS = 10.0
"""A silence of this many poll intervals after a short poll means the log stopped there."""

ONE_POLL = 0.005
"""Rows all this close (seconds) are one poll: nvidia-smi run without ``-l``."""
WITHIN_POLL = 0.05
"""nvidia-smi reads the devices of one poll a few milliseconds apart: when three quarters of
the intervals between rows are over this (seconds), the rows come one to a poll."""
MAX_DEVICES = 64
"""Rows several to a poll show as a poll interval after at least one row in this many."""

_SAMPLE = 100_000  # intervals looked at for the quantiles and the median (spread evenly)


class PollError(ComputewatchError):
    """The rows do not fall into polls unambiguously: ``row`` is the first row at fault (an
    offset into the times given; None: the whole log), ``why`` says what was seen."""

    def __init__(self, row: int | None, why: str) -> None:
        super().__init__(why)
        self.row = row
        self.why = why


@dataclasses.dataclass(frozen=True, slots=True)
class Polls:
    """How the rows fell into polls: the devices a poll has, each row's device (its position
    in its poll), the poll interval (the median from a poll's start to the next's, seconds;
    NaN for a single poll), the number of polls, of stretched ones and of ones cut short."""

    devices: int
    positions: array[int]
    interval: float
    polls: int
    stretched: int
    cut: int


def _spread(values: Sequence[float]) -> list[float]:
    step = max(1, len(values) // _SAMPLE)
    return sorted(values[i] for i in range(0, len(values), step))


def _interval(gaps: Sequence[float]) -> float | None:
    """The interval between polls (from a poll's last row to the next's first: the tenth
    percentile of the intervals that stand out) of rows that come several to a poll (0: all
    in one poll), or None when they come one to a poll: then three quarters of the intervals
    between rows are over :data:`WITHIN_POLL`, or few stand out from the rest (a stall, a
    gap)."""
    s = _spread(gaps)
    if s[0] > -ONE_POLL and s[-1] < ONE_POLL:
        return 0.0
    low = s[len(s) // 4]  # within a poll, when rows come several to a poll
    if low > WITHIN_POLL:
        return None
    big = [g for g in s if g > 4.0 * low + WITHIN_POLL / 5.0]
    if len(big) * MAX_DEVICES < len(s):
        return None
    return big[len(big) // 10]  # a stall only lengthens an interval: the low end is the poll's


def number_by_poll(times: Sequence[float]) -> Polls:
    """The device of each row of one job's rows (``times`` in file order), by its position in
    its poll; :class:`PollError` when the polls cannot be told apart (module docstring)."""
    n = len(times)
    if n == 0:
        return Polls(1, array("i"), math.nan, 0, 0, 0)
    gaps = [times[i + 1] - times[i] for i in range(n - 1)]
    interval = _interval(gaps) if gaps else None
    if interval is None:  # one row a poll: one device
        every = float(statistics.median(_spread(gaps))) if gaps else math.nan
        return Polls(1, array("i", bytes(4 * n)), every, n, 0, 0)
    if interval <= 0.0:  # every row at one time: a single poll (nvidia-smi without -l)
        return Polls(n, array("i", range(n)), math.nan, 1, 0, 0)
    half = interval / 2.0
    # runs of rows closer than half an interval (time going back that far ends a run too: the
    # device's own series then says so, naming the lines)
    starts = [0]
    starts += [i + 1 for i, g in enumerate(gaps) if g >= half or g <= -half]
    sizes = [b - a for a, b in zip(starts, [*starts[1:], n], strict=True)]
    held: Counter[int] = Counter()
    for s in sizes:
        held[s] += s
    k, rows_k = max(held.items(), key=lambda kv: (kv[1], -kv[0]))
    if 2 * rows_k < n:
        common = ", ".join(f"{size} ({rows} rows)" for size, rows in held.most_common(3))
        raise PollError(
            None,
            f"the rows do not fall into polls of one size (runs of {common}, a run being rows "
            f"less than {half * 1000:.0f} ms apart)",
        )
    positions = array("i", bytes(4 * n))
    polls = stretched = cut = 0
    pause = PAUSE_POLLS * interval
    r = 0
    while r < len(sizes):
        start, size = starts[r], sizes[r]
        if k in (size, 1):  # one GPU: rows closer than half an interval are its own
            for i in range(size):
                positions[start + i] = i % k
            polls += size // k
            r += 1
            continue
        if size > k:
            _split(times, start, size, k, positions)
            polls += size // k
            r += 1
            continue
        # a short run: the start of a stretched poll (the runs that follow complete it), or
        # of a poll cut short (they overrun it, after a pause or at the end of the log)
        acc, first = 0, r
        while r < len(sizes) and acc + sizes[r] <= k:
            for i in range(sizes[r]):
                positions[starts[r] + i] = acc + i
            acc += sizes[r]
            r += 1
            if acc == k:
                break
        if acc == k:
            stretched += 1
        elif r == len(sizes) or times[starts[r]] - times[starts[r] - 1] >= pause:
            cut += 1
        else:
            raise PollError(
                starts[first],
                f"a poll of {acc} rows where the others have {k}, the next poll "
                f"{(times[starts[r]] - times[starts[r] - 1]) * 1000:.0f} ms later: a device "
                "is missing from it, and nothing says which",
            )
        polls += 1
    spans = [times[b] - times[a] for a, b in itertools.pairwise(starts)]
    every = float(statistics.median(_spread(spans))) if spans else math.nan
    return Polls(k, positions, every, polls, stretched, cut)


def _split(times: Sequence[float], start: int, size: int, k: int, positions: array[int]) -> None:
    """A run of several polls closer than half an interval: split every ``k`` rows when the
    gaps there are the run's largest, else :class:`PollError`."""
    if size % k:
        raise PollError(
            start,
            f"a run of {size} rows closer than half the poll interval where a poll has {k}",
        )
    inner = max(
        (times[start + i + 1] - times[start + i] for i in range(size - 1) if (i + 1) % k),
        default=-math.inf,
    )
    cuts = min(times[start + j] - times[start + j - 1] for j in range(k, size, k))
    if cuts <= inner:
        raise PollError(
            start,
            f"{size // k} polls of {k} rows closer than half the poll interval, with no clear "
            "boundary between them",
        )
    for i in range(size):
        positions[start + i] = i % k
