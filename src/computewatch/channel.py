"""The channel from user code to the sampler: append-only spool files, one per process.

``step()`` in user code only appends a tuple to a deque; a daemon thread packs the records every
``FLUSH_SECONDS`` and appends them to ``steps-PID.bin`` in the run's spool directory. The sampler
tails those files each tick. Files rather than a pipe or socket: writers never block on a slow or
dead sampler, any number of processes (DataLoader workers, torchrun ranks) can write without
coordination, and a killed sampler loses nothing that a later reader cannot pick up.
"""

from __future__ import annotations

import atexit
import json
import math
import os
import struct
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ENV_RUN_ID = "COMPUTEWATCH_RUN_ID"
ENV_SPOOL = "COMPUTEWATCH_SPOOL"

MAGIC = b"CWSTEP1\n"
RECORD = struct.Struct("<ddd")  # monotonic seconds, samples, tokens (NaN = not given)
FLUSH_SECONDS = 0.25
_NAN = math.nan


@dataclass(frozen=True, slots=True)
class StepRecord:
    pid: int
    mono: float
    samples: float | None
    tokens: float | None


class StepWriter:
    """The user-process end: cheap appends, packed and written by a background thread."""

    def __init__(self, spool: str | os.PathLike[str], meta: dict[str, Any]) -> None:
        self._dir = Path(spool)
        self._pid = os.getpid()
        self._buf: deque[tuple[float, float | None, float | None]] = deque()
        self.append = self._buf.append
        """Queue one ``(monotonic time, samples, tokens)`` record; safe from any thread."""
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._file = None
        self.errors = 0
        try:
            self._dir.mkdir(parents=True, exist_ok=True)
            tmp = self._dir / f".meta-{self._pid}.json"
            tmp.write_text(json.dumps({**meta, "pid": self._pid}))
            tmp.replace(self._dir / f"meta-{self._pid}.json")
            self._file = open(self._dir / f"steps-{self._pid}.bin", "ab", buffering=0)  # noqa: SIM115
            if self._file.tell() == 0:
                self._file.write(MAGIC)
        except OSError:
            self.errors += 1
        self._thread = threading.Thread(target=self._loop, name="computewatch-steps", daemon=True)
        self._thread.start()
        atexit.register(self.close)

    def flush(self) -> None:
        with self._lock:
            buf = self._buf
            n = len(buf)
            if not n:
                return
            if self._file is None:  # no spool file: drop the steps, never grow user memory
                buf.clear()
                return
            pack = RECORD.pack
            recs = [buf.popleft() for _ in range(n)]
            data = b"".join(
                pack(t, _NAN if s is None else s, _NAN if k is None else k) for t, s, k in recs
            )
            try:
                self._file.write(data)
            except OSError:  # a full disk loses steps, never the user's job
                self.errors += 1

    def _loop(self) -> None:
        while not self._stop.wait(FLUSH_SECONDS):
            self.flush()

    def close(self) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=2.0)
        self.flush()
        if self._file is not None:
            try:
                self._file.close()
            except OSError:
                pass
        atexit.unregister(self.close)


class SpoolReader:
    """The sampler end: picks up complete new records and metadata from every writer."""

    def __init__(self, spool: str | os.PathLike[str]) -> None:
        self.dir = Path(spool)
        self._offsets: dict[Path, int] = {}
        self._metas: dict[int, dict[str, Any]] = {}
        self._fresh: list[tuple[int, dict[str, Any]]] = []
        self._fds: dict[Path, int] = {}
        self._names: list[str] = []
        self._dir_mtime: int | None = None

    def poll(self) -> list[StepRecord]:
        out: list[StepRecord] = []
        try:
            # Writers only append to their files after creating them: while the directory's
            # mtime stands still, the known files are all there is to read. File times are
            # coarse (a few ms), so a directory changed in the last second is listed anyway.
            mtime = os.stat(self.dir).st_mtime_ns
            if mtime != self._dir_mtime or time.time_ns() - mtime < 1_000_000_000:
                self._names = os.listdir(self.dir)
                self._dir_mtime = mtime
        except OSError:
            return out
        for name in self._names:
            if name.startswith("meta-") and name.endswith(".json"):
                if not name[5:-5].isdigit():
                    continue
                pid = int(name[5:-5])
                if pid not in self._metas:
                    try:
                        meta = json.loads((self.dir / name).read_text())
                    except (OSError, ValueError):
                        continue
                    self._metas[pid] = meta
                    self._fresh.append((pid, meta))
                continue
            if not (name.startswith("steps-") and name.endswith(".bin")):
                continue
            if not name[6:-4].isdigit():
                continue
            pid = int(name[6:-4])
            path = self.dir / name
            off = self._offsets.get(path, len(MAGIC))
            fd = self._fds.get(path)
            try:
                if fd is None:  # kept open: a tick's poll is one pread per writer
                    fd = self._fds[path] = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
                data = _pread_all(fd, off)
            except OSError:
                continue
            usable = len(data) - len(data) % RECORD.size
            for mono, samples, tokens in RECORD.iter_unpack(data[:usable]):
                out.append(
                    StepRecord(
                        pid,
                        mono,
                        None if math.isnan(samples) else samples,
                        None if math.isnan(tokens) else tokens,
                    )
                )
            self._offsets[path] = off + usable
        return out

    def new_metas(self) -> list[tuple[int, dict[str, Any]]]:
        """Metadata of writers that appeared in the polls since the last call."""
        fresh, self._fresh = self._fresh, []
        return fresh

    def close(self) -> None:
        for fd in self._fds.values():
            try:
                os.close(fd)
            except OSError:
                pass
        self._fds.clear()

    def remove(self) -> None:
        """Delete the spool once everything in it is stored."""
        self.close()
        try:
            for p in self.dir.iterdir():
                p.unlink(missing_ok=True)
            self.dir.rmdir()
        except OSError:
            pass


def _pread_all(fd: int, offset: int) -> bytes:
    chunks: list[bytes] = []
    while True:
        chunk = os.pread(fd, 1 << 20, offset)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        offset += len(chunk)


def now() -> float:
    """The clock every step and tick is stamped with (CLOCK_MONOTONIC, system-wide)."""
    return time.monotonic()
