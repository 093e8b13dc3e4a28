"""Small helpers shared by the summary's modules (summary, steps, accounting's forecast): an
ISO timestamp and a percentile."""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import overload

__all__ = ["iso", "percentile"]


@overload
def iso(t: float) -> str: ...
@overload
def iso(t: None) -> None: ...
@overload
def iso(t: float | None) -> str | None: ...
def iso(t: float | None) -> str | None:
    """Seconds since the epoch as an RFC 3339 UTC timestamp with milliseconds (``Z`` for UTC,
    as Alertmanager writes times); None stays None."""
    if t is None:
        return None
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolation percentile (numpy's default method) of already sorted values."""
    n = len(sorted_values)
    if n == 0:
        return math.nan
    pos = (n - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, n - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)
