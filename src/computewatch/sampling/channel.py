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
import sys
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

from computewatch.paths import make_private_dirs
from computewatch.records import Event, PhaseRecord, RequestRecord, StepRecord

ENV_RUN_ID = "COMPUTEWATCH_RUN_ID"
ENV_MODEL = "COMPUTEWATCH_MODEL"
"""The model a ``computewatch run --model NAME`` declares, in its command's environment (the node
agent's training detection reads it)."""
ENV_STAGE = "COMPUTEWATCH_STAGE"
ENV_SPOOL = "COMPUTEWATCH_SPOOL"

MAGIC = b"CWSTEP2\n"
RECORD = struct.Struct("<B3xI5d")
"""One event: kind, name id, five doubles (meaning by kind; NaN = not given). 48 bytes."""
NAME_BYTES = 40  # a NAME record carries the name's UTF-8 bytes in place of the five doubles
FLUSH_SECONDS = 0.25
_NAN = math.nan

# Record kinds. A name (phase, request kind, setting) is declared once per writer by a NAME
# record before the first record that uses its id.
STEP = 1  # d0 monotonic end, d1 samples, d2 tokens, d3 FLOPs
PHASE = 2  # name; d0 start, d1 end (monotonic), d2 accelerator seconds (CUDA events)
REQUEST = 3  # name; d0 start, d1 end, d2 tokens in, d3 tokens out, d4 1 = ok, 0 = error
NAME = 4  # id; the name's UTF-8 bytes, NUL-padded
SETTING = 5  # name; d0 value (flops_per_step, recompute factor ...)


_warned: set[str] = set()


def warn_once(key: str, message: str, said: set[str] | None = None) -> None:
    """Say ``message`` on standard error, once per ``key`` (per process, or per ``said`` set);
    never raise: user code and its threads must not pay for the monitor's failures."""
    said = _warned if said is None else said
    if key in said:
        return
    said.add(key)
    try:
        err = sys.stderr
        if err is not None:
            err.write(f"computewatch: warning: {message}\n")
            err.flush()
    except Exception:  # a closed or broken stderr: nowhere left to say it
        pass


class StepWriter:
    """The user-process end: cheap appends, packed and written by a background thread.

    ``append`` takes ``(kind, name id, d0, d1, d2, d3, d4)`` tuples, or for a plain step the
    short ``(mono, samples, tokens)`` form kept for the hot path."""

    def __init__(self, spool: str | os.PathLike[str], meta: dict[str, Any]) -> None:
        self._dir = Path(spool)
        self._pid = os.getpid()
        self._buf: deque[tuple[Any, ...]] = deque()
        self.append = self._buf.append
        """Queue one record; safe from any thread (deque appends are atomic)."""
        self._names: dict[str, int] = {}
        self._names_lock = threading.Lock()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._file = None
        self.errors = 0
        self._said: set[str] = set()  # the failures already warned about (once each)
        try:
            make_private_dirs(self._dir)  # 0700: the run's events, the user's alone
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

    def name_id(self, name: str) -> int:
        """The id of ``name`` in this writer's stream, declaring it on first use."""
        nid = self._names.get(name)
        if nid is not None:
            return nid
        with self._names_lock:
            nid = self._names.get(name)
            if nid is None:
                nid = len(self._names) + 1
                raw = name.encode("utf-8")[:NAME_BYTES]
                self._buf.append((NAME, nid, raw, None))  # four items: not a short step
                self._names[name] = nid
        return nid

    def flush(self) -> None:
        """Pack the queued records and append them to the spool file. Never raises: a record
        that cannot be packed is dropped alone, a failed write (a full disk, a file-size
        limit) loses that batch; each kind of failure is said once on standard error."""
        with self._lock:
            buf = self._buf
            n = len(buf)
            if not n:
                return
            if self._file is None:  # no spool file: drop the records, never grow user memory
                buf.clear()
                return
            recs = [buf.popleft() for _ in range(n)]
            try:
                data = b"".join(map(_pack, recs))
            except Exception:  # one bad record must not take the others with it
                data = self._pack_each(recs)
            self._write(self._file, data)

    def _pack_each(self, recs: list[tuple[Any, ...]]) -> bytes:
        out = []
        for rec in recs:
            try:
                out.append(_pack(rec))
            except Exception as e:
                self.errors += 1
                warn_once(
                    "pack", f"a step record could not be stored and was dropped ({e})", self._said
                )
        return b"".join(out)

    def _write(self, f: Any, data: bytes) -> None:
        """Append ``data`` whole or not at all: a partial write is cut back, so the reader's
        fixed-size records stay aligned after a full disk."""
        start = None
        try:
            start = os.lseek(f.fileno(), 0, os.SEEK_END)
            view = memoryview(data)
            while view:
                view = view[f.write(view) :]
        except OSError as e:  # a full disk loses steps, never the user's job
            self.errors += 1
            if start is not None:
                try:
                    os.ftruncate(f.fileno(), start)
                except OSError:
                    pass
            warn_once(
                "write",
                f"steps are being lost: cannot write {self._dir} ({e.strerror or e}); "
                "the program goes on",
                self._said,
            )

    def _loop(self) -> None:
        while not self._stop.wait(FLUSH_SECONDS):
            try:
                self.flush()
            except Exception as e:  # never an exception in the user's process
                warn_once("flush", f"step recording failed ({type(e).__name__}: {e})", self._said)

    def close(self) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=2.0)
        try:
            self.flush()
        except Exception as e:  # flush() says its own failures; anything else, once here
            warn_once("flush", f"step recording failed ({type(e).__name__}: {e})", self._said)
        if self._file is not None:
            try:
                self._file.close()
            except OSError:
                pass
        atexit.unregister(self.close)


_pack_record = RECORD.pack
_NAME_STRUCT = struct.Struct(f"<B3xI{NAME_BYTES}s")


def _pack(rec: tuple[Any, ...]) -> bytes:
    if len(rec) == 3:  # a step: (mono, samples, tokens)
        t, s, k = rec
        return _pack_record(
            STEP, 0, t, _NAN if s is None else s, _NAN if k is None else k, _NAN, _NAN
        )
    kind = rec[0]
    if kind == NAME:
        return _NAME_STRUCT.pack(NAME, rec[1], rec[2])
    return _pack_record(kind, rec[1], *(_NAN if v is None else v for v in rec[2:7]))


def _opt(v: float) -> float | None:
    return None if math.isnan(v) else v


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
        self._idnames: dict[int, dict[int, str]] = {}
        self._settings: dict[int, dict[str, float]] = {}

    def poll(self) -> list[Event]:
        """Every complete record written since the last poll, in file order per writer."""
        out: list[Event] = []
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
                    self._fresh.append((pid, self._meta(pid)))
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
                    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
                    head = os.pread(fd, len(MAGIC), 0)
                    if head != MAGIC:
                        if len(head) == len(MAGIC):  # another format: never read it
                            self._offsets[path] = 1 << 62
                            self._fds[path] = fd
                        else:  # its writer is still writing the header: next poll
                            os.close(fd)
                        continue
                    self._fds[path] = fd
                data = _pread_all(fd, off)
            except OSError:
                continue
            usable = len(data) - len(data) % RECORD.size
            self._decode(pid, data[:usable], out)
            self._offsets[path] = off + usable
        return out

    def _decode(self, pid: int, data: bytes, out: list[Event]) -> None:
        names = self._idnames.setdefault(pid, {})
        settings: dict[str, float] | None = None
        unpack_name = _NAME_STRUCT.unpack_from
        for i, rec in enumerate(RECORD.iter_unpack(data)):
            kind = rec[0]
            if kind == STEP:
                out.append(StepRecord(pid, rec[2], _opt(rec[3]), _opt(rec[4]), _opt(rec[5])))
            elif kind == PHASE:
                out.append(PhaseRecord(pid, names.get(rec[1], "?"), rec[2], rec[3], _opt(rec[4])))
            elif kind == REQUEST:
                out.append(
                    RequestRecord(
                        pid,
                        names.get(rec[1], ""),
                        rec[2],
                        rec[3],
                        _opt(rec[4]),
                        _opt(rec[5]),
                        rec[6] != 0.0,
                    )
                )
            elif kind == NAME:
                raw = unpack_name(data, i * RECORD.size)[2]
                names[rec[1]] = raw.rstrip(b"\0").decode("utf-8", "replace")
            elif kind == SETTING:
                settings = settings if settings is not None else {}
                settings[names.get(rec[1], "?")] = rec[2]
        if settings:  # kept apart from the metadata file, which may not be read yet
            self._settings.setdefault(pid, {}).update(settings)
            if pid in self._metas:  # given out again, as fresh, with its settings
                self._fresh.append((pid, self._meta(pid)))

    def _meta(self, pid: int) -> dict[str, Any]:
        """A writer's metadata with the settings its records declared so far."""
        meta = self._metas[pid]
        settings = self._settings.get(pid)
        return {**meta, "settings": dict(settings)} if settings else meta

    def new_metas(self) -> list[tuple[int, dict[str, Any]]]:
        """Metadata of writers that appeared (or changed their settings) since the last call."""
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
