"""Live uploads of a running run, off the job's path.

A :class:`LiveUploader` is a daemon thread in the process that stores the run (the
supervisor of ``computewatch run``, the sampler process of ``track()``). Every
``stream_interval`` seconds (default 10) it reads the run's current state from the local store
through a connection of its own and uploads it; it never touches the sampler, which keeps
ticking whatever the network does. The queue holds one item, the run's latest state: a state
not sent yet is replaced by the next one, so nothing piles up behind a slow server. Failures
wait with exponential backoff and jitter, capped; a server that refuses the token stops the
stream. Each upload's cost spaces the next: the thread waits at least ten times what the last
upload took, so building a long run's payload never takes more than about a tenth of a core,
and long enough to average :data:`STREAM_BYTES_PER_SECOND` on the wire. Uploads keep the run's
own beat (:func:`next_beat`: its first upload's time plus whole intervals), not "an interval
after the last answer": when a server is slow for a moment, the runs it answered together would
otherwise all come back together, an interval later, every interval. The run's series and
the summary's aggregates are kept between uploads (:class:`~computewatch.upload.payload.LiveRun`):
each upload reads only what was stored since the one before, so a long run's uploads and its
final one stay cheap.

At the end, :meth:`LiveUploader.close` makes one final attempt with a short total deadline
(2 s by default) and leaves whatever did not go to the next ``computewatch push``, saying so
in one line on standard error.
"""

from __future__ import annotations

import math
import random
import sqlite3
import sys
import threading
import time
from pathlib import Path
from typing import Protocol, TextIO

from computewatch.analysis.summary_types import RunSummary
from computewatch.errors import PROG, ComputewatchError
from computewatch.store import RUNNING, Store, StoreError
from computewatch.upload.client import Client, ServerBusy, UploadError, busy_delay
from computewatch.upload.payload import LiveRun
from computewatch.upload.push import upload_run
from computewatch.upload.settings import ServerSettings
from computewatch.upload.signing import ReportSigner

__all__ = [
    "FINAL_DEADLINE",
    "MAX_BACKOFF",
    "STREAM_BYTES_PER_SECOND",
    "LiveUploader",
    "backoff_delay",
    "next_beat",
    "next_upload",
]

FINAL_DEADLINE = 2.0
"""Seconds the end of a run may wait for its final upload, all included."""
MAX_BACKOFF = 120.0
"""Longest wait between two attempts while the server fails."""
STREAM_BYTES_PER_SECOND = 16 * 1024
"""What a live stream may average on the wire (gzip-compressed bytes): a long run's state
(about 1 MiB compressed at 150 series) goes every minute or so, at most about 1.4 GB a day per
run."""
_COST_FACTOR = 10.0
_REQUEST_TIMEOUT = 10.0


def next_beat(anchor: float, after: float, interval: float) -> float:
    """The first ``anchor + k * interval`` (k a whole number) at or after ``after``."""
    return anchor + math.ceil((after - anchor) / interval - 1e-9) * interval


def next_upload(
    anchor: float, due: float, began: float, took: float, sent: int, interval: float
) -> float:
    """When the upload after one answered (begun at ``began`` for the beat ``due``, taking
    ``took`` seconds, ``sent`` bytes) goes: the first beat of ``anchor`` after ``due`` at which
    it has waited ten times its time and averaged :data:`STREAM_BYTES_PER_SECOND`, and at least
    half an interval after ``began`` (back on the beat after a backoff)."""
    return next_beat(
        anchor,
        max(
            due + interval,
            began + interval / 2,
            began + _COST_FACTOR * took,
            began + sent / STREAM_BYTES_PER_SECOND,
        ),
        interval,
    )


def backoff_delay(
    failures: int, base: float, cap: float = MAX_BACKOFF, rng: random.Random | None = None
) -> float:
    """Seconds to wait after ``failures`` failures in a row: ``base * 2**(failures-1)``,
    capped at ``cap``, then a uniform draw from its upper half ("equal jitter"), so clients
    that failed together do not retry together."""
    delay = min(cap, base * 2.0 ** max(0, failures - 1))
    r = rng if rng is not None else random
    return r.uniform(delay / 2.0, delay)


class _HasRunId(Protocol):
    @property
    def run_id(self) -> str: ...


class LiveUploader:
    """Streams one run to the server; shaped as a run observer (``start``, ``on_tick``,
    ``finish``), so ``computewatch run`` adds it beside ``--prometheus`` and ``--alerts``."""

    def __init__(
        self,
        settings: ServerSettings,
        db_path: Path,
        *,
        stderr: TextIO | None = None,
        final_deadline: float = FINAL_DEADLINE,
        max_backoff: float = MAX_BACKOFF,
        total_steps: int | None = None,
        precision: str | None = None,
    ) -> None:
        """``total_steps``, ``precision``: the run's ``--total-steps`` and precision, for the
        FLOPs and their forecast that each live upload carries (docs/upload.md)."""
        self.settings = settings
        self.db_path = Path(db_path)
        self.client = Client(settings.url, settings.token, timeout=_REQUEST_TIMEOUT)
        self.stderr = stderr
        self.final_deadline = final_deadline
        self.max_backoff = max_backoff
        self.run_id: str | None = None
        self.uploads = 0
        """Live uploads the server answered for."""
        self.failures = 0
        """Live uploads that failed (each retried later)."""
        self.bytes_sent = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._closed = False
        self._seq = 0
        self._refused: UploadError | None = None
        self._thread: threading.Thread | None = None
        self._rng = random.Random()
        self._live = LiveRun(total_steps=total_steps, precision=precision)
        """The run's series and summary aggregates, read since the last upload only."""
        self._series_lock = threading.Lock()
        self._said: set[str] = set()
        self.signer = ReportSigner(enabled=settings.sign)
        """Signs every upload with the node key; when it cannot, they go unsigned and
        standard error says so once."""

    # -- the observer's side ------------------------------------------------------------------
    def start(self, run: _HasRunId) -> None:
        self.begin(run.run_id)

    def on_tick(self, tick: object) -> None:
        """Nothing: the thread reads the store on its own clock, never the sampler's."""

    def finish(self, status: str, summary: RunSummary | None) -> None:
        self.close()

    # -- the stream ---------------------------------------------------------------------------
    def begin(self, run_id: str) -> None:
        """Start streaming ``run_id`` (already created in the store at ``db_path``)."""
        self.run_id = run_id
        self._thread = threading.Thread(target=self._loop, name="cw-upload", daemon=True)
        self._thread.start()

    def _next_seq(self, store: Store, run_key: int) -> int:
        held = store.uploaded(self.settings.url).get(run_key, (0, False))[0]
        self._seq = max(self._seq, held) + 1
        return self._seq

    def _send(self, store: Store, run_key: int, timeout: float) -> int:
        """Build and send the run's state now; the bytes sent."""
        run = store.run_by_key(run_key)
        with self._lock:
            if self._closed:
                return 0
            seq = self._next_seq(store, run_key)
        with self._series_lock:
            sent, notes = upload_run(
                store,
                self.client,
                run,
                server=self.settings.url,
                seq=seq,
                project=self.settings.project,
                timeout=timeout,
                live=self._live,
                signer=self.signer,
                # a busy server is not waited on here, holding the series: the loop asks
                # again after the time it named (see _loop)
                deadline=time.monotonic(),
            )
        self._notes(notes)
        return sent

    def _loop(self) -> None:
        interval = self.settings.stream_interval
        wait = min(interval, 1.0)  # the first upload soon: the run shows as running
        anchor = due = time.monotonic() + wait  # the run's beat; due: the next upload's
        failures = 0
        store: Store | None = None
        run_key: int | None = None
        try:
            while not self._stop.wait(wait):
                began = time.monotonic()
                try:
                    if store is None:
                        store = Store.open(self.db_path, create=False, busy_timeout=1.0)
                    if run_key is None:
                        assert self.run_id is not None
                        run_key = store.find_run(self.run_id).key
                    if store.run_by_key(run_key).status != RUNNING:
                        return  # ended: the final upload is close()'s
                    sent = self._send(store, run_key, min(_REQUEST_TIMEOUT, interval))
                except UploadError as e:
                    if not e.retryable:  # a bad token, another protocol: retrying cannot help
                        self._refused = e
                        return
                    failures += 1
                    self.failures += 1
                    wait = backoff_delay(failures, interval, self.max_backoff, self._rng)
                    if isinstance(e, ServerBusy):  # not sooner than the server asked
                        wait = max(wait, busy_delay(e.retry_after, failures, self._rng))
                    continue
                except (ComputewatchError, sqlite3.Error, OSError):
                    # the run not in this store (left to the spool), the store locked: later
                    failures += 1
                    self.failures += 1
                    wait = backoff_delay(failures, interval, self.max_backoff, self._rng)
                    continue
                failures = 0
                self.uploads += 1
                self.bytes_sent += sent
                due = next_upload(anchor, due, began, time.monotonic() - began, sent, interval)
                wait = max(0.0, due - time.monotonic())
        except Exception:  # never the job's problem; the final upload still tries
            self.failures += 1
        finally:
            if store is not None:
                store.close()

    def close(self) -> bool:
        """Stop streaming and make the final upload within ``final_deadline`` seconds; True
        when the server has the finished run. Otherwise one line on ``stderr`` says the run
        waits in the local store for ``computewatch push``."""
        self._stop.set()
        with self._lock:
            self._closed = True
        if self.run_id is None:
            return False
        refused = self._refused
        if refused is not None and not refused.retryable:
            self._say(str(refused))
            return False
        outcome: list[BaseException | bool] = []
        deadline = time.monotonic() + self.final_deadline
        final = threading.Thread(
            target=self._final, args=(outcome, deadline), name="cw-upload-final", daemon=True
        )
        final.start()
        final.join(max(0.0, deadline - time.monotonic()))
        if not outcome:
            self._say(f"the server at {self.client.shown_url} did not answer in time")
            return False
        result = outcome[0]
        if result is True:
            return True
        self._say(str(result) if isinstance(result, BaseException) else "not sent")
        return False

    def _final(self, outcome: list[BaseException | bool], deadline: float) -> None:
        try:
            with Store.open(self.db_path, create=False, busy_timeout=0.5) as store:
                assert self.run_id is not None
                try:
                    run = store.find_run(self.run_id)
                except StoreError:
                    outcome.append(UploadError("the store does not hold it yet"))
                    return
                with self._lock:
                    seq = self._next_seq(store, run.key)
                # the live thread may be mid-upload: its series if it lets go in time
                held = self._series_lock.acquire(timeout=max(0.0, deadline - time.monotonic()))
                try:
                    sent, notes = upload_run(
                        store,
                        self.client,
                        run,
                        server=self.settings.url,
                        seq=seq,
                        project=self.settings.project,
                        timeout=max(0.1, deadline - time.monotonic()),
                        live=self._live if held else None,
                        signer=self.signer,
                        deadline=deadline,
                    )
                finally:
                    if held:
                        self._series_lock.release()
                self._notes(notes)
                outcome.append(sent > 0)
        except Exception as e:  # said in one line by close(); never raised into the job
            outcome.append(e)

    def _notes(self, notes: list[str]) -> None:
        """The push's notes (that uploads go unsigned, ...), one line each on standard error,
        each said once."""
        out = self.stderr if self.stderr is not None else sys.stderr
        for note in notes:
            if note in self._said:
                continue
            self._said.add(note)
            try:
                out.write(f"{PROG}: run {self.run_id}: {note}\n")
                out.flush()
            except (OSError, ValueError):
                pass

    def _say(self, why: str) -> None:
        out = self.stderr if self.stderr is not None else sys.stderr
        try:
            out.write(
                f"{PROG}: run {self.run_id} not uploaded ({why}); it waits in the local store "
                f"for `{PROG} push`\n"
            )
            out.flush()
        except (OSError, ValueError):
            pass
