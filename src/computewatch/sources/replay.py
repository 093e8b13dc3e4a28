"""Record GPU readings to a trace file, and replay a trace as a simulated GPU source.

A trace is JSON Lines: a header ``{"format": "computewatch-gpu-trace", "version": 1,
"recorded_at", "hostname", "interval_seconds", "devices": [...]}``, then one line per tick
``{"t": seconds since the first tick, "readings": [[name, {labels}, value, kind], ...]}``.
Replayed devices are marked simulated everywhere. Per-process readings are not replayed: their
PIDs belong to the machine that recorded them.
"""

from __future__ import annotations

import dataclasses
import json
import math
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import msgspec

from computewatch.errors import ComputewatchError
from computewatch.readings import Kind, Reading, labels
from computewatch.sources.nvidia import GpuDevice

FORMAT = "computewatch-gpu-trace"
VERSION = 1


def record(
    sources: list[Any],
    out: IO[str],
    *,
    seconds: float,
    interval: float,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Read ``sources`` every ``interval`` for ``seconds`` and write a trace; returns ticks."""
    devices = [msgspec.structs.asdict(d) for s in sources for d in s.devices]
    header = {
        "format": FORMAT,
        "version": VERSION,
        "recorded_at": time.time(),
        "hostname": socket.gethostname(),
        "interval_seconds": interval,
        "devices": devices,
    }
    out.write(json.dumps(header) + "\n")
    start = clock()
    n = 0
    while True:
        now = clock()
        rows = []
        for s in sources:
            for r in s.read():
                # per-process rows are not replayed; a non-finite value cannot be replayed
                # (the trace reader refuses it, as JSON has no NaN)
                if r.name.startswith("gpu_process_") or not math.isfinite(r.value):
                    continue
                rows.append([r.name, dict(r.labels), r.value, int(r.kind)])
        out.write(json.dumps({"t": round(now - start, 6), "readings": rows}) + "\n")
        n += 1
        if now - start >= seconds:
            return n
        sleep(max(0.0, start + n * interval - clock()))


class ReplaySource:
    """Plays a recorded trace back in real time (looping), labelled simulated."""

    name = "replay"
    simulated = True

    def __init__(
        self, path: str | Path, *, loop: bool = True, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.path = Path(path)
        self.notes: list[str] = []
        self._loop = loop
        self._clock = clock
        header, frames = _parse_trace(self.path)
        self._frames = frames
        self._span = frames[-1][0] + header.interval_seconds
        self._start = clock()
        self._devices = [
            msgspec.structs.replace(
                d, capabilities={**d.capabilities, "replayed_from": str(path)}, simulated=True
            )
            for d in header.devices
        ]
        self._laps = 0
        self._base: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}

    @property
    def devices(self) -> list[GpuDevice]:
        return list(self._devices)

    def used_uuids(self) -> set[str]:
        """Every replayed device: the recorded processes are not ours to match."""
        return {d.uuid for d in self._devices}

    def read(self) -> list[Reading]:
        elapsed = self._clock() - self._start
        laps = int(elapsed // self._span)
        if laps and not self._loop:
            return []
        pos = elapsed - laps * self._span
        frame = self._frames[0][1]
        for t, readings in self._frames:
            if t > pos:
                break
            frame = readings
        if laps != self._laps:
            # Counters carry on across laps: each lap gone by (a missed one too) adds what the
            # counter gained in the trace, last frame minus first (it need not start at 0).
            first: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
            last: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
            for _, readings in self._frames:
                for r in readings:
                    if r.kind == Kind.COUNTER:
                        first.setdefault((r.name, r.labels), r.value)
                        last[(r.name, r.labels)] = r.value
            for key, v in last.items():
                gain = max(v - first[key], 0.0) * (laps - self._laps)
                self._base[key] = self._base.get(key, 0.0) + gain
            self._laps = laps
        if not self._base:
            return list(frame)
        return [
            r._replace(value=r.value + self._base.get((r.name, r.labels), 0.0))
            if r.kind == Kind.COUNTER
            else r
            for r in frame
        ]

    def close(self) -> None:
        return None


class TraceError(ComputewatchError, ValueError):
    """A GPU trace that cannot be replayed: the message names the line and what is wrong."""


@dataclasses.dataclass(frozen=True, slots=True)
class TraceHeader:
    """Line 1 of a trace, checked."""

    interval_seconds: float
    devices: tuple[GpuDevice, ...]


MAX_INTERVAL = 3600.0
"""The longest interval between ticks a trace may declare (the sampler's own limit)."""

# GpuDevice's fields and the JSON types each may hold (None: the field may be null).
_DEVICE_TYPES: dict[str, tuple[type, ...]] = {
    "index": (int,),
    "uuid": (str,),
    "name": (str,),
    "model": (str, type(None)),
    "memory_total_bytes": (int, type(None)),
    "power_limit_watts": (int, float, type(None)),
    "mig_parent_uuid": (str, type(None)),
    "mig_index": (int, type(None)),
    "simulated": (bool,),
    "capabilities": (dict,),
}


def _finite(v: object) -> float | None:
    """``v`` as a finite float when it is a JSON number; None otherwise."""
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    try:
        f = float(v)
    except OverflowError:
        return None
    return f if math.isfinite(f) else None


def _json_line(line: str, lineno: int) -> object:
    try:
        return json.loads(line)
    except RecursionError:
        raise TraceError(f"line {lineno}: nests too deeply") from None
    except ValueError as e:  # JSONDecodeError, and int() limits on huge digit strings
        raise TraceError(f"line {lineno}: not JSON ({e})") from None


def _device(d: object) -> GpuDevice:
    if not isinstance(d, dict):
        raise TraceError(f"line 1: a device must be an object, not {d!r:.60}")
    fields: dict[str, object] = {}
    for name, types in _DEVICE_TYPES.items():
        if name not in d:
            continue
        v = d[name]
        bad_bool = isinstance(v, bool) and bool not in types
        if bad_bool or not isinstance(v, types):
            raise TraceError(f"line 1: device field {name} = {v!r:.60} has the wrong type")
        if name == "power_limit_watts" and v is not None and _finite(v) is None:
            raise TraceError(f"line 1: device field {name} = {v!r:.60} is not finite")
        fields[name] = v
    for name in ("index", "uuid", "name"):
        if name not in fields:
            raise TraceError(f"line 1: a device needs {name}")
    fields.setdefault("model", None)
    fields.setdefault("memory_total_bytes", None)
    fields.setdefault("power_limit_watts", None)
    caps = fields.get("capabilities", {})
    assert isinstance(caps, dict)
    if not all(isinstance(v, str | bool) for v in caps.values()):
        raise TraceError("line 1: device capabilities must be true, false or text")
    return GpuDevice(**fields)  # type: ignore[arg-type]


def _header(obj: object) -> TraceHeader:
    if not isinstance(obj, dict) or obj.get("format") != FORMAT:
        raise TraceError("not a computewatch GPU trace (no trace header on line 1)")
    if obj.get("version") != VERSION:
        raise TraceError(f"trace version {obj.get('version')!r:.40} is not supported")
    raw = obj.get("interval_seconds")
    interval = 1.0 if raw is None else _finite(raw)
    if interval is None or not 0 < interval <= MAX_INTERVAL:
        raise TraceError(
            f"line 1: interval_seconds = {raw!r:.40} must be above 0 and at most {MAX_INTERVAL:g}"
        )
    devices = obj.get("devices", [])
    if not isinstance(devices, list):
        raise TraceError("line 1: devices must be a list")
    return TraceHeader(interval, tuple(_device(d) for d in devices))


def _frame(obj: object, lineno: int, after: float) -> tuple[float, list[Reading]]:
    def bad(why: str) -> TraceError:
        return TraceError(f"line {lineno}: malformed trace frame ({why})")

    if not isinstance(obj, dict) or "t" not in obj or "readings" not in obj:
        raise bad('expected {"t": ..., "readings": [...]}')
    t = _finite(obj["t"])
    if t is None or t < after:
        raise bad(f"t = {obj['t']!r:.40} must be a finite number, not below the line before")
    rows = obj["readings"]
    if not isinstance(rows, list):
        raise bad("readings must be a list")
    readings: list[Reading] = []
    for row in rows:
        if not isinstance(row, list) or len(row) != 4:
            raise bad(f"a reading is [name, {{labels}}, value, kind], not {row!r:.60}")
        name, lb, value, kind = row
        v = _finite(value)
        if not isinstance(name, str) or not name:
            raise bad(f"reading name {name!r:.40} must be text")
        if not isinstance(lb, dict) or not all(isinstance(x, str) for x in lb.values()):
            raise bad(f"labels of {name} must be an object of text values")
        if v is None:
            raise bad(f"value of {name} = {value!r:.40} is not a finite number")
        if type(kind) is not int or kind not in {int(k) for k in Kind}:
            raise bad(f"kind of {name} = {kind!r:.40} is not one of {[int(k) for k in Kind]}")
        readings.append(Reading(name, labels(**lb), v, Kind(kind)))
    return t, readings


def _parse_trace(path: Path) -> tuple[TraceHeader, list[tuple[float, list[Reading]]]]:
    """Read and check a whole trace; OSError when the file cannot be read, else TraceError."""
    with open(path, encoding="utf-8", errors="strict") as f:
        try:
            lines = f.read().splitlines()
        except UnicodeDecodeError as e:
            raise TraceError(f"not a computewatch GPU trace (not UTF-8 text: {e.reason})") from None
    if not lines:
        raise TraceError("not a computewatch GPU trace (the file is empty)")
    try:
        first = json.loads(lines[0])
    except (ValueError, RecursionError):
        raise TraceError("not a computewatch GPU trace (line 1 is not JSON)") from None
    header = _header(first)
    frames: list[tuple[float, list[Reading]]] = []
    for lineno, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        frames.append(_frame(_json_line(line, lineno), lineno, frames[-1][0] if frames else 0.0))
    if not frames:
        raise TraceError("the trace has no readings")
    return header, frames
