"""The upload protocol between a machine's local store and ``computewatch server``: the JSON
documents that travel, as typed records. Both sides import these names; docs/server.md describes
the same fields for anyone writing their own client.

A client sends ``POST /api/v1/runs`` with an :class:`IngestBatch`. Each :class:`RunUpload` carries
the run's whole current state (not a delta): its identity, status, summary (what ``show --json``
prints, secrets already redacted), the documents recorded beside it (configuration, environment,
governance declaration, ...) and its series downsampled to at most :data:`MAX_POINTS` buckets.
``seq`` grows with every upload of a run; the server keeps the highest and answers an upload whose
``seq`` it already holds with ``stored: false``: uploading twice stores once.

What a server accepts is said once, as Pydantic models, in :mod:`computewatch.upload.schema`
(which validates a batch and describes it in the OpenAPI document); these typed records are the
same fields for the code that builds and reads them, without Pydantic (the client needs none).

The body is JSON (``Content-Type: application/json``), optionally gzip-compressed with
``Content-Encoding: gzip``, which every protocol-1 server accepts (the client sends it so by
default; :data:`MAX_BODY_BYTES` counts the uncompressed JSON).

A run upload may carry ``signed_report`` (:class:`SignedReport`, additive within protocol 1: a
server that does not know it ignores it): a small usage report signed with the sending node's
Ed25519 key (``$COMPUTEWATCH_HOME/node-key.pem``), whose ``summary_sha256``/``meta_sha256`` are
the SHA-256 of the canonical JSON (computewatch.ledger.chain.canonical) of exactly the
``summary`` and ``meta`` of the same upload, so the signature binds the uploaded numbers. The
server checks it against the node keys registered for the uploading team
(computewatch.ledger.reports; docs/upload.md, "Signed usage reports").
"""

from __future__ import annotations

from typing import Any, Final, Literal, NotRequired, TypedDict, get_args

PROTOCOL_VERSION: Final = 1
"""Bumped on any change a server of the previous version could not read."""

PROTOCOL_HEADER: Final = "X-Computewatch-Protocol"
"""Request header carrying :data:`PROTOCOL_VERSION` (also the batch's ``protocol`` field)."""

MAX_POINTS: Final = 600
"""Buckets per uploaded series at most (min/mean/max each, as the report downsamples)."""

MAX_RUNS_PER_BATCH: Final = 100
MAX_BODY_BYTES: Final = 16 * 1024 * 1024
"""What one ingest request may hold; larger is refused with 413 before anything is stored."""

MAX_SERIES_PER_RUN: Final = 500
MAX_MAGNITUDE: Final = 1e300
"""A series' values are finite and smaller than this in magnitude (a sum of many stays finite)."""
MAX_DOC_DEPTH: Final = 64
"""Nesting of a run's ``summary``, ``meta`` and ``signed_report`` at most (objects and lists)."""

EARLIEST_TIME: Final = 946_684_800.0
"""2000-01-01T00:00:00Z: a run's ``started_at``/``ended_at`` before it is refused (a machine
whose clock was never set)."""
FUTURE_SLACK_SECONDS: Final = 86_400.0
"""How far past the server's clock a run's times may be (clocks drift; a day is not drift)."""

RunStatus = Literal["running", "completed", "failed", "interrupted"]
"""A run's status, as the local store keeps it (computewatch.store: RUNNING, COMPLETED, ...)."""
RUN_STATUSES: Final[tuple[str, ...]] = get_args(RunStatus)

SeriesKind = Literal["gauge", "rate"]
RUN_ID_PATTERN: Final = r"^[A-Za-z0-9_.:-]{1,64}$"
"""A run's id: 1 to 64 letters, digits, ``_ . : -`` (a local run's id is a hex UUID)."""


class SeriesUpload(TypedDict):
    name: str
    """The stored series name (``gpu.utilization``, ``cpu.percent``, ...)."""
    labels: dict[str, str]
    bucket_seconds: float
    """Width of each bucket; 0 when the points are the raw samples."""
    points: list[list[float]]
    """``[t, min, mean, max]`` per bucket, ``t`` the bucket's start (Unix seconds)."""
    kind: NotRequired[SeriesKind]
    """``gauge``: the values as sampled; ``rate``: a cumulative counter (``..._total``) as its
    per-second rate between consecutive samples, before bucketing (the counter itself stays
    local). Absent: ``gauge``. Added in protocol 1 (additive: a server may ignore it)."""


class SignedReport(TypedDict):
    """A usage report as a node signs it (computewatch.ledger.reports.REPORT_FIELDS)."""

    run_id: str
    seq: int
    final: bool
    status: str
    exit_code: int | None
    started_at: float
    ended_at: float | None
    summary_sha256: str
    """SHA-256 (hex) of the canonical JSON of this upload's ``summary`` (``null`` if None)."""
    meta_sha256: str
    """SHA-256 (hex) of the canonical JSON of this upload's ``meta``."""
    figures: NotRequired[dict[str, Any] | None]
    """The run's figures as its ledger entry holds them (computewatch.ledger.reports
    .FIGURE_FIELDS; null when it declares no model). Reports of the first format have none."""
    signed_by: str
    """The signing key's id: the first 16 hex digits of the SHA-256 of its 32 raw bytes."""
    signature: str
    """Base64 Ed25519 signature of ``computewatch-signed-report:v2:`` + the RFC 8785 canonical
    JSON of the report without ``signature`` (``v1`` and Python-spelled canonical JSON in the
    first format, without ``figures``; docs/ledger.md)."""


class RunUpload(TypedDict):
    id: str
    """The run's id in the local store (a UUID, hex)."""
    seq: int
    """Upload sequence number of this run, from 1, growing with each upload."""
    final: bool
    """True once the run has ended: its summary is the last one."""
    name: str | None
    status: RunStatus
    exit_code: int | None
    started_at: float
    """Unix seconds, from :data:`EARLIEST_TIME` to a day past the server's clock."""
    ended_at: float | None
    """Unix seconds, not before ``started_at``; null while the run runs."""
    host: str
    """The machine's host name."""
    user: str
    project: str | None
    """The ``project`` tag, else the configuration's ``[server] project``, else null."""
    tags: dict[str, str]
    command: list[str]
    """The command line, secrets redacted (computewatch.redact)."""
    summary: dict[str, Any] | None
    """The run's summary document, as ``computewatch show --json`` prints it."""
    meta: dict[str, Any]
    """Documents recorded with the run, by kind (``config``, ``environment``, ...)."""
    series: list[SeriesUpload]
    signed_report: NotRequired[SignedReport]
    """The node's signed usage report of this upload; absent when the client does not sign
    (``[server] sign = false``, no readable key). Added in protocol 1 (additive)."""
    series_base: NotRequired[int | None]
    """Absent or null: ``series`` is the run's every series, replacing what the server held.
    A seq: ``series`` continues the upload of that seq, which must be the run's latest on the
    server: each series holds its points from its first new bucket on (the one the last upload
    left open included) and replaces the server's points from that bucket's time on; a series
    left out keeps its points. The server answers ``needs_full`` when it does not hold that
    upload as the latest. Sent only to a server whose answers list
    :data:`FEATURE_SERIES_BASE` in ``features``. Added in protocol 1 (additive)."""


class IngestBatch(TypedDict):
    protocol: int
    runs: list[RunUpload]


class IngestResult(TypedDict):
    id: str
    seq: int
    stored: bool
    """False when the server already held this run at this ``seq`` or a later one, or (with
    ``needs_full``) when the points continue an upload it does not hold as the latest."""
    needs_full: NotRequired[bool]
    """True when the upload's ``series_base`` is not the run's latest seq on the server:
    nothing of it was stored; send the run's whole state (no ``series_base``)."""


class IngestResponse(TypedDict):
    protocol: int
    results: list[IngestResult]
    features: NotRequired[list[str]]
    """What this server understands beyond the protocol's base (:data:`FEATURE_SERIES_BASE`);
    absent from older servers."""


FEATURE_SERIES_BASE: Final = "series_base"
"""A server that lists this in ``features`` stores uploads whose ``series_base`` names the
upload their points continue (:class:`RunUpload`)."""
