"""What the fake vendor libraries share (:mod:`~computewatch.testing.fake_nvml`,
:mod:`~computewatch.testing.fake_amdsmi`): scripted readings, scheduled failures, energy as an
integral of scripted power and deterministic noise (``COUNTxMODEL`` presets are public:
:mod:`computewatch.testing.presets`).

Each fake keeps its own public API (its ``script``/``fail`` methods, field names, error
classes); these helpers hold the logic behind it.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence

Value = float | int | None
Script = float | int | None | Sequence[float | int | None] | Callable[[float], float | None]


class Scripted:
    """One field's script: a constant, a sequence (one value per read, the last repeats), or
    a function of the fake's clock."""

    __slots__ = ("fn", "index", "seq", "value")

    def __init__(self, script: Script) -> None:
        self.fn: Callable[[float], Value] | None = None
        self.seq: list[Value] | None = None
        self.value: Value = None
        self.index = 0
        if callable(script):
            self.fn = script
        elif isinstance(script, (int, float)) or script is None:
            self.value = script
        else:
            self.seq = list(script)
            if not self.seq:
                raise ValueError("a scripted sequence needs at least one value")

    def peek(self, now: float) -> Value:
        if self.fn is not None:
            return self.fn(now)
        if self.seq is not None:
            return self.seq[min(self.index, len(self.seq) - 1)]
        return self.value

    def take(self, now: float) -> Value:
        if self.seq is not None:
            value = self.seq[min(self.index, len(self.seq) - 1)]
            self.index += 1
            return value
        return self.peek(now)


@dataclasses.dataclass(slots=True)
class Failure:
    function: str  # a function name of the fake library, or "*" for any call on the device
    code: int  # the library's error or status code to raise
    start: int  # the first failing call, 1-based
    count: int | None  # how many calls fail; None: every call from ``start`` on


def schedule(
    function: str,
    code: int,
    done: int,
    *,
    after: int | None,
    at_call: int | None,
    count: int | None,
    check_start: bool = True,
) -> Failure:
    """A failure of ``function`` from call ``at_call`` on (1-based), or once ``after`` calls
    have succeeded, or else from the next call (``done`` were made so far). ``check_start``
    rejects a start before the first call."""
    if after is not None and at_call is not None:
        raise ValueError("give after= or at_call=, not both")
    if at_call is not None:
        start = at_call
    elif after is not None:
        start = after + 1
    else:
        start = done + 1
    if check_start and start < 1:
        raise ValueError("calls are numbered from 1")
    return Failure(function, code, start, count)


def due(failures: Sequence[Failure], function: str, n: int, total: int | None = None) -> int | None:
    """The code of the first failure due on the ``n``th call of ``function``, or None. With
    ``total`` (the device's calls of any function so far), ``"*"`` failures count those."""
    for f in failures:
        if f.function == function:
            k = n
        elif f.function == "*" and total is not None:
            k = total
        else:
            continue
        if f.start <= k < f.start + (f.count or k + 1):
            return f.code
    return None


class Integral:
    """A counter that starts at ``start`` and adds the trapezoid integral of the power given
    at each read over the fake's clock (exact for constant or linear power); ``scale`` turns
    the power's unit times seconds into the counter's (W·s to µJ: 1e6)."""

    __slots__ = ("p", "scale", "t", "total")

    def __init__(self, start: float, scale: float = 1.0) -> None:
        self.total = start
        self.scale = scale
        self.t: float | None = None
        self.p = 0.0

    def restart(self) -> None:
        """Integrate from the next read on (the power before it is not counted)."""
        self.t = None

    def at(self, now: float, power: float) -> float:
        if self.t is not None:
            self.total += (self.p + power) / 2.0 * (now - self.t) * self.scale
        self.t, self.p = now, power
        return self.total


# -- deterministic noise --------------------------------------------------------------------
_MASK64 = (1 << 64) - 1


def mix(*parts: int) -> int:
    """A 64-bit hash of integers (splitmix64 steps): cheap, deterministic noise."""
    x = 0x9E3779B97F4A7C15
    for p in parts:
        x = ((x ^ (p & _MASK64)) + 0x9E3779B97F4A7C15) & _MASK64
        x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
        x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
        x ^= x >> 31
    return x


@functools.lru_cache(maxsize=4096)
def unit(*parts: int) -> float:
    """Deterministic noise in [-1, 1). Kept for the last few thousand arguments: a preset's
    scripts ask for the same noise step a dozen times a tick, and the hash is most of a fake
    call's cost."""
    return mix(*parts) / 2**63 - 1.0


def str_seed(text: str) -> int:
    h = 0
    for ch in text.encode():
        h = mix(h, ch)
    return h
