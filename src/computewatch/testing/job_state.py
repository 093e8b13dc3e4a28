"""Fake devices that follow the job running on them: the job writes its device's readings to a
JSON file and every fake device of a preset reports them, so a demo or a benchmark's job can
be idle, busy or throttled when it says so instead of the preset's 70-95 % (``--gpu-backend
fake:PRESET`` with ``COMPUTEWATCH_FAKE_GPU_STATE=FILE`` in the environment).

The file is one JSON object. Its keys are the fake's scriptable fields
(:data:`computewatch.testing.fake_nvml.FIELDS`: ``sm_clock_mhz``, ``clock_events``,
``temperature_c``, ``power_mw``, ``gpu_util_percent`` ...), each replacing the preset's
reading while present, and two more:

- ``busy_seconds_total``: the seconds the device has spent running kernels since the job
  began (a counter); utilization is then its growth between two reads over their interval,
  as NVML's is the share of its sample period during which a kernel ran;
- ``process_memory_bytes``: what each of the run's processes holds on the device (0 before
  the job allocates anything).

The file is read again when it changes (its size, time or inode), so the job writes it whole
and renames it into place. A missing file or a torn write keeps the readings read last.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:
    from computewatch.testing._script import Scripted

__all__ = ["BUSY", "PROCESS_MEMORY", "STATE_ENV", "JobState", "follow", "write_state"]

STATE_ENV = "COMPUTEWATCH_FAKE_GPU_STATE"
BUSY = "busy_seconds_total"
PROCESS_MEMORY = "process_memory_bytes"
_MIN_INTERVAL = 0.05  # seconds: two utilization reads closer than this repeat the last value


class JobState:
    """The readings a job wrote to ``path``, read again when the file changes."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._key: tuple[int, int, int] | None = None
        self._values: dict[str, float] = {}

    def values(self) -> Mapping[str, float]:
        """The numbers in the file now (the last ones read when it is missing or torn)."""
        try:
            st = os.stat(self.path)
        except OSError:
            return self._values
        key = (st.st_mtime_ns, st.st_size, st.st_ino)
        if key == self._key:
            return self._values
        try:
            doc = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return self._values
        if isinstance(doc, dict):
            self._values = {
                k: float(v)
                for k, v in doc.items()
                if isinstance(v, int | float) and not isinstance(v, bool)
            }
            self._key = key
        return self._values


class _Scriptable(Protocol):
    """What :func:`follow` needs of a fake device (computewatch.testing.fake_nvml.FakeDevice,
    which imports this module)."""

    _scripts: dict[str, Scripted]
    process_memory: Callable[[float], int | None] | None

    def script(self, field: str, values: Any) -> Any: ...


_D = TypeVar("_D", bound=_Scriptable)


def follow(device: _D, state: JobState) -> _D:
    """Make ``device`` report what ``state`` holds, and its preset's readings for the rest."""
    for name, base in list(device._scripts.items()):
        if name == "energy_mj":  # the counter integrates the (followed) power
            continue
        device.script(name, _follow_field(state, name, base))
    device.process_memory = lambda now: _as_int(state.values().get(PROCESS_MEMORY))
    return device


def _follow_field(state: JobState, name: str, base: Scripted) -> Callable[[float], float | None]:
    # The last utilization read: its time, the busy counter then (0 before the job wrote
    # one: the counter starts with the job) and the utilization given.
    last: list[float | None] = [None, 0.0, None]

    def read(now: float) -> float | None:
        values = state.values()
        if name == "gpu_util_percent":
            t0, b0, util = last
            if BUSY not in values:
                last[:] = [now, 0.0, None]
            elif t0 is not None and now - t0 < _MIN_INTERVAL and util is not None:
                return util
            else:
                busy = values[BUSY]
                util = values.get(name, 0.0)
                if t0 is not None and now > t0:
                    util = min(max((busy - (b0 or 0.0)) / (now - t0), 0.0), 1.0) * 100.0
                last[:] = [now, busy, round(util)]
                return round(util)
        if name in values:
            v = values[name]
            return int(v) if name == "clock_events" else v
        return base.peek(now)

    return read


def _as_int(v: float | None) -> int | None:
    return None if v is None else int(v)


def write_state(path: str | os.PathLike[str], readings: Mapping[str, float]) -> None:
    """Write ``readings`` for the fake devices to follow: whole, then renamed into place."""
    tmp = f"{os.fspath(path)}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(dict(readings), f)
    os.replace(tmp, path)
