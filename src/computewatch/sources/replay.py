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
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

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
    devices = [dataclasses.asdict(d) for s in sources for d in s.devices]
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
                if r.name.startswith("gpu_process_"):
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
        with open(self.path) as f:
            first = f.readline()
            try:
                header = json.loads(first)
            except ValueError:
                raise ValueError("not a computewatch GPU trace (line 1 is not JSON)") from None
            if not isinstance(header, dict) or header.get("format") != FORMAT:
                raise ValueError("not a computewatch GPU trace (no trace header on line 1)")
            if header.get("version") != VERSION:
                raise ValueError(f"trace version {header.get('version')} is not supported")
            frames: list[tuple[float, list[Reading]]] = []
            for lineno, line in enumerate(f, start=2):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                    readings = [
                        Reading(str(n), labels(**lb), float(v), Kind(int(k)))
                        for n, lb, v, k in obj["readings"]
                    ]
                    frames.append((float(obj["t"]), readings))
                except (ValueError, KeyError, TypeError) as e:
                    raise ValueError(f"line {lineno}: malformed trace frame ({e})") from None
        if not frames:
            raise ValueError("the trace has no readings")
        self._frames = frames
        self._span = frames[-1][0] + float(header.get("interval_seconds") or 1.0)
        self._start = clock()
        try:
            self._devices = [
                GpuDevice(
                    **{
                        **{k: d.get(k) for k in _DEVICE_FIELDS if k in d},
                        "simulated": True,
                        "capabilities": {**d.get("capabilities", {}), "replayed_from": str(path)},
                    }
                )
                for d in header.get("devices", [])
            ]
        except (TypeError, AttributeError) as e:
            raise ValueError(f"line 1: malformed device in the trace header ({e})") from None
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


_DEVICE_FIELDS = tuple(f.name for f in dataclasses.fields(GpuDevice))
