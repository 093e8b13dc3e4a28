"""``computewatch push``: send the runs a server does not hold yet, in batches.

The local store is the spool. Its ``uploads`` table remembers, per server, the last upload
sequence number of each run and whether its finished state went; a run is marked only once
the server has answered for it. A run whose upload was lost on the way (the server killed
mid-request) is sent again with the same ``seq``: the server keeps one copy and answers
``stored: false`` for what it already has, so pushing twice stores once.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from computewatch import jsonout
from computewatch.store import RUNNING, RunRow, Store
from computewatch.upload.client import BodyTooLarge, Client, UploadError
from computewatch.upload.payload import LiveRun, build_upload, current_user
from computewatch.upload.protocol import (
    MAX_BODY_BYTES,
    MAX_POINTS,
    MAX_RUNS_PER_BATCH,
    PROTOCOL_VERSION,
    RunUpload,
)
from computewatch.upload.signing import ReportSigner

__all__ = ["Planned", "PushReport", "plan_push", "push_runs", "upload_run"]

_MIN_POINTS = 10
"""The fewest buckets per series a run is shrunk to when it does not fit in one request."""


@dataclass(frozen=True, slots=True)
class Planned:
    """One run to send, numbered ``seq``."""

    run: RunRow
    seq: int


@dataclass(slots=True)
class PushReport:
    """What a push did: ids the server ``stored`` now, ids it ``already`` held, runs
    ``skipped`` with why, and the ``error`` that stopped it (the rest waits locally)."""

    server: str
    stored: list[str] = field(default_factory=list)
    already: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    error: UploadError | None = None
    notes: list[str] = field(default_factory=list)
    bytes_sent: int = 0
    """JSON bytes sent (before compression)."""
    wire_bytes: int = 0
    """Bytes sent on the wire (compressed)."""
    seconds: float = 0.0

    def as_dict(self) -> dict[str, object]:
        return {
            "server": self.server,
            "stored": self.stored,
            "already": self.already,
            "skipped": [{"id": i, "reason": why} for i, why in self.skipped],
            "error": str(self.error) if self.error is not None else None,
            "notes": self.notes,
            "bytes_sent": self.bytes_sent,
            "wire_bytes": self.wire_bytes,
            "seconds": round(self.seconds, 3),
        }


def plan_push(
    store: Store,
    server: str,
    runs: Sequence[RunRow] | None = None,
    *,
    everything: bool = False,
) -> tuple[list[Planned], list[tuple[str, str]]]:
    """Which runs to send, and which not (id, why).

    Default (no ``runs``, not ``everything``): every finished run whose finished state the
    server does not hold. ``runs`` or ``everything``: those runs whatever their state (a
    running one goes as it is now); one already sent finished is sent again with the same
    ``seq``, which the server answers with ``stored: false`` unless it lost it."""
    done = store.uploaded(server)
    chosen = list(runs) if runs is not None else store.list_runs()
    plan: list[Planned] = []
    skipped: list[tuple[str, str]] = []
    explicit = runs is not None or everything
    for run in sorted(chosen, key=lambda r: (r.started_at, r.key)):
        last_seq, final = done.get(run.key, (0, False))
        finished = run.status != RUNNING
        if final and finished:
            if explicit:
                plan.append(Planned(run, last_seq))
            else:
                skipped.append((run.id, "already uploaded"))
        elif not finished and not explicit:
            skipped.append((run.id, "still running (streamed while it runs, pushed at its end)"))
        else:
            plan.append(Planned(run, last_seq + 1))
    return plan, skipped


def _encoded(
    store: Store,
    item: Planned,
    project: str | None,
    user: str,
    live: LiveRun | None = None,
    signer: ReportSigner | None = None,
) -> tuple[RunUpload, bytes] | str:
    """A run's upload and its JSON, shrunk to fewer points per series while it is larger
    than one request may be; a reason string when even the smallest does not fit. With a
    ``signer``, the upload carries its signed usage report (``signed_report``)."""
    points = MAX_POINTS
    while True:
        upload = build_upload(
            store,
            item.run,
            seq=item.seq,
            project=project,
            max_points=points,
            user=user,
            live=live,
        )
        if signer is not None:
            signer.sign(upload)
        body = jsonout.dumps(upload, separators=(",", ":")).encode()
        if len(body) + 64 <= MAX_BODY_BYTES:
            return upload, body
        if points <= _MIN_POINTS:
            return f"larger than one upload may be ({len(body):,} bytes)"
        points = max(_MIN_POINTS, points // 4)


def _batches(
    store: Store,
    plan: Iterable[Planned],
    project: str | None,
    skipped: list[tuple[str, str]],
    live: Mapping[str, LiveRun],
    signer: ReportSigner | None = None,
) -> Iterator[list[tuple[Planned, bytes]]]:
    user = current_user()
    batch: list[tuple[Planned, bytes]] = []
    size = 0
    for item in plan:
        made = _encoded(store, item, project, user, live.get(item.run.id), signer)
        if isinstance(made, str):
            skipped.append((item.run.id, made))
            continue
        _, body = made
        if batch and (len(batch) >= MAX_RUNS_PER_BATCH or size + len(body) + 64 > MAX_BODY_BYTES):
            yield batch
            batch, size = [], 0
        batch.append((item, body))
        size += len(body) + 1
    if batch:
        yield batch


def _body(batch: Sequence[tuple[Planned, bytes]]) -> bytes:
    head = f'{{"protocol":{PROTOCOL_VERSION},"runs":['.encode()
    return head + b",".join(b for _, b in batch) + b"]}"


def push_runs(
    store: Store,
    client: Client,
    plan: Sequence[Planned],
    *,
    server: str,
    project: str | None = None,
    timeout: float | None = None,
    live: Mapping[str, LiveRun] | None = None,
    signer: ReportSigner | None = None,
    deadline: float | None = None,
) -> PushReport:
    """Send ``plan`` in batches (at most ``MAX_RUNS_PER_BATCH`` runs and ``MAX_BODY_BYTES``
    each) and mark each run uploaded once the server has answered for it. Stops at the
    first failure (``report.error``); what was not answered for stays unmarked. ``live``:
    what the live uploader keeps of a run across uploads, by run id; ``signer``: signs each
    upload with the node key (when it cannot, the runs go unsigned and ``report.notes`` says
    why)."""
    report = PushReport(server=client.shown_url)
    started = time.monotonic()
    kept = live or {}
    again = _send_plan(
        store, client, plan, server, project, timeout, kept, signer, deadline, report
    )
    if again and report.error is None:
        # uploads whose points continued one the server does not hold as the latest: once
        # more, whole (each LiveRun now builds the whole state)
        _send_plan(store, client, again, server, project, timeout, kept, signer, deadline, report)
    report.seconds = time.monotonic() - started
    notice = signer.notice() if signer is not None else None
    if notice is not None:
        report.notes.append(notice)
    return report


def _send_plan(
    store: Store,
    client: Client,
    plan: Sequence[Planned],
    server: str,
    project: str | None,
    timeout: float | None,
    live: Mapping[str, LiveRun],
    signer: ReportSigner | None,
    deadline: float | None,
    report: PushReport,
) -> list[Planned]:
    """Send ``plan`` in batches into ``report``; the runs the server asked to send whole."""
    again: list[Planned] = []
    for batch in _batches(store, plan, project, report.skipped, live, signer):
        body = _body(batch)
        before = client.wire_bytes
        try:
            answer = client.ingest_body(body, timeout=timeout, deadline=deadline)
        except BodyTooLarge as e:
            if len(batch) == 1:
                report.skipped.append((batch[0][0].run.id, str(e)))
                continue
            report.error = e
            break
        except UploadError as e:
            report.error = e
            break
        report.bytes_sent += len(body)
        report.wire_bytes += client.wire_bytes - before
        by_id = {r["id"]: r for r in answer["results"]}
        features = answer.get("features") or []
        for item, _ in batch:
            result = by_id.get(item.run.id)
            if result is None:
                report.skipped.append((item.run.id, "the server did not answer for it"))
                continue
            kept = live.get(item.run.id)
            if kept is not None:
                kept.answered(item.seq, result, features)
            if result.get("needs_full"):
                again.append(item)
                continue
            try:
                store.mark_uploaded(
                    item.run.key,
                    server,
                    seq=max(item.seq, int(result["seq"])),
                    final=item.run.status != RUNNING,
                )
            except sqlite3.Error as e:  # read-only, locked: the next push sends it again
                report.notes.append(f"cannot remember that run {item.run.id} went: {e}")
            (report.stored if result["stored"] else report.already).append(item.run.id)
    return again


def upload_run(
    store: Store,
    client: Client,
    run: RunRow,
    *,
    server: str,
    seq: int,
    project: str | None = None,
    timeout: float | None = None,
    live: LiveRun | None = None,
    signer: ReportSigner | None = None,
    deadline: float | None = None,
) -> tuple[int, list[str]]:
    """Send one run's current state as ``seq`` and mark it: the bytes sent on the wire (0 when
    the server did not answer for it) and the push's notes. Raises :class:`UploadError`."""
    report = push_runs(
        store,
        client,
        [Planned(run, seq)],
        server=server,
        project=project,
        timeout=timeout,
        live={run.id: live} if live is not None else None,
        signer=signer,
        deadline=deadline,
    )
    if report.error is not None:
        raise report.error
    return (report.wire_bytes if report.stored or report.already else 0), report.notes
